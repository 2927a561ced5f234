"""The sections of a derivation document, each a list of blocks, the same for every entry of the
registry (an entry lists which it has, `Document.sections`): `introduction` (its words, and the
matrices and their shapes), `steps`, `facts` (its claims, and what it costs), `backward`,
`explicit` (and the worked example); `entries` gives the HTML page its tables of entries."""
