"""`derive conform`: anyone's attention checked against the derivation."""
