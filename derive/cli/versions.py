"""What `derive --version` prints: derive's version, then the version of each package and tool
it runs with, or what is missing and which commands need it. A bug report quotes it whole.

The packages are read from their installed metadata (nothing is imported: torch takes seconds
to import), TeX from `pdflatex --version`'s first line."""

import platform
import subprocess
from importlib import metadata

from ..render.pdf import find_engine

__all__ = ["versions"]

#: (distribution, what is lost without it), in the order printed. None: always installed.
PACKAGES = (
    ("sympy", None),
    ("torch", "derive check, notebook and conform need it (pip install torch)"),
    (
        "transformers",
        "--model, --config and conform of Hugging Face models need it "
        "(pip install 'attention-derive[huggingface]')",
    ),
    ("jaxtyping", None),
    ("beartype", None),
    ("matplotlib", "--figures needs it (pip install 'attention-derive[figures]')"),
)


def _installed(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _tex() -> str:
    engine = find_engine()
    if engine is None:
        return "not found: derive pdf needs pdflatex (TeX Live)"
    try:
        done = subprocess.run(
            [engine, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{engine} does not run ({error})"
    first = done.stdout.strip().splitlines()[:1]
    return first[0] if done.returncode == 0 and first else f"{engine} does not run"


def versions() -> list[str]:
    """One line per thing derive runs with: `name version`, or `name not installed: …`."""
    derive = _installed("attention-derive") or "(not installed: run from a checkout)"
    lines = [f"derive {derive}", f"python {platform.python_version()}"]
    for distribution, needed_by in PACKAGES:
        version = _installed(distribution)
        lines.append(
            f"{distribution} {version}" if version else f"{distribution} not installed: {needed_by}"
        )
    lines.append(f"tex {_tex()}")
    return lines
