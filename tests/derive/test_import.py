"""The layout of derive: `import derive` stays light (no torch, no attention), the subpackages
import only the layers below them (no circle, function-level imports included), and the
formatter owns the layout."""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "derive"

#: The pipeline, bottom to top: a layer may import the layers before it, never after.
LAYERS = ["notation", "graph", "calculus", "proofs", "explicit", "codegen", "render", "cli"]
#: The wings touch torch and may use every layer; only cli and the package's facade import them.
#: conform may use bridge, bridge never conform.
WINGS = ["bridge", "conformance"]

PROBE = """
import json, sys
import derive
print(json.dumps({
    "derive": "derive" in sys.modules,
    "torch": "torch" in sys.modules,
    "attention": "attention" in sys.modules,
    "matplotlib": "matplotlib" in sys.modules,
}))
"""


def _probe() -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True, cwd=ROOT
    )
    return json.loads(result.stdout)


def test_import_does_not_import_torch_or_attention():
    probe = _probe()
    assert probe == {"derive": True, "torch": False, "attention": False, "matplotlib": False}


def _modules() -> dict[str, Path]:
    return {
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): path
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def _imports(module: str, path: Path) -> set[str]:
    """Every module of derive that `module` imports, at any depth of its code."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if target.startswith("derive"):
                submodules = {f"{target}.{alias.name}" for alias in node.names}
                found |= submodules if node.module is None else {target, *submodules}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("derive")}
    modules = _modules()
    ancestors = {".".join(module.split(".")[:k]) for k in range(1, module.count(".") + 1)}
    return {name for name in found if name in modules and name != module} - ancestors


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS + WINGS else None


def test_layers_import_downwards_only():
    for module, path in _modules().items():
        mine = _layer(module)
        if mine is None:
            continue  # the facade (derive/__init__.py) and __main__
        for target in _imports(module, path):
            theirs = _layer(target)
            if theirs is None:
                pytest.fail(f"{module} imports the package facade {target}")
            if theirs == mine:
                continue
            if theirs in WINGS:
                allowed = mine == "cli" or WINGS.index(theirs) < WINGS.index(mine)
                assert allowed, f"{module} imports {target}: only cli may use the {theirs} wing"
                continue
            if mine in WINGS:
                continue
            assert LAYERS.index(theirs) < LAYERS.index(mine), f"{module} imports {target}"


def test_no_import_circle():
    modules = _modules()
    graph = {module: _imports(module, path) for module, path in modules.items()}
    assert "derive.notation.lines" in graph["derive.explicit.display"]  # the reader sees imports
    state: dict[str, int] = {}

    def visit(module: str, trail: list[str]) -> None:
        state[module] = 1
        for target in graph[module]:
            target = target if target in graph else target.rpartition(".")[0]
            if state.get(target) == 1 and target != module:
                if module.startswith(target + ".") or target == "derive":
                    continue  # a module and its own package's __init__
                pytest.fail("import circle: " + " -> ".join([*trail, module, target]))
            if state.get(target) is None:
                visit(target, [*trail, module])
        state[module] = 2

    for module in graph:
        if state.get(module) is None:
            visit(module, [])


def test_the_formatter_owns_the_layout():
    """`ruff format` lays out every module (the test command checks it): nothing presses a file
    into a shape of its own by turning the formatter off. A module's size is a hint, not a
    wall: a file is split where its ideas part."""
    for package in (PACKAGE, ROOT / "attention", ROOT / "tests"):
        for path in package.rglob("*.py"):
            if path == Path(__file__):  # this test names the marks it looks for
                continue
            text = path.read_text(encoding="utf-8")
            for mark in ("fmt: skip", "fmt: off"):
                assert mark not in text, (path.relative_to(ROOT).as_posix(), mark)


def test_the_pipeline_reads_from_the_folder_listing():
    folders = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders == sorted([*LAYERS, *WINGS])


def test_cli_and_bridge_name_no_variant():
    """What a variant needs, its declaration says: no name of the registry is written in the
    command line or the bridge to torch (conform's catalogue of mistakes is its own wing)."""
    import derive

    names = [name for name in derive.variants() if name != "self-attention"]
    assert "rope" in names and "causal" in names  # the check reads the registry indeed
    paths = [*(PACKAGE / "cli").glob("*.py"), *(PACKAGE / "bridge").glob("*.py")]
    paths = sorted(p for p in paths if p.name != "conform.py")  # its own options (--causal)
    assert len(paths) > 10
    for path in paths:
        text = path.read_text(encoding="utf-8")
        for name in names:
            for quote in ('"', "'"):
                assert f"{quote}{name}{quote}" not in text, (path.name, name)
        assert not re.search(r"\.name\s*(==|!=|in\b)", text), path.name  # no dispatch on names
