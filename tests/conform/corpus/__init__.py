"""The corpus `derive conform` is proved on: correct implementations in every convention it reads
(`correct`), and for every id of the catalogue of mistakes a broken one (`broken`)."""
