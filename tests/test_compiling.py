"""helpers.compiling: break-even, traffic of fused chains, graph breaks, recompilations, report.

Everything that compiles here uses dynamo's cheap "eager" backend (no code generation), so the
file runs in seconds; the Inductor path runs in chapter 7's notebook test.
"""

from __future__ import annotations

import math
import os
import shutil

import pytest
import torch

from helpers import bench, compiling

CXX = os.environ.get("CXX", "g++")  # the C++ compiler Inductor looks for on Linux

# --------------------------------------------------------------------------- break-even


@pytest.mark.parametrize(
    "first,eager,compiled,want",
    [
        (2.5, 0.031, 0.019, 207),  # 2.481 / 0.012 = 206.75 -> 207
        (12.0, 0.064, 0.016, 250),  # 11.984 / 0.048 = 249.67 -> 250
        (0.003, 0.010, 0.002, 1),  # a warm cache: the first call is already cheaper than one eager step
        (3.0, 0.010, 0.012, math.inf),  # compiled is slower: never pays
        (2.0, 0.05, 0.05, math.inf),  # no speed-up: never pays
    ],
)
def test_break_even_by_hand(first, eager, compiled, want):
    assert compiling.break_even_steps(first, eager, compiled) == want


def test_break_even_is_the_first_step_where_compiled_total_is_not_larger():
    first, eager, compiled = 8.2, 0.0071, 0.0049
    n = compiling.break_even_steps(first, eager, compiled)
    assert first + (n - 1) * compiled <= n * eager
    assert first + (n - 2) * compiled > (n - 1) * eager


@pytest.mark.parametrize("bad", [(0, 1, 1), (1, -1, 1), (1, 1, float("inf")), (1, True, 1), (1, "2", 1)])
def test_break_even_refuses_bad_times(bad):
    with pytest.raises((ValueError, TypeError)):
        compiling.break_even_steps(*bad)


def test_step_speedup_is_amdahl():
    assert compiling.step_speedup(0.5, 2.0) == pytest.approx(1 / 0.75)
    assert compiling.step_speedup(0.0, 10.0) == 1.0
    assert compiling.step_speedup(1.0, 4.0) == pytest.approx(4.0)
    with pytest.raises(ValueError, match="fraction"):
        compiling.step_speedup(1.5, 2.0)


# --------------------------------------------------------------------------- fusion traffic


def test_chain_traffic_of_the_chapter_chain_by_hand():
    rows, hidden, b = 1024, 1024, 4
    n = rows * hidden
    t = compiling.chain_traffic(compiling.CHAIN, compiling.chain_sizes(rows, hidden), b)
    # eager: add reads x, bias writes h1; gelu reads h1 writes h2; mul reads h2, mask writes h3;
    # add reads h3, residual writes out
    assert t.eager == b * ((n + hidden + n) + (n + n) + (n + n + n) + (n + n + n))
    # fused: x, bias, mask, residual read once; out written once
    assert t.fused == b * (n + hidden + n + n + n)
    assert t.saved == t.eager - t.fused and t.pair() == (t.eager, t.fused)
    kept = compiling.chain_traffic(compiling.CHAIN, compiling.chain_sizes(rows, hidden), b, keep=["h1"])
    assert kept.fused == t.fused + b * n and kept.eager == t.eager


def test_an_input_used_twice_is_read_once_fused_and_twice_eager():
    n = 100
    swish = [("s", ["x"]), ("out", ["x", "s"])]
    t = compiling.chain_traffic(swish, {"x": n, "s": n, "out": n}, 2)
    assert t.eager == 2 * (2 * n + 3 * n) and t.fused == 2 * (n + n)


def test_chain_traffic_errors_name_the_problem():
    with pytest.raises(KeyError, match="no entry for mask"):
        sizes = {k: 1 for k in ("x", "bias", "h1", "h2", "h3", "residual", "out")}
        compiling.chain_traffic(compiling.CHAIN, sizes, 4)
    with pytest.raises(ValueError, match="keep names x"):
        compiling.chain_traffic(compiling.CHAIN, compiling.chain_sizes(2, 2), 4, keep=["x"])
    with pytest.raises(ValueError, match="no ops"):
        compiling.chain_traffic([], {}, 4)


def test_chain_inputs_and_function():
    x, bias, mask, residual = compiling.chain_inputs(8, 16, p=0.25, seed=3)
    assert x.shape == residual.shape == mask.shape == (8, 16) and bias.shape == (16,)
    assert set(mask.unique().tolist()) <= {0.0, torch.tensor(1 / 0.75).item()}
    out = compiling.bias_gelu_dropout_residual(x, bias, mask, residual)
    assert torch.allclose(out, torch.nn.functional.gelu(x + bias) * mask + residual)
    with pytest.raises(ValueError, match="dropout"):
        compiling.chain_inputs(2, 2, p=1.0)


# --------------------------------------------------------------------------- graph breaks


def test_noisy_step_has_three_breaks_with_their_reasons(capsys):
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    g = compiling.graph_breaks(compiling.noisy_step, x, w)
    assert (g.graphs, g.breaks) == (4, 3)
    text = " | ".join(r.reason for r in g.reasons)
    assert "print" in text.lower() or "builtin" in text.lower()
    assert "item()" in text
    assert all(r.line for r in g.reasons) and "3 graph break(s) at 3 place(s)" in g.format()
    assert [times for _, times in g.sites] == [1, 1, 1]
    assert capsys.readouterr().err == ""


class _Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        print("inner")  # one line of code, inside a called module
        return y.relu()


class _Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.inner = torch.nn.Linear(4, 4), _Inner()

    def forward(self, x):
        return self.inner(self.a(x)) * 2


def test_a_break_inside_a_called_function_is_one_place_reported_twice(capsys):
    """dynamo breaks the inner frame and, at the call, the outer one: its log has two entries at
    the same line (independent check: the log's own records), and the report counts one place."""
    g = compiling.graph_breaks(_Outer(), torch.randn(2, 4))
    assert g.breaks == 2 and len({(r.filename, r.line) for r in g.reasons}) == 1
    assert len(g.sites) == 1 and g.sites[0][1] == 2
    assert "at 1 place(s) in the code" in g.format() and "reported 2 times" in g.format()
    capsys.readouterr()


def test_breaks_are_counted_as_dynamo_reports_them_not_as_graphs_minus_one():
    def prints_first(x):
        print("before any tensor op")  # a break with no graph before it
        return x * 2

    def prints_twice(x):
        y = x + 1
        print("one")
        print("two")  # two breaks in a row, one graph on each side
        return y * 2

    first = compiling.graph_breaks(prints_first, torch.randn(3))
    assert (first.graphs, first.breaks) == (1, 1) and first.reasons[0].line is not None
    twice = compiling.graph_breaks(prints_twice, torch.randn(3))
    assert (twice.graphs, twice.breaks) == (2, 2)
    import torch._dynamo as dynamo

    # torch's own explain() counts graphs - 1 here, which is what the chapter no longer uses
    with compiling.quiet():
        assert dynamo.explain(prints_first)(torch.randn(3)).graph_break_count == 0


def test_a_clean_function_is_one_graph_even_if_settings_were_changed():
    def clean(x, w):
        y = x @ w
        return torch.tanh(torch.where(y.sum() > 0, y * 2, y) / y.abs().max())

    x, w = torch.randn(4, 8), torch.randn(8, 3)
    g = compiling.graph_breaks(clean, x, w)
    assert (g.graphs, g.breaks, g.reasons) == (1, 0, [])
    import torch._dynamo.config as config

    # a learner who switched scalar capture on still gets the default verdict for noisy_step
    with config.patch(capture_scalar_outputs=True):
        assert compiling.graph_breaks(compiling.noisy_step, x, w).breaks == 3


def test_quiet_keeps_dynamo_warnings_off_stderr(capfd):
    def reads_back(x):
        return x * x.sum().item()

    compiling.graph_breaks(reads_back, torch.randn(3))
    assert capfd.readouterr().err == ""


# --------------------------------------------------------------------------- recompilations


@pytest.mark.parametrize(
    "sizes,mode,want",
    [
        ([8, 16, 32, 64], "static", 4),  # one graph per shape
        ([8, 16, 32, 64], "auto", 2),  # exact graph, then one symbolic graph
        ([8, 16, 32, 64], "dynamic", 1),
        ([8, 16, 32, 64], "mark_dynamic", 1),
        ([8, 1, 16], "dynamic", 2),  # size 1 is always specialized
        ([8, 1, 16], "auto", 3),  # 8 exact, 1 specialized, 16 symbolic
        ([0, 5, 6], "auto", 2),
        ([4, 8, 4, 8], "static", 2),  # a shape seen before reuses its graph
    ],
)
def test_count_compiles_measures_dynamo(sizes, mode, want):
    assert compiling.count_compiles(sizes, mode) == want


def test_recompiles_give_dynamo_reasons():
    events = compiling.recompiles(compiling.shape_probe, [(torch.zeros(s, 4),) for s in (8, 16, 8)], "static")
    assert [e.compiled for e in events] == [True, True, False]
    assert events[0].reasons == [] and "size mismatch" in events[1].reasons[0]
    assert "expected 8, actual 16" in str(events[1]) and "reused" in str(events[2])
    dyn = compiling.recompiles(compiling.shape_probe, [(torch.zeros(s, 4),) for s in (8, 1)], "dynamic")
    assert dyn[1].compiled and "specialized" in str(dyn[1])


def test_recompile_arguments_are_checked():
    with pytest.raises(ValueError, match="unknown mode 'sometimes'; choose one of:"):
        compiling.recompiles(compiling.shape_probe, [(torch.zeros(2, 4),)], "sometimes")
    with pytest.raises(ValueError, match="at least one"):
        compiling.recompiles(compiling.shape_probe, [], "auto")
    with pytest.raises(ValueError, match="sizes"):
        compiling.count_compiles([], "auto")
    with pytest.raises(ValueError, match="sizes"):
        compiling.count_compiles([2, -1], "auto")


# --------------------------------------------------------------------------- report


def test_report_with_the_eager_backend_measures_and_checks(capfd):
    inputs = compiling.chain_inputs(16, 32)
    shapes = [compiling.chain_inputs(8, 32), compiling.chain_inputs(4, 32)]
    r = compiling.report(
        compiling.bias_gelu_dropout_residual, inputs, backend="eager", warmup=1, iters=3, shapes=shapes
    )
    assert r.matches and r.max_abs_diff == 0.0 and (r.graphs.graphs, r.graphs.breaks) == (1, 0)
    # the wall-clock budget may end the timing early on a busy machine: at least one pair
    assert r.first_call_s > 0 and len(r.eager.samples) == len(r.compiled.samples) == r.speed.pairs >= 1
    assert r.speedup == r.speed.speedup and r.speed.verdict in bench.VERDICTS
    assert r.break_even == compiling.break_even_steps(r.first_call_s, r.eager.median, r.compiled.median)
    assert (r.rtol, r.atol) == (1.3e-6, 1e-5)  # torch.testing's float32 defaults, stated in the report
    assert [sum(e.compiled for e in r.recompiles[m]) for m in ("auto", "dynamic")] == [2, 1]
    # every other shape is timed against eager (interleaved) and its values checked
    assert [c.shapes[0] for c in r.shape_checks] == [(8, 32), (4, 32)]
    assert all(c.matches and c.speed.pairs >= 1 and c.speed.verdict in bench.VERDICTS for c in r.shape_checks)
    text = r.format()
    assert "other shapes" in text and "(8×32, 32, 8×32, 8×32): " in text
    assert "first compiled call" in text and "not used (backend 'eager'" in text
    assert "matches eager        yes" in text
    assert f"steady speed-up      {r.speedup:.2f}x (95 % interval {r.speed.low:.2f}x" in text
    assert capfd.readouterr().err == ""


def test_report_catches_a_compiled_function_that_is_wrong():
    def wrong_backend(gm, example_inputs):
        return lambda *args: (
            [out + 1e-3 for out in gm(*args)] if isinstance(gm(*args), (list, tuple)) else gm(*args) + 1e-3
        )

    r = compiling.report(lambda x: torch.sin(x), [torch.randn(64)], backend=wrong_backend, warmup=1, iters=2)
    assert not r.matches and r.max_abs_diff == pytest.approx(1e-3, rel=1e-3)
    assert "NO (" in r.format()


def test_cache_info_points_at_inductors_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    info = compiling.cache_info()
    assert info["dir"] == str(tmp_path) and info["files"] == 0 and isinstance(info["fx_graph_cache"], bool)


def test_benchmark_command_refuses_bad_arguments(capsys):
    from helpers.compiling.__main__ import main

    with pytest.raises(SystemExit):
        main(["--rows", "0"])
    err = capsys.readouterr().err
    assert "must be positive" in err and "Traceback" not in err


@pytest.mark.skipif(
    shutil.which(CXX) is None,
    reason=f"no C++ compiler {CXX!r} on PATH: Inductor cannot generate CPU code here "
    "(install g++, or set CXX)",
)
def test_pick_backend_takes_inductor_with_a_cpp_compiler():
    backend, why = compiling.pick_backend("cpu")
    assert backend == "inductor" and why.startswith("Inductor generates C++ kernels with ")


def test_pick_backend_falls_back_without_a_cpp_compiler(monkeypatch):
    import torch._inductor.config as config

    monkeypatch.setattr(config.cpp, "cxx", ("no-such-compiler++",))
    backend, why = compiling.pick_backend("cpu")
    assert backend == "aot_eager" and "no working C++ compiler" in why and "install g++" in why


def _speed(speedup, low, high, verdict):
    from helpers.bench import Measurement, SpeedComparison

    m = Measurement([0.01] * 10, 0.02, "cpu")
    return SpeedComparison(speedup, low, high, verdict, 10, m, m, 1, "cpu")


def test_step_speedups_carry_the_interval_and_say_when_not_to_trust_it():
    narrow = compiling.step_speedups(_speed(2.0, 1.9, 2.1, "faster"), (0.5,))
    assert narrow == ["part = 50% of the step: step 1.333x faster (95 % interval 1.310x to 1.355x)"]
    wide = compiling.step_speedups(_speed(3.0, 1.5, 6.0, "faster"), (0.2,))
    assert len(wide) == 2 and "too wide to trust" in wide[1] and "300%" in wide[1]
    noise = compiling.step_speedups(_speed(1.1, 0.8, 1.4, "within noise"), (0.2,))
    assert "within noise here" in noise[-1] and "not a result" in noise[-1]
    assert "nothing to apply" in compiling.step_speedups(None)[0]


# --------------------------------------------------------------------------- what backward gets


def test_inductors_partitioner_recomputes_the_chains_add_instead_of_saving_it():
    """A traced aot_function shows the choice: min-cut saves the inputs x, bias and mask (in
    memory anyway) and recomputes h1 = x + bias in the backward; the default partition writes h1."""
    inputs = compiling.chain_inputs(64, 32)
    fn = compiling.bias_gelu_dropout_residual
    min_cut = compiling.saved_for_backward(fn, inputs, needs_grad=(0, 1))
    default = compiling.saved_for_backward(fn, inputs, needs_grad=(0, 1), partitioner="default")
    assert [s.name for s in min_cut.saved] == ["primals_1", "primals_2", "primals_3"]
    assert all(s.is_input for s in min_cut.saved) and min_cut.written == 0
    assert min_cut.read == 4 * (64 * 32 + 32 + 64 * 32)  # x, bias, mask
    assert {s.name for s in default.saved} == {"primals_3", "add"} and default.written == 4 * 64 * 32
    assert min_cut.backward_ops == default.backward_ops + 1  # the recomputed add
    assert "saves primals_1 (input)" in min_cut.format()
    with pytest.raises(ValueError, match="partitioner"):
        compiling.saved_for_backward(fn, inputs, needs_grad=(0,), partitioner="greedy")
    with pytest.raises(ValueError, match="needs_grad"):
        compiling.saved_for_backward(fn, inputs, needs_grad=(7,))


def test_a_compiled_training_step_keeps_what_its_partitioner_chose():
    saved = compiling.whole_step_saved("tiny", batch_size=2)
    assert set(saved) == {"eager", "min_cut", "default"} and all(v > 0 for v in saved.values())
    assert saved["min_cut"] <= saved["default"]  # min-cut never keeps more than saving everything
    assert abs(saved["min_cut"] - saved["eager"]) <= 0.1 * saved["eager"]


def test_regional_compilation_compiles_one_block_and_reuses_it():
    r = compiling.regional_compile("tiny", layers=3, backend="eager", pairs=3, max_seconds=5)
    assert (r.whole_graphs, r.regional_graphs) == (1, 1)  # the block's graph serves all three
    assert r.speed.pairs >= 1 and r.speed.verdict in bench.VERDICTS  # the 5 s budget may end it early
    assert "3 blocks" in r.format() and "interleaved pairs" in r.format()


def test_host_overhead_per_op_is_a_measurement_per_op():
    m = compiling.host_overhead_per_op(ops=50, iters=5)
    assert len(m.samples) == 5 and m.device == "cpu" and m.meta["ops_per_sample"] == 50


def test_host_overhead_per_op_divides_a_sample_of_ops_adds_by_ops(monkeypatch):
    """What is timed and how it is reported, with the timer replaced: each sample is one call
    of a chain of ``ops`` adds, divided by ``ops``. (How long an op takes is measured by the
    chapter's benchmark command, never asserted here.)"""
    from torch.profiler import ProfilerActivity, profile

    seen = {}

    def fake_measure(fn, warmup, iters, device):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        seen.update(
            warmup=warmup,
            iters=iters,
            device=device,
            adds=sum(e.count for e in prof.key_averages() if e.key == "aten::add"),
        )
        return bench.Measurement([float(i) for i in range(1, iters + 1)], 7.0, device)

    monkeypatch.setattr(bench, "measure", fake_measure)
    m = compiling.host_overhead_per_op(ops=40, iters=4)
    assert seen == {"warmup": 2, "iters": 4, "device": "cpu", "adds": 40}
    assert m.samples == [1 / 40, 2 / 40, 3 / 40, 4 / 40] and m.first_call == 7 / 40
    assert m.meta == {"ops_per_sample": 40} and m.device == "cpu"


def test_stage_times_split_a_cold_compile_by_stage():
    """Each stage's own time, from dynamo's timers: all three ran, they nest inside the first
    call, and the C++ compiler is part of Inductor's time."""
    if compiling.pick_backend("cpu")[0] != "inductor":
        pytest.skip("no C++ compiler for Inductor on this machine")
    import torch._inductor.config as inductor_config

    with inductor_config.patch({"cpp.vec_isa_ok": True}):
        t = compiling.stage_times(size=32)
    assert t.dynamo_s > 0 and t.aot_autograd_s > 0 and t.inductor_s > 0
    assert 0 <= t.cxx_compiler_s <= t.inductor_s
    assert t.dynamo_s + t.aot_autograd_s + t.inductor_s <= t.first_call_s * 1.05
    text = t.format()
    assert text.startswith("first call (forward and backward)") and "TorchInductor" in text
