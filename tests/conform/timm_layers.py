"""timm's own attention layer (`timm.layers.attention.Attention`), for the tests of the timm adapter.

timm installs beside torch 2.13 only without its dependencies (`.ci/run` and the README's test
command: ``pip install --no-deps timm``): its wheel asks for torchvision, whose builds here are
tied to other releases of torch. Its package's ``__init__`` imports torchvision (for a norm of
its convolutional models), but the attention module does not: when torchvision is missing, the
two packages ``timm`` and ``timm.layers`` are entered in ``sys.modules`` as bare packages over
timm's own folders, and only ``timm.layers.attention`` (and what it imports) is executed: timm's
code, unchanged. Where timm is not installed the tests skip, except when CI is set: then they
fail (.ci/run installs it).
"""

import importlib
import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest


def timm_attention() -> types.ModuleType:
    """timm.layers.attention, imported as above."""
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        if os.environ.get("CI"):
            pytest.fail("CI is set but timm is missing; install it (see .ci/run)")
        pytest.skip("timm is not installed (with CI set, this is a failure)")
    try:
        return importlib.import_module("timm.layers.attention")
    except ImportError as error:
        if error.name is None or not error.name.startswith("torchvision"):
            raise
    for name in [key for key in sys.modules if key == "timm" or key.startswith("timm.")]:
        del sys.modules[name]  # what the failed import left half-done
    root = Path(next(iter(spec.submodule_search_locations)))
    for name, folder in (("timm", root), ("timm.layers", root / "layers")):
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules[name] = package
    return importlib.import_module("timm.layers.attention")
