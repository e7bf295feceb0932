"""One validation layer for the learner-facing helpers: counts, flags, paths and names from a
fixed list get one clear line, the way a learner meets them (a fresh interpreter's last line)."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest
from conftest import ROOT

from helpers import checks, memory, models, roofline, timeline


def _last_line(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done
    return done.stderr.strip().splitlines()[-1]


def test_counts_accept_whole_floats_and_refuse_fractions():
    assert roofline.gemm_flops(1024.0, 512, 5e2) == roofline.gemm_flops(1024, 512, 500)
    assert isinstance(roofline.gemm_flops(1024.0, 512, 5e2), int)
    assert memory.model_state_bytes(124e6).total == memory.model_state_bytes(124_000_000).total
    assert models.get_config("tiny", n_layers=2.0).n_layers == 2
    assert isinstance(models.get_config("tiny", n_layers=2.0).n_layers, int)
    for bad in (124.5, float("inf"), True, "12"):
        with pytest.raises(ValueError, match="n_params must be a positive whole number"):
            memory.model_state_bytes(bad)


def test_a_flag_given_as_a_word_is_refused():
    with pytest.raises(TypeError, match="mixed_precision must be True or False, got 'no'"):
        memory.model_state_bytes(1000, "adamw", "no")
    assert _last_line("from helpers import memory; memory.model_state_bytes(1000, 'adamw', 'no')") == (
        "TypeError: mixed_precision must be True or False, got 'no'"
    )


def _public_functions(tree: ast.Module):
    """Module-level functions and methods of module-level classes (not nested helpers)."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            yield node
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            yield from (n for n in node.body if isinstance(n, ast.FunctionDef))


def test_every_public_helper_checks_its_flags():
    """Each public function with a ``bool`` parameter checks it (``_flag``) before using it."""
    missing = []
    for path in sorted((ROOT / "src" / "helpers").rglob("*.py")):
        for node in _public_functions(ast.parse(path.read_text(encoding="utf-8"))):
            if node.name.startswith("_"):
                continue
            flags = [
                a.arg
                for a in node.args.args + node.args.kwonlyargs
                if a.annotation is not None
                and ast.unparse(a.annotation) in ("bool", "bool | None")
                and not a.arg.startswith("_")
            ]
            checked = {
                kw.arg
                for call in ast.walk(node)
                if isinstance(call, ast.Call) and ast.unparse(call.func) == "_flag"
                for kw in call.keywords
            }
            missing += [
                f"{path.relative_to(ROOT)}:{node.lineno} {node.name}({name})"
                for name in flags
                if name not in checked
            ]
    assert missing == []


def test_a_path_that_is_not_a_path_is_one_line(tmp_path):
    assert _last_line("from helpers import timeline; timeline.load_trace(123)") == (
        "TypeError: path must be a file path (a str or pathlib.Path), got int 123"
    )
    empty = tmp_path / "trace.json"
    empty.write_text("")
    with pytest.raises(ValueError, match="is empty") as err:  # a TraceError
        timeline.load_trace(empty)
    assert "truncated" not in str(err.value)


@pytest.mark.parametrize(
    "code, line",
    [
        (
            "from helpers import memory; memory.track('gpt2-smal')",
            "unknown model config 'gpt2-smal'; did you mean 'gpt2-small'? choose one of: tiny,",
        ),
        (
            "from helpers import memory; memory.model_state_bytes(1000, 'adamww')",
            "unknown optimizer 'adamww'; did you mean 'adamw'? choose one of: adamw,",
        ),
        (
            "from helpers import hardware; hardware.dtype_key('bf61')",
            "unknown dtype 'bf61'; did you mean 'bf16'? choose one of: fp32,",
        ),
    ],
)
def test_an_unknown_name_suggests_the_nearest_in_one_line(code, line):
    last = _last_line(code)
    assert last.startswith("helpers._validate.UnknownName: " + line), last


def test_expected_and_got_share_one_number_format():
    with pytest.raises(checks.CheckFailed) as err:
        checks.equal(6.09375e10, 31_406_250_000, "FLOPs")
    assert "expected 31,406,250,000, got 60,937,500,000" in str(err.value)
    with pytest.raises(checks.CheckFailed) as err:
        checks.close(3e-5, 0.25, "a share")
    assert "expected 2.5000e-01, got 3.0000e-05" in str(err.value)
    with pytest.raises(checks.CheckFailed) as err:
        checks.close(0.5, 0.25, "a share")
    assert "expected 0.25, got 0.5" in str(err.value)
