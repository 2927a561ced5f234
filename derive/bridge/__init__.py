"""The bridge to torch: the derivation evaluated next to `attention` (`derive check`), and the
worked example. The only part of `derive` that imports torch, inside its functions."""
