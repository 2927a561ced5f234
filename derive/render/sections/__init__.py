"""The sections of a derivation document, each a list of blocks."""
