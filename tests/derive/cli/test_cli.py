"""The `derive` command: every option, every bad input (status 2, or 1 for the environment, one
line, never a traceback), atomic writes."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from programs import require

from derive.cli import atomic as _atomic
from derive.cli import main

ROOT = Path(__file__).resolve().parents[3]


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _run(capsysbinary, *argv):
    status = main(list(argv))
    out, err = capsysbinary.readouterr()
    return status, out, err.decode()


def test_latex_to_stdout(capsysbinary):
    status, out, err = _run(capsysbinary, "latex")
    assert status == 0
    assert out.startswith(rb"\documentclass") and out.rstrip().endswith(rb"\end{document}")
    assert err == ""  # progress shows after DERIVE_PROGRESS_AFTER seconds: never, in the tests


def test_a_page_for_a_terminal_goes_to_a_file_named_after_its_variant(
    tmp_path, capsysbinary, monkeypatch
):
    """No -o, standard output a terminal: the page goes to causal.html in the working folder,
    then causal.1.html (never over a file the user did not name), and stderr says where."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(os, "isatty", lambda fd: fd == 1)
    for expected in ("causal.html", "causal.1.html"):
        status, out, err = _run(capsysbinary, "html", "--variant", "causal", "--n", "2")
        assert status == 0 and out == b"", err
        assert f"no -o on a terminal: writing {expected}" in err
        assert (tmp_path / expected).read_text().lstrip().startswith("<!DOCTYPE html>")
    status, out, err = _run(
        capsysbinary, "markdown", "--variant", "gqa+rope", "--n", "2", "--c", "4"
    )
    assert status == 0 and (tmp_path / "gqa+rope.md").exists(), err


def test_latex_options(tmp_path, capsysbinary):
    target = tmp_path / "d.tex"
    args = ("latex", "-o", str(target), "--fragment", "--n", "3", "--c", "4")
    args += ("--causal", "--heads", "2", "-q")
    status, out, err = _run(capsysbinary, *args)
    assert (status, out, err) == (0, b"", "")
    tex = target.read_text()
    assert r"\documentclass" not in tex  # --fragment
    assert "$n = 3$, $d = 4$, $c = 4$, $h = 2$ heads of width $c_h = 2$" in tex  # d: 4
    assert "% Causal multi-head attention, derived" in tex  # the entry multi-head+causal
    assert r"\section*{Causal multi-head attention}" in tex
    assert r"M_{m,p} &= \begin{cases} 0" in tex and r"q^{(\ell)}_{m,j} &= q_{m," in tex


def test_markdown(tmp_path, capsysbinary):
    target = tmp_path / "d.md"
    status, _, _ = _run(capsysbinary, "markdown", "-o", str(target), "--n", "2", "--d", "3")
    assert status == 0
    md = target.read_text()
    assert md.startswith("# Trainable") and "$$\n\\begin{aligned}" in md
    assert "$n = 2$, $d = 3$, $c = 2$" in md


def test_example_and_figures(tmp_path, capsysbinary):
    import matplotlib  # noqa: F401 - a test dependency; the figures need it

    target = tmp_path / "out" / "d.md"
    target.parent.mkdir()
    figures = tmp_path / "out" / "pics"
    argv = ("markdown", "-o", str(target), "--example", "--figures", str(figures), "-q")
    status, _, err = _run(capsysbinary, *argv)
    assert (status, err) == (0, "")
    md = target.read_text()
    assert "](pics/attention-heatmap.png)" in md and "](pics/softmax-saturation.png)" in md
    assert "Worked example: the fat cat sat on the mat" in md  # no sizes: the whole sentence
    names = sorted(path.name for path in figures.iterdir())
    assert names == [
        "attention-heatmap.csv",
        "attention-heatmap.png",
        "softmax-saturation.csv",
        "softmax-saturation.png",
    ]


def test_html(tmp_path, capsysbinary):
    target = tmp_path / "d.html"
    argv = ("html", "-o", str(target), "--n", "3", "--d", "4", "--c", "2", "--example", "--figures")
    status, out, err = _run(capsysbinary, *argv, "-q")
    assert (status, out, err) == (0, b"", "")
    page = target.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert 'id="e-a-2-3"' in page and "data-value=" in page  # the explicit entries, with values
    assert page.count('<div class="plot-area"><svg ') == 2  # the figures, inline
    assert sorted(path.name for path in tmp_path.iterdir()) == ["d.html"]  # no figure files


def test_html_to_stdout_is_the_generic_derivation(capsysbinary):
    status, out, err = _run(capsysbinary, "html")
    assert (status, err) == (0, "")
    assert out.startswith(b"<!DOCTYPE html>") and b'td class="entry"' not in out


def test_notebook(tmp_path, capsysbinary):
    target = tmp_path / "d.ipynb"
    argv = ("notebook", "-o", str(target), "--variant", "kv-cache", "-q")
    status, out, err = _run(capsysbinary, *argv)
    assert (status, out, err) == (0, b"", "")
    notebook = json.loads(target.read_text())
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    # kv-cache's document declares no step of its own: its first object shown is a fact
    assert notebook["nbformat"] == 4 and "derive.facts('kv-cache')" in "".join(code[0]["source"])
    assert code[0]["outputs"][0]["data"]["text/latex"][0].startswith("$$")


def test_pdf(tmp_path, capsysbinary):
    require("pdflatex")
    target = tmp_path / "d.pdf"
    status, _, err = _run(capsysbinary, "pdf", "-o", str(target), "--n", "2", "--d", "3")
    assert status == 0
    assert target.read_bytes().startswith(b"%PDF-")
    assert "derive: compiled it with pdflatex (" in err  # progress on stderr, with its own time


def test_pdf_without_tex_says_what_to_install(tmp_path, capsysbinary, monkeypatch):
    monkeypatch.setattr("derive.render.pdf.shutil.which", lambda name: None)
    status, _, err = _run(capsysbinary, "pdf", "-o", str(tmp_path / "d.pdf"), "-q")
    assert status == 1
    assert err.count("\n") == 1 and "install TeX Live" in err and "texlive-latex-base" in err
    assert not (tmp_path / "d.pdf").exists()


BAD = [
    (["latex", "--n", "0"], "argument --n: must be a positive integer, got 0"),
    (["latex", "--d", "x"], "argument --d: must be a positive integer, got 'x'"),
    (["latex", "--c", "2.5"], "argument --c: must be a positive integer, got '2.5'"),
    (["latex", "--n", "17"], "argument --n: 17 is over the limit of 16"),
    (
        ["latex", "--c", "4", "--heads", "3"],
        "h=3 does not divide c=4 (each head gets c / h columns)",
    ),
    (["markdown", "--heads", "0"], "argument --heads: must be a positive integer, got 0"),
    (["latex", "--bogus"], "unrecognized arguments: --bogus (see 'derive latex --help')"),
    (["latex", "--vairant", "causal"], "--vairant causal; did you mean '--variant'?"),
    (["check", "--sede", "3"], "--sede 3; did you mean '--seed'?"),
    (["latx"], "invalid choice: 'latx' (choose from 'latex', "),
    (["latx"], "; did you mean 'latex'? (see 'derive --help')"),
    (["latex", "--variant", "casual"], "unknown variant 'casual'; did you mean 'causal'?"),
    (["markdown", "--fragment"], "unrecognized arguments: --fragment"),  # latex only
    (["htm"], "invalid choice: 'htm'"),
    ([], "missing command: latex, markdown, pdf, html, notebook, docs, check, conform or variants"),
    (["latex", "-o", "/nonexistent-folder/d.tex"], "no such directory /nonexistent-folder"),
    (["latex", "-o", "x" * 300 + ".tex"], "File name too long"),
    (["latex", "--example", "--heads", "2", "--c", "4"], "multi-head has no worked example"),
    (["latex", "--example", "--n", "8"], "takes --n up to 7, got --n 8"),
    (["latex", "--heads", "17"], "argument --heads: 17 is over the limit of 16"),
    (["check", "--heads", "17"], "argument --heads: 17 is over the limit of 16"),
    (
        ["check", "--seed", "1" + "0" * 30],
        "argument --seed: 1000000000000000000000000000000 is over",
    ),
    (["check", "--seed", "-1"], "argument --seed: must be a non-negative integer, got -1"),
    (["check", "--c", "3", "--heads", "2"], "h=2 does not divide c=3"),
    (["check", "--n", "1"], "n=1 must be at least 2 (with one token every weight is 1"),
    (["docs", "--out", "y" * 300], "File name too long"),
    (["html", "--figures", "figures"], "--figures takes no folder here ('figures')"),  # inline
    (["html", "--fragment"], "unrecognized arguments: --fragment"),
    (["html", "--n", "17"], "argument --n: 17 is over the limit of 16"),
    (["html", "--c", "4", "--heads", "3"], "h=3 does not divide c=4"),
    (["html", "-o", "/nonexistent-folder/d.html"], "no such directory /nonexistent-folder"),
    (["html", "--variant", "flash", "--heads", "2"], "flash joins no other variant"),
    (["html", "--variant", "qk-norm", "--variant", "l2-qk-norm"], "cannot be put into the graph"),
    (["latex", "--variant", "rope", "--example"], "rope has no worked example"),
    (["notebook", "--d", "0"], "argument --d: must be a positive integer, got 0"),
    (["notebook", "--example", "--n", "8"], "takes --n up to 7, got --n 8"),
    (
        ["notebook", "--variant", "nope"],
        "unknown variant 'nope'; did you mean 'rope'? known: self-attention",
    ),
    (["notebook", "--w", "2"], "self-attention has no size 'w' (w is a size of sliding-window)"),
    (["latex", "--variant", "mla", "--variant", "rope"], "mla joins no other variant"),
    (
        ["latex", "--variant", "gqa", "--heads", "3", "--g", "2", "--c", "6"],
        "g=2 does not divide h=3 (each group serves h / g heads)",
    ),
    (
        ["latex", "--variant", "gqa", "--variant", "rope", "--heads", "2", "--c", "2"],
        "RoPE rotates pairs of features: c / h=1 must be even",
    ),
    (
        ["check", "--variant", "rope", "--c", "3"],
        "RoPE rotates pairs of features: c=3 must be even",
    ),
    (["check", "--variant", "gqa", "--heads", "4", "--g", "3"], "g=3 does not divide h=4"),
    (["check", "--variant", "flash", "--heads", "2"], "flash joins no other variant"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a) or "none" for a, _ in BAD])
def test_bad_input_is_one_line_and_status_2(argv, message, capsysbinary):
    status, out, err = _run(capsysbinary, *argv)
    assert status == 2
    assert out == b""
    assert err.count("\n") == 1 and message in err, err
    assert "Traceback" not in err


def test_example_honours_the_sizes(tmp_path, capsysbinary):
    target = tmp_path / "d.tex"
    argv = ("latex", "-o", str(target), "--n", "3", "--d", "4", "--c", "2", "--example", "-q")
    assert _run(capsysbinary, *argv)[0] == 0
    tex = target.read_text()
    assert r"\section*{Worked example: the fat cat}" in tex
    assert "Sizes: $n = 3$, $d = 4$, $c = 2$." in tex


def test_a_pdflatex_that_cannot_run_is_one_line_and_status_1(tmp_path, capsysbinary, monkeypatch):
    engine = tmp_path / "pdflatex"
    engine.write_bytes(b"\x7fELF not really")  # on PATH, executable, not a program
    engine.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    status, _, err = _run(capsysbinary, "pdf", "-o", str(tmp_path / "d.pdf"), "-q")
    assert status == 1 and err.count("\n") == 1
    assert "pdflatex at" in err and "cannot run" in err
    assert not (tmp_path / "d.pdf").exists()


def test_a_failing_pdflatex_is_quoted(tmp_path, capsysbinary, monkeypatch):
    engine = tmp_path / "pdflatex"
    engine.write_text("#!/bin/sh\necho 'This is a fake engine'\necho 'it gives up here'\nexit 3\n")
    engine.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    status, _, err = _run(capsysbinary, "pdf", "-o", str(tmp_path / "d.pdf"), "-q")
    assert status == 1 and err.count("\n") == 1
    assert "exit status 3" in err and "it gives up here" in err


def test_progress_lines_show_each_steps_own_time(tmp_path, capsysbinary, monkeypatch):
    from derive.cli import parsing

    clock = iter([0.0, 0.5, 2.0, 2.25, 9.0, 9.125] + [10.0 + k for k in range(100)])
    monkeypatch.setattr(parsing.time, "perf_counter", lambda: next(clock))
    progress = parsing.Progress(quiet=False)
    progress("first")  # 0.5 s into the job: quiet (under a second so far)
    progress("second")  # 2.0: 1.5 s of its own
    progress("third", always=True)  # 2.25: 0.25 s of its own
    err = capsysbinary.readouterr().err.decode().splitlines()
    assert err == ["derive: second (1.50 s)", "derive: third (0.25 s)"]


def test_derive_progress_after_sets_when_progress_shows(capsysbinary, monkeypatch):
    """DERIVE_PROGRESS_AFTER=0: every step's line, each with its time; a value that is not a
    number of seconds is refused in one line naming the variable (exit 2)."""
    monkeypatch.setenv("DERIVE_PROGRESS_AFTER", "0")
    status, _, err = _run(capsysbinary, "latex")
    lines = err.splitlines()
    assert status == 0 and len(lines) >= 2, err  # the derivation, the printing
    assert all(re.fullmatch(r"derive: .+ \(\d+\.\d\d s\)", line) for line in lines), err
    for bad in ("-1", "soon", "nan"):
        monkeypatch.setenv("DERIVE_PROGRESS_AFTER", bad)
        status, out, err = _run(capsysbinary, "latex")
        assert (status, out) == (2, b"") and err.count("\n") == 1, err
        assert f"DERIVE_PROGRESS_AFTER must be a number of seconds ≥ 0 (or inf), got {bad!r}" in err


def test_docs_creates_its_folder_and_can_skip_the_pdf(tmp_path, capsysbinary, monkeypatch):
    """The command's part: the folder made, --no-pdf passed on, every file written where it
    belongs. (What the files hold is tests/derive/render/test_docs.py's: it generates them all
    and compares them with docs/; generating them again here took a worker 100 s.)"""
    asked: list[bool] = []

    def generated(*, pdf: bool = True, **_) -> dict[str, bytes]:
        asked.append(pdf)
        pages = {"derivation.tex": b"tex", "glossary.md": b"md", "figures/a.svg": b"<svg/>"}
        return pages | ({"derivation.pdf": b"%PDF"} if pdf else {})

    monkeypatch.setattr("derive.cli.docs.generate_docs", generated)
    out = tmp_path / "new" / "docs"
    status, _, err = _run(capsysbinary, "docs", "--out", str(out), "--no-pdf", "-q")
    assert (status, err, asked) == (0, "", [False])
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert names == ["derivation.tex", "figures/a.svg", "glossary.md"]
    assert (out / "figures" / "a.svg").read_bytes() == b"<svg/>"


def test_docs_without_tex_fails_before_any_work(tmp_path, capsysbinary, monkeypatch):
    monkeypatch.setattr("derive.render.pdf.shutil.which", lambda name: None)
    monkeypatch.setattr("derive.cli.docs.generate_docs", lambda **_: pytest.fail("worked"))
    status, _, err = _run(capsysbinary, "docs", "--out", str(tmp_path / "docs"))
    assert status == 1 and "install TeX Live" in err and "--no-pdf" in err
    assert not (tmp_path / "docs").exists()


def test_output_that_is_a_directory_or_under_a_file(tmp_path, capsysbinary):
    status, _, err = _run(capsysbinary, "latex", "-o", str(tmp_path))
    assert status == 2 and "it is a directory" in err
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    status, _, err = _run(capsysbinary, "latex", "-o", str(afile / "d.tex"))
    assert status == 2 and "no such directory" in err


def test_a_folder_to_write_into_is_checked_before_any_work(tmp_path, capsysbinary, monkeypatch):
    """derive docs --out FILE and --figures FILE/DIR: one line, exit 2, nothing rendered."""
    from derive.cli import docs, documents

    def no_work(*args, **kwargs):
        raise AssertionError("rendered before the output folder was checked")

    monkeypatch.setattr(docs, "generate_docs", no_work)
    monkeypatch.setattr(documents, "render", no_work)
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    status, _, err = _run(capsysbinary, "docs", "--out", str(afile), "--no-pdf")
    assert status == 2 and err.strip().endswith("file.txt is a file") and len(err.splitlines()) == 1
    status, _, err = _run(
        capsysbinary,
        "latex",
        "-o",
        str(tmp_path / "d.tex"),
        "--figures",
        str(afile / "figures"),
        "--n",
        "3",
        "--d",
        "4",
        "--c",
        "2",
    )
    assert status == 2 and "cannot use --figures" in err and len(err.splitlines()) == 1
    assert afile.read_text() == "x" and not (tmp_path / "d.tex").exists()


def test_existing_output_survives_bad_input(tmp_path, capsysbinary):
    target = tmp_path / "d.tex"
    target.write_text("precious")
    status, _, _ = _run(capsysbinary, "latex", "-o", str(target), "--n", "-1")
    assert status == 2 and target.read_text() == "precious"


def test_failed_write_leaves_the_old_file_whole(tmp_path, capsysbinary, monkeypatch):
    target = tmp_path / "d.tex"
    target.write_text("precious")

    def broken_replace(source, destination):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_atomic.os, "replace", broken_replace)
    status, _, err = _run(capsysbinary, "latex", "-o", str(target))
    assert status == 2 and "cannot write" in err and "No space left on device" in err
    assert target.read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.tex"]  # no temporary left behind


def test_successful_write_replaces_the_file(tmp_path, capsysbinary):
    target = tmp_path / "d.tex"
    target.write_text("old " * 100_000)
    assert _run(capsysbinary, "latex", "-o", str(target))[0] == 0
    assert target.read_text().startswith(r"\documentclass")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.tex"]


@pytest.mark.parametrize("command", ["latex", "markdown", "pdf", "docs"])
def test_help_has_examples(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert "example" in capsys.readouterr().out


def test_python_dash_m_derive_is_torch_free(tmp_path):
    """`derive latex` imports neither torch, attention nor matplotlib (its wall time, about
    0.9 s with start-up, is measured by tests/benchmarks/bench_derive.py --commands)."""
    command = [sys.executable, "-X", "importtime", "-m", "derive", "latex", "--n", "3"]
    run = subprocess.run(command, capture_output=True, text=True, env=_env(), cwd=tmp_path)
    assert run.returncode == 0 and run.stdout.startswith("\\documentclass")
    imported = {line.split("|")[-1].strip() for line in run.stderr.splitlines() if "|" in line}
    assert {"sympy", "derive"} <= imported  # the probe sees imports at all
    assert "torch" not in imported and "attention" not in imported
    assert "matplotlib" not in imported


def test_a_full_standard_output_is_one_line_and_status_2():
    with open("/dev/full", "wb") as full:  # every write fails with ENOSPC (Linux)
        done = subprocess.run(
            [sys.executable, "-m", "derive", "latex", "-q"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "derive: cannot write to standard output: No space left on device"
    ]


def test_variants_combine_and_take_their_heads_from_heads(tmp_path, capsysbinary):
    target = tmp_path / "qwen.tex"
    argv = (
        "latex",
        "-o",
        str(target),
        "--variant",
        "rope",
        "--variant",
        "qk-norm",
        "--variant",
        "gqa",
        "--heads",
        "2",
        "--g",
        "1",
        "--n",
        "3",
        "--d",
        "4",
        "--c",
        "4",
        "-q",
    )
    assert _run(capsysbinary, *argv)[0] == 0
    tex = target.read_text()
    assert (
        r"\title{Grouped-query attention with QK-norm and RoPE (the attention of Qwen 3), " in tex
    )
    assert r"\section*{Explicit: $n = 4$" not in tex and "$n = 3$" in tex
    assert r"\mathring{q}^{(\ell)}_{m,j}" in tex and r"\check{q}^{(\ell)}_{m,j}" in tex


@pytest.mark.parametrize("command", ["latex", "markdown", "pdf", "html", "notebook"])
def test_help_gives_each_size_its_own_default(command, capsys):
    """What an omitted size becomes when another is given (was "from 3, 4, 2" for each)."""
    from derive.cli.parsing import DEFAULT_SIZES

    with pytest.raises(SystemExit):
        main([command, "--help"])
    said = " ".join(capsys.readouterr().out.split())
    for letter, size in DEFAULT_SIZES.items():
        assert f"({letter} = {size} when only other sizes are given)" in said


#: pdflatex (and latexmk) as a machine may have them broken: the script each is, and what the
#: one line says
BROKEN_ENGINES = {
    "fails": ("#!/bin/sh\nexit 1\n", "pdflatex failed: exit status 1"),
    "cannot run": ("#!/nonexistent/interpreter\n", "cannot run"),
    "absent": (None, "no TeX engine found (pdflatex)"),
}


@pytest.mark.parametrize("engine", sorted(BROKEN_ENGINES))
def test_a_broken_tex_engine_is_one_line_and_leaves_the_pdf(tmp_path, engine):
    script, said = BROKEN_ENGINES[engine]
    tools = tmp_path / "bin"
    tools.mkdir()
    if script is not None:
        for name in ("pdflatex", "latexmk"):
            (tools / name).write_text(script)
            (tools / name).chmod(0o755)
    target = tmp_path / "kept.pdf"
    target.write_bytes(b"before")
    env = {**_env(), "PATH": str(tools)}  # nothing else: no real engine behind it
    done = subprocess.run(
        [sys.executable, "-m", "derive", "pdf", "-q", "-o", str(target)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 1
    # read by what it says, not by stderr's count of lines (a progress line may come first)
    assert [line for line in done.stderr.splitlines() if said in line] != [], done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert target.read_bytes() == b"before"


def test_version_names_the_distribution(capsys):
    from importlib import metadata

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == f"derive {metadata.version('attention-derive')}"
    for name in ("sympy", "torch", "transformers"):  # what a bug report needs, each found
        assert f"{name} {metadata.version(name)}" in lines
    assert lines[-1].startswith("tex ")


def test_version_says_what_is_missing_and_what_needs_it(monkeypatch):
    from importlib import metadata

    from derive.cli import versions

    real = metadata.version

    def without_torch(name):
        if name == "torch":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(versions.metadata, "version", without_torch)
    monkeypatch.setattr(versions, "find_engine", lambda: None)
    lines = versions.versions()
    assert "torch not installed: derive check, notebook and conform need it" in " ".join(lines)
    assert lines[-1] == "tex not found: derive pdf needs pdflatex (TeX Live)"
