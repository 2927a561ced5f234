"""The proof of `derive conform` on its corpus (tests/conform/corpus/)."""
