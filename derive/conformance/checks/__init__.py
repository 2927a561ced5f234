"""The checks of a run: what the target computed compared with the derivation (`compare`), for a
function, a module, a module called token by token with its cache, and a module's weights."""
