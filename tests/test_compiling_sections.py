"""helpers.compiling, chapter 7's later sections: sequence lengths under mark_dynamic (bounds) and
maybe_mark_dynamic, the kernels Inductor generated, cold / warm / mega-cache starts, and the
CUDA graph pitfalls (CPU path). Each figure is checked against dynamo's, Inductor's or a plain
subprocess's own account, computed here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from helpers import compiling
from helpers.compiling import _fusion

LENGTHS = [16, 32, 48, 64, 128]


def _inductor_here() -> bool:
    return compiling.pick_backend("cpu")[0] == "inductor"


needs_inductor = pytest.mark.skipif(not _inductor_here(), reason="Inductor needs a C++ compiler here")


# --------------------------------------------------------------------------- mark_dynamic


def _unique_graphs(fn, lengths, mark=None):
    """Graphs dynamo made, by its own stats counter, for inputs (2, length, 8), each marked."""
    import torch._dynamo as dynamo
    from torch._dynamo.utils import counters

    dynamo.reset()
    compiled = torch.compile(fn, backend="eager")
    before = counters["stats"]["unique_graphs"]
    with compiling.quiet():
        for length in lengths:
            x = torch.randn(2, length, 8)
            if mark is not None:
                mark(x, 1)
            compiled(x)
    dynamo.reset()
    return counters["stats"]["unique_graphs"] - before


@pytest.mark.parametrize("how", ["none", "mark_dynamic", "maybe_mark_dynamic"])
def test_length_recompiles_counts_what_dynamos_own_counter_counts(how):
    import torch._dynamo as dynamo

    mark = None if how == "none" else getattr(dynamo, how)
    run = compiling.length_recompiles(LENGTHS, how)
    assert run.errors == 0
    assert run.compilations == _unique_graphs(compiling.attention_scores, LENGTHS, mark)
    assert run.events[0].outcome == "compiled"


def test_marking_saves_the_second_compile_of_the_default():
    default = compiling.length_recompiles(LENGTHS, "none")
    marked = compiling.length_recompiles(LENGTHS, "mark_dynamic")
    assert marked.compilations < default.compilations
    assert all(e.outcome == "reused" for e in marked.events[1:])


def test_a_marked_input_outside_its_bounds_raises_as_dynamo_does():
    import torch._dynamo as dynamo
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

    run = compiling.length_recompiles(LENGTHS, "mark_dynamic", min=2, max=64)
    inside = [e for e in run.events if e.length <= 64]
    outside = [e for e in run.events if e.length > 64]
    assert [e.outcome for e in outside] == ["error"] * len(outside)
    assert "ConstraintViolationError" in outside[0].detail and "not in range" in outside[0].detail
    assert all(e.outcome != "error" for e in inside)
    # the same call, written out: a fresh compile of a 128-long input marked [2, 64]
    dynamo.reset()
    x = torch.randn(2, 128, 8)
    dynamo.mark_dynamic(x, 1, min=2, max=64)
    with compiling.quiet(), pytest.raises(ConstraintViolationError):
        torch.compile(compiling.attention_scores, backend="eager")(x)
    dynamo.reset()


def test_bounds_of_the_first_input_become_a_guard_that_recompiles():
    run = compiling.length_recompiles(LENGTHS, "mark_dynamic", min=2, max=64, first_only=True)
    last = run.events[-1]
    assert last.length == 128 and last.outcome == "compiled"
    assert "<= 64" in last.detail  # the failed guard is the bound
    assert run.errors == 0 and "first input only" in run.format()


def test_mark_dynamic_is_a_promise_maybe_mark_dynamic_a_hint():
    strict = compiling.length_recompiles([16, 32, 48], "mark_dynamic", fn=compiling.one_length_shortcut)
    hint = compiling.length_recompiles([16, 32, 48], "maybe_mark_dynamic", fn=compiling.one_length_shortcut)
    assert strict.events[0].outcome == "error" and "specialized" in strict.events[0].detail
    assert hint.errors == 0
    import torch._dynamo as dynamo

    assert hint.compilations == _unique_graphs(
        compiling.one_length_shortcut, [16, 32, 48], dynamo.maybe_mark_dynamic
    )


def test_length_recompiles_refuses_bad_input():
    with pytest.raises(ValueError, match="mark"):
        compiling.length_recompiles([16], "mark_dynamc")
    with pytest.raises(ValueError, match="min and max bound mark_dynamic only"):
        compiling.length_recompiles([16], "maybe_mark_dynamic", min=2)
    with pytest.raises(ValueError, match="lengths"):
        compiling.length_recompiles([16, 0], "none")


# --------------------------------------------------------------------------- generated kernels

TRITON_LIKE = textwrap.dedent(
    """
    triton_poi_fused_add_0 = async_compile.triton('triton_poi_fused_add_0', '''
    def triton_poi_fused_add_0(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK):
        tmp0 = tl.load(in_ptr0 + (x0), xmask)
        tmp1 = tl.load(in_ptr1 + (x0), xmask)
        tmp2 = tmp0 + tmp1
        tl.store(out_ptr0 + (x0), tmp2, xmask)
    ''')


    async_compile.wait(globals())
    """
)


def test_kernels_are_read_from_triton_code_too():
    (kernel,) = _fusion._kernels_of(TRITON_LIKE)
    assert kernel.name == "triton_poi_fused_add_0"
    assert kernel.reads == ("in_ptr0", "in_ptr1") and kernel.writes == ("out_ptr0",)


@needs_inductor
def test_the_fused_chain_reads_each_external_input_once_and_writes_its_output():
    import torch._inductor.config as inductor_config

    inputs = compiling.chain_inputs(64, 64)
    with inductor_config.patch({"cpp.vec_isa_ok": True}):
        code = compiling.generated_kernels(compiling.bias_gelu_dropout_residual, inputs)
    produced = {out for out, _ in compiling.CHAIN}
    external = {name for _, ins in compiling.CHAIN for name in ins} - produced
    (kernels,) = code.graphs
    assert len(kernels) == 1  # one fused kernel for the whole chain
    assert len(kernels[0].reads) == len(external) and len(kernels[0].writes) == 1
    # eager ran one ATen op per torch op that dynamo captures
    captured = torch._dynamo.explain(compiling.bias_gelu_dropout_residual)(*inputs).op_count
    assert code.eager_ops == captured
    assert "reads 4 tensor(s), writes 1" in code.format()


@needs_inductor
def test_the_training_forward_kernel_saves_nothing_for_backward():
    import torch._inductor.config as inductor_config

    inputs = compiling.chain_inputs(64, 64)
    with inductor_config.patch({"cpp.vec_isa_ok": True}):
        code = compiling.generated_kernels(compiling.bias_gelu_dropout_residual, inputs, needs_grad=(0, 1))
    forward, backward = code.graphs
    assert [len(k.writes) for k in forward] == [1]  # only the output: min-cut recomputes h1
    saved = compiling.saved_for_backward(
        compiling.bias_gelu_dropout_residual, inputs, needs_grad=(0, 1), partitioner="min_cut"
    )
    assert saved.written == 0  # the partition, traced apart: only inputs are saved
    assert backward and "backward:" in code.format(show_source=False)


def test_generated_kernels_refuses_a_bad_position():
    with pytest.raises(ValueError, match="needs_grad"):
        compiling.generated_kernels(compiling.bias_gelu_dropout_residual, compiling.chain_inputs(4, 4), (7,))


# --------------------------------------------------------------------------- cache starts

PLAIN_START = """
import json, torch
from torch._dynamo.utils import counters
torch._inductor.config.cpp.vec_isa_ok = True
torch._inductor.config.compile_threads = 1
torch.manual_seed(0)
x, w = torch.randn({size}, {size}), torch.randn({size}, {size})
torch.compile(lambda x, w: torch.nn.functional.gelu(x @ w).square().mean())(x, w)
print(json.dumps([counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"],
                  counters["aot_autograd"]["autograd_cache_hit"]]))
"""


def _plain_start(folder, size):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(folder))
    out = subprocess.run(
        [sys.executable, "-c", PLAIN_START.format(size=size)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@needs_inductor
def test_cold_and_warm_starts_hit_the_caches_as_plain_processes_do(tmp_path):
    size = 16
    result = compiling.cache_starts(pairs=3, mega_pairs=0, size=size, backward=False, max_seconds=60)
    cold, warm, mega = (result.by_arm(arm)[-1] for arm in compiling.ARMS)
    first, second = _plain_start(tmp_path, size), _plain_start(tmp_path, size)
    assert [cold.fx_hits, cold.fx_misses, cold.aot_hits] == first
    assert [warm.fx_hits, warm.fx_misses, warm.aot_hits] == second
    assert [mega.fx_hits, mega.fx_misses, mega.aot_hits] == second  # the blob fills an empty folder
    assert result.artifact_bytes > 0 and result.mega is None
    assert result.warm.pairs == 3 and result.warm.names == ("cold start", "warm start")
    assert "too few pairs" in result.format()  # 3 pairs give no verdict


def test_cache_starts_refuses_bad_input():
    with pytest.raises(ValueError, match="pairs"):
        compiling.cache_starts(pairs=2)
    with pytest.raises(ValueError, match="mega_pairs"):
        compiling.cache_starts(mega_pairs=2)
    with pytest.raises(ValueError, match="device"):
        compiling.cache_starts(device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            compiling.cache_starts(device="cuda")


def test_probe_share_is_the_median_of_each_cold_starts_share():
    from helpers.compiling._caching import CacheStarts, Start

    starts = [Start("cold", s, 0.0, p, 0.0, 0, 1, 0, 1) for s, p in ((10.0, 7.0), (8.0, 4.0), (12.0, 9.0))]
    shares = sorted(p / s for s, p in ((10.0, 7.0), (8.0, 4.0), (12.0, 9.0)))
    speed = _fake_speed()
    text = CacheStarts("cpu", 16, False, False, speed, None, 0, starts).format()
    assert f"median {shares[1]:.0%} of a cold start (min {shares[0]:.0%}, max {shares[-1]:.0%}, n=3)" in text


def _fake_speed():
    from helpers import bench

    clock = iter(range(10_000))
    return bench.compare_speed(
        lambda: None,
        lambda: None,
        device="cpu",
        min_pairs=3,
        max_pairs=3,
        number=1,
        clock=lambda: float(next(clock)),
        sync=lambda: None,
        names=("cold start", "warm start"),
    )


# --------------------------------------------------------------------------- CUDA graphs


def test_cudagraph_pitfalls_on_a_cpu_runs_nothing_and_says_so(monkeypatch):
    def no_compile(*args, **kwargs):
        raise AssertionError("nothing may be compiled on a CPU")

    monkeypatch.setattr(torch, "compile", no_compile)
    (line,) = compiling.cudagraph_pitfalls("cpu")
    assert "need a CUDA device" in line and "cpu" in line
