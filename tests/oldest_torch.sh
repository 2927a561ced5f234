#!/usr/bin/env bash
# The whole test suite on the oldest torch that pyproject.toml allows, in a fresh virtualenv.
#
#   bash tests/oldest_torch.sh [VENV]      # VENV defaults to .venv-oldest-torch (git ignores it)
#
# Not run by CI: from the package index, torch for Linux is the CUDA build, a multi-GB download
# with its nvidia-* dependencies (the tests still run on the CPU). The version comes from the
# `torch>=X` line of pyproject.toml, so the floor we claim is the one this script tests.
set -euo pipefail
cd "$(dirname "$0")/.."

oldest=$(python3 -c '
import re, tomllib
dependencies = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
print(next(m.group(1) for d in dependencies if (m := re.fullmatch(r"torch>=([0-9.]+)", d))))
')
venv=${1:-.venv-oldest-torch}

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install "torch==$oldest" -e '.[test]'
"$venv/bin/pip" install --no-deps llms-from-scratch==1.0.19  # the book's package, for the comparisons
"$venv/bin/python" -c 'import sympy, torch; print("torch", torch.__version__, "sympy", sympy.__version__)'
"$venv/bin/python" -m pytest -p no:cacheprovider
