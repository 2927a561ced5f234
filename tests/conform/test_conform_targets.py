"""What a target may be besides a plain function or module: a functools.partial (of a built-in
too), a bound method, a lambda, a torch.compile'd module or function (its original is checked,
and the report says so); a file whose relative import cannot work is refused in one line."""

import functools
import operator
import re

import correct
import pytest
import torch
import torch.nn.functional as F

from derive import ConformError, conform
from derive.cli import main


class _Holder:
    def attend(self, q, k, v, attn_mask=None, is_causal=False):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)


@pytest.mark.parametrize(
    "target, name, not_run",
    [
        # a built-in's signature is read from its docstring, then the partial's bindings applied
        (
            functools.partial(F.scaled_dot_product_attention, enable_gqa=True),
            "functools.partial(scaled_dot_product_attention, enable_gqa=True)",
            set(),
        ),
        (functools.partial(correct.sdpa_written, is_causal=False), None, set()),
        (_Holder().attend, "_Holder.attend", set()),  # bound: self is not q
        (
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
            "<lambda>",
            {"causal values", "causality", "mask convention", "query with no key"},
        ),
    ],
)
def test_partials_bound_methods_and_lambdas_are_functions_of_q_k_v(target, name, not_run):
    report = conform(target)
    assert (report.kind, report.conforms) == ("sdpa", True)
    assert {row.name for row in report.checks if row.status == "n/a"} == not_run
    if name is not None:
        assert report.target == name


def test_a_modules_bound_forward_is_the_module():
    module = correct.book_mha()
    report = conform(module.forward)
    assert (report.kind, report.convention, report.conforms) == ("module", "book", True)
    assert report.target == "BookMultiHeadAttention.forward"
    assert conform(module.__call__).kind == "module"


def test_a_partial_binding_is_causal_is_causal_by_itself():
    report = conform(functools.partial(correct.sdpa_written, is_causal=True))
    assert report.conforms and (report.causal, report.causal_how[:7]) == (True, "probed:")


def test_a_partial_of_a_built_in_from_the_command_line(capsys, tmp_path):
    target = tmp_path / "gqa.py"
    target.write_text(
        "import functools\n\nimport torch.nn.functional as F\n\n"
        "attend = functools.partial(F.scaled_dot_product_attention, "
        "enable_gqa=True)\n"
    )
    assert main(["conform", f"{target}:attend"]) == 0
    assert re.search(r"^conforms \(9 PASS\)$", capsys.readouterr().out, re.M)


def test_a_function_whose_signature_cannot_be_read_is_refused_saying_so():
    with pytest.raises(ConformError, match=r"its signature cannot be read: say --kind sdpa"):
        conform(operator.itemgetter(1))


@pytest.mark.parametrize(
    "build, name, where",
    [
        (lambda: torch.compile(correct.book_mha()), "BookMultiHeadAttention", "_orig_mod"),
        (
            lambda: torch.compile(F.scaled_dot_product_attention),
            "scaled_dot_product_attention",
            "_torchdynamo_orig_callable",
        ),
    ],
)
def test_a_compiled_target_is_checked_through_its_original(build, name, where):
    report = conform(build())
    assert report.conforms and report.target == f"torch.compile({name})"
    note = f"torch.compile: checked the original it wraps ({where}), run eagerly"
    assert note in report.notes[0] and note in report.table()


@pytest.mark.parametrize(
    "statement, instead",
    [
        ("from .helper import attend", "write `from helper import attend`"),
        ("from . import helper", "write `import helper`"),
        ("from ..helper import attend", "import from a folder on the import path instead"),
    ],
)
def test_a_relative_import_in_a_file_loaded_by_path_is_one_clear_line(
    capsys, tmp_path, statement, instead
):
    (tmp_path / "helper.py").write_text(
        "import torch.nn.functional as F\n\nattend = F.scaled_dot_product_attention\n"
    )
    target = tmp_path / "model.py"
    target.write_text(f"import torch\n\n{statement}\n")
    status = main(["conform", f"{target}:attend"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1
    assert err.startswith(
        f"derive conform: cannot load {str(target)!r}: line 3, `{statement}`, is a relative "
        f"import, and a file loaded by path is in no package; {instead} (the file's folder is on"
    )


def test_an_import_from_the_files_folder_works(capsys, tmp_path):
    (tmp_path / "conform_sibling.py").write_text(
        "import torch.nn.functional as F\n\nattend = F.scaled_dot_product_attention\n"
    )
    (tmp_path / "model.py").write_text("from conform_sibling import attend\n")
    assert main(["conform", f"{tmp_path / 'model.py'}:attend"]) == 0


def _windowed(q, k, v, attn_mask=None, is_causal=False):
    """sdpa with a causal sliding window of 3 keys, and the caller's boolean mask."""
    n, s = q.shape[-2], k.shape[-2]
    m, p = torch.arange(n)[:, None], torch.arange(s)[None, :]
    allowed = (p <= m) & (p > m - 3)
    if attn_mask is not None:
        allowed = allowed & attn_mask
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


def test_a_function_s_mask_checks_keep_the_declared_window():
    """A correct windowed function told its window (--variant sliding-window --value w=3):
    its mask checks' reference is the given mask and the window together, so it conforms
    (the reference dropped the window, and a correct function failed both mask checks)."""
    report = conform(_windowed, variant="sliding-window", values={"w": 3})
    assert report.conforms, report.table()
    checks = {check.name: check.status for check in report.checks}
    assert checks["mask convention"] == checks["query with no key"] == "PASS"
    # the window is checked, not assumed: told a wider one, it does not conform
    assert not conform(_windowed, variant="sliding-window", values={"w": 4}).conforms
