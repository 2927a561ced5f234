r"""Compiling a LaTeX document to PDF with pdflatex, reproducibly.

The PDF is byte-for-byte reproducible for a given pdfTeX: the preamble omits the dates and the
trailer ID (``\pdfinfoomitdate``, ``\pdftrailerid{}``, ``\pdfsuppressptexinfo``), and the
engine runs with ``SOURCE_DATE_EPOCH=0`` and ``FORCE_SOURCE_DATE=1``. The SHA-256 of the source
(the .tex and the figures it includes) goes into an entry of the PDF's information of its own,
/SourceSHA256 (the document sets its /Title, /Subject, /Author and /Keywords), so a test can
tell which source a committed PDF was built from even where another pdfTeX would lay out other
bytes.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = [
    "EngineMissing",
    "CompileError",
    "find_engine",
    "require_engine",
    "source_hash",
    "compile_pdf",
    "compile_with_log",
    "pdf_source_hash",
    "pdf_producer",
]

INSTALL_HINT = (
    "no TeX engine found (pdflatex); install TeX Live, e.g. "
    "'apt-get install texlive-latex-base texlive-latex-recommended latexmk' "
    "or 'brew install --cask mactex-no-gui'"
)


class EngineMissing(RuntimeError):
    """pdflatex is not on PATH."""


class CompileError(RuntimeError):
    """pdflatex failed, or its log reports an error or an undefined control sequence."""


def find_engine() -> str | None:
    """The path of pdflatex, or None."""
    return shutil.which("pdflatex")


def require_engine() -> str:
    """The path of pdflatex; `EngineMissing` without one (checked before any work is done)."""
    engine = find_engine()
    if engine is None:
        raise EngineMissing(INSTALL_HINT)
    return engine


def _decoded(output: bytes) -> str:
    """What pdflatex wrote: UTF-8 (TeX Live writes a UTF-8 source's characters as they are, so
    "Unicode character − (U+2212)" reads as that, not as mojibake), else Latin-1."""
    try:
        return output.decode("utf-8")
    except UnicodeDecodeError:
        return output.decode("latin-1")


def _tail(output: bytes, lines: int = 6) -> str:
    """The last lines pdflatex printed, on one line."""
    text = _decoded(output).strip().splitlines()
    return " | ".join(line.strip() for line in text[-lines:] if line.strip())


def source_hash(tex: str, figures: dict[str, bytes]) -> str:
    """SHA-256 over the LaTeX source and each included figure (by its path in the document)."""
    digest = hashlib.sha256(tex.encode("utf-8"))
    for name in sorted(figures):
        digest.update(name.encode("utf-8") + b"\0" + figures[name])
    return digest.hexdigest()


def _problems(log: str) -> list[str]:
    lines = log.splitlines()
    found = [line for line in lines if line.startswith("!")]
    found += [line for line in lines if "Undefined control sequence" in line]
    found += [line for line in lines if re.search(r"LaTeX (Error|Warning).*undefined", line)]
    return found


def compile_pdf(tex: str, figures: dict[str, bytes] | None = None, *, timeout: int = 120) -> bytes:
    """Compile `tex` (a standalone document) and return the PDF's bytes (see `compile_with_log`)."""
    return compile_with_log(tex, figures, timeout=timeout)[0]


def compile_with_log(
    tex: str, figures: dict[str, bytes] | None = None, *, timeout: int = 120
) -> tuple[bytes, str]:
    """Compile `tex` (a standalone document); return the PDF's bytes and pdflatex's log.

    `figures` maps each figure's path as the document names it (``figures/x.png``) to its bytes;
    they are laid out next to the source in a temporary folder. Raises `EngineMissing` without
    pdflatex and `CompileError` when the log shows an error or an undefined control sequence.
    """
    engine = require_engine()
    figures = figures or {}
    source = source_hash(tex, figures)
    with tempfile.TemporaryDirectory(prefix="derive-pdf-") as folder:
        root = Path(folder)
        (root / "derivation.tex").write_text(tex, encoding="utf-8")
        for name, data in figures.items():
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        env = dict(os.environ, SOURCE_DATE_EPOCH="0", FORCE_SOURCE_DATE="1", TZ="UTC")
        command = [
            engine,
            "-interaction=nonstopmode",
            "-halt-on-error",
            "-jobname=derivation",
            rf"\pdfinfo{{/SourceSHA256 ({source})}}\input{{derivation.tex}}",
        ]
        try:
            run = subprocess.run(
                command, cwd=root, env=env, capture_output=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as error:
            raise CompileError(f"pdflatex did not finish within {timeout} s") from error
        except OSError as error:  # on PATH but not a program that runs here
            raise EngineMissing(f"pdflatex at {engine} cannot run: {error.strerror}") from None
        log_path = root / "derivation.log"
        log = _decoded(log_path.read_bytes()) if log_path.exists() else ""
        problems = _problems(log)
        pdf = root / "derivation.pdf"
        if run.returncode != 0 or problems or not pdf.exists():
            if problems:
                detail = problems[0].strip()
            else:  # no "!" line: quote what pdflatex said last
                said = _tail(run.stdout + run.stderr) or "no output"
                detail = f"exit status {run.returncode}; its last lines: {said}"
            raise CompileError(f"pdflatex failed: {detail}")
        return pdf.read_bytes(), log


def pdf_source_hash(pdf: bytes) -> str | None:
    """The source hash a PDF built by `compile_pdf` carries, or None."""
    match = re.search(rb"/SourceSHA256 \(([0-9a-f]{64})\)", pdf)
    return match.group(1).decode() if match else None


def pdf_producer(pdf: bytes) -> str | None:
    """The engine that wrote a PDF (its /Producer), e.g. ``pdfTeX-1.40.24``."""
    match = re.search(rb"/Producer \(([^)]*)\)", pdf)
    return match.group(1).decode("latin-1") if match else None
