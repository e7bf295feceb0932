"""Chapter 9 (capstone): corpus, tokenizer, data loading, the rules against hand calculations,
phases from hand-made CPU and GPU traces, a real measured run on this CPU, the Tuner's keep /
revert loop, and the report's Markdown / JSON round trip (including the shipped recordings)."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import ROOT

from helpers import mfu, models, report, timeline
from helpers.report import document, phases, rules, runner, tuning

# --------------------------------------------------------------------------- corpus and data


def test_corpus_is_the_documented_public_domain_text():
    readme = (ROOT / "src/helpers/data/capstone_corpus_README.md").read_text()
    assert report.corpus_sha256() in readme and "public domain" in readme.lower()
    text = report.corpus_text()
    assert len(report.corpus_bytes()) == 383_157 and text.isascii()
    assert "THE DEVIL'S DICTIONARY" in text[:2000] and "ZOOLOGY, n." in text
    packed = (ROOT / "src/helpers/data/capstone_corpus.txt.gz").stat().st_size
    assert packed < 200_000  # ships inside the package; no download at run time


def test_byte_tokenizer_round_trips_any_text_and_rejects_bad_ids():
    tok = report.ByteTokenizer()
    ids = tok.encode("naïve €")
    assert ids.dtype == torch.int64 and ids.tolist()[:2] == [110, 97] and len(ids) == 10  # UTF-8 bytes
    assert tok.decode(ids) == "naïve €" and tok.vocab_size == 256
    assert report.corpus_tokens().max() < 256
    with pytest.raises(ValueError, match=r"0\.\.255"):
        tok.decode([65, 300])


def test_token_windows_are_next_token_pairs():
    tokens = torch.arange(20)
    ds = report.TokenWindows(tokens, seq_len=6, stride=4)
    assert len(ds) == 4  # starts 0, 4, 8, 12 (12 + 7 <= 20)
    x, y = ds[3]
    assert x.tolist() == list(range(12, 18)) and y.tolist() == list(range(13, 19))
    with pytest.raises(IndexError):
        ds[4]
    with pytest.raises(ValueError, match="at least seq_len"):
        report.TokenWindows(torch.arange(5), seq_len=6)


def test_slow_dataset_waits_per_item():
    waits = []
    ds = report.SlowDataset(report.TokenWindows(torch.arange(50), 8), delay_ms=4.0, sleep=waits.append)
    ds[0], ds[1]
    assert waits == [0.004, 0.004] and len(ds) == len(ds.base)
    with pytest.raises(ValueError, match="delay_ms"):
        report.SlowDataset(ds, -1)
    per_sample = report.make_dataset(16, delay_ms_per_sample=2.5)
    assert isinstance(per_sample, report.SlowDataset) and per_sample.delay_ms == 2.5
    assert isinstance(report.make_dataset(16), report.TokenWindows)


def test_loader_order_depends_on_the_seed_not_on_workers():
    ds = report.make_dataset(16)
    plain = [x for x, _ in report.make_loader(ds, 4, 12, seed=3)]
    ahead = [x for x, _ in report.batches(report.make_loader(ds, 4, 12, seed=3, workers=2))]
    other = [x for x, _ in report.make_loader(ds, 4, 12, seed=4)]
    assert len(plain) == 3 and all(torch.equal(a, b) for a, b in zip(plain, ahead, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(plain, other, strict=True))


# --------------------------------------------------------------------------- the rules by hand


def fake_row(
    name="baseline",
    med=10.0,
    lo=9.0,
    hi=11.0,
    *,
    loss=3.0,
    peak=None,
    saved=4.0,
    model_flops=6e9,
    executed_flops=6e9,
    data=(1.0, 1.0),
    compute=((3.0, 5.0, 2.0),) * 2,
    other=0.5,
    precision="fp32",
    tried_on=None,
    checkpointing=False,
):
    steps = [
        {
            "step": data_ms + sum(c) + other,
            "data": data_ms,
            "forward": c[0],
            "backward": c[1],
            "optimizer": c[2],
            "other": other,
        }
        for data_ms, c in zip(data, compute, strict=True)
    ]
    row = {
        "name": name,
        "change": f"change {name}",
        "device": "cpu",
        "device_name": "CPU (2 threads)",
        "precision": precision,
        "num_devices": 1,
        "batch_size": 8,
        "seq_len": 64,
        "step_time_ms": med,
        "step_time_min_ms": lo,
        "step_time_max_ms": hi,
        "step_time_samples_ms": [lo, med, hi],
        "first_step_ms": 3 * med,
        "data_wait_ms": data[0],
        "peak_mem_mb": peak,
        "saved_mb": saved,
        "loss": loss,
        "loss_steps": 23,
        "model_flops": model_flops,
        "executed_flops": executed_flops,
        "peak_flops": 1e13,
        "peak_kind": "measured",
        "peak_source": "a test",
        "phases_ms": phases.mean_phases(steps),
        "phase_steps_ms": steps,
        "trace": "",
        "config": tuning.baseline_config("cpu").settings(),
    }
    row["config"]["checkpointing"] = checkpointing
    if tried_on:
        row["tried_on"] = tried_on
    return row


def test_mfu_hfu_by_hand():
    row = {"step_time_ms": 500.0, "num_devices": 4, "model_flops": 6e15, "executed_flops": 8e15}
    got = report.mfu_hfu(row, 1e15)
    assert got == pytest.approx((6e15 / (0.5 * 4 * 1e15), 8e15 / (0.5 * 4 * 1e15)))
    assert report.mfu_hfu({k: v for k, v in row.items() if k != "num_devices"}, 1e15)[0] == pytest.approx(12)
    with pytest.raises(ValueError):
        report.mfu_hfu(row, 0)


def test_compare_reads_improved_from_the_verdict_of_the_same_pair():
    base = fake_row(med=10, lo=9, hi=12, saved=5.0)
    inside = fake_row(med=9.5, lo=7, hi=9.8, saved=4.0)
    got = report.compare(base, inside)  # measured apart: two medians cannot say
    assert got == {
        "step_time_delta_ms": pytest.approx(0.5),
        "memory_delta_mb": pytest.approx(1.0),
        "time_improved": None,
        "memory_improved": True,
    }
    verdicts = {}
    for verdict in ("faster", "slower", "within noise"):
        tuned = dict(
            fake_row("fused", med=8.9, lo=8, hi=15, saved=6.0),
            tried_on="baseline",
            speed={"verdict": verdict, "speedup": 1.1, "low": 1.0, "high": 1.2},
        )
        verdicts[verdict] = report.compare(base, tuned)["time_improved"]
        assert report.compare(base, tuned)["memory_improved"] is False
        assert report.compare(fake_row("workers"), tuned)["time_improved"] is None  # another pair
    assert verdicts == {"faster": True, "slower": False, "within noise": False}
    cuda = report.compare(fake_row(peak=100.0, saved=1.0), fake_row(peak=60.0, saved=9.0))
    assert cuda["memory_delta_mb"] == pytest.approx(40.0)  # the CUDA peak wins over saved bytes
    none = report.compare(base, fake_row(saved=None))
    assert none["memory_delta_mb"] is None and none["memory_improved"] is None


def test_data_stall_is_a_ratio_of_totals_strictly_above_the_threshold():
    assert report.data_stall([2, 2], [10, 10]) == (pytest.approx(0.2), False)
    assert report.data_stall([0, 6], [20, 10]) == (pytest.approx(0.2), False)  # mean of ratios: 0.3
    assert report.data_stall([2.4], [10])[1] is True  # against compute, not the 12.4 ms step
    assert report.data_stall([1], [10], threshold=0.05)[1] is True
    with pytest.raises(ValueError, match="one data time"):
        report.data_stall([1, 2], [3])
    with pytest.raises(ValueError, match="positive"):
        report.data_stall([1], [0])


@pytest.mark.parametrize(
    "data,fwd,bwd,opt,other,threshold,label",
    [
        (2.0, 3.0, 4.0, 3.0, 1.0, 0.2, "compute-bound"),  # data exactly 20% of compute 10
        (2.5, 3.0, 4.0, 3.0, 1.0, 0.2, "data-bound"),
        (0.5, 2.0, 3.0, 9.0, 1.0, 0.2, "optimizer-bound"),
        (0.1, 1.0, 2.0, 0.5, 4.0, 0.2, "host-bound"),
        (30.0, 40.0, 80.0, 20.0, 5.0, 0.2, "data-bound"),  # 21% of compute, only 17% of the step
        (27.0, 40.0, 80.0, 20.0, 5.0, 0.2, "compute-bound"),
        (1.0, 3.0, 4.0, 5.0, 0.5, 0.2, "compute-bound"),  # forward + backward together beat optimizer
    ],
)
def test_bottleneck_class(data, fwd, bwd, opt, other, threshold, label):
    p = {"data": data, "forward": fwd, "backward": bwd, "optimizer": opt, "other": other}
    assert report.bottleneck_class(p, threshold) == label
    assert label in report.NEXT_ACTIONS


def test_bottleneck_class_needs_every_phase():
    with pytest.raises(KeyError, match="phases lack"):
        report.bottleneck_class({"data": 1.0, "forward": 2.0})


@pytest.mark.parametrize(
    "args,want",
    [
        ((False, 10.0, 10.0, True, None), ("keep", "faster")),
        ((False, 10.0, 10.0, False, None), ("revert", "not faster")),  # no measurable gain: simpler code
        ((True, 10.0, 5.0, True, None), ("revert", "loss")),  # faster, but training moved
        ((False, 700.0, 900.0, True, 800.0), ("revert", "too big")),  # does not fit
        ((False, 900.0, 800.0, False, 800.0), ("keep", "fits now")),  # slower, but now it fits
        ((False, 500.0, 400.0, False, 800.0), ("revert", "not faster")),
        ((False, None, None, True, 800.0), ("keep", "faster")),
    ],
)
def test_decide_training_then_memory_then_speed(args, want):
    assert report.decide(*args) == want[0]
    assert rules.decide_why(*args) == want


def test_loss_gap_compares_curves_step_by_step():
    base = {"loss_curve": [5.0, 4.0, 3.0, 2.5, 2.2, 2.1, 2.0, 2.0, 1.9, 2.0], "loss": 2.0}
    learned = 5.0 - (2.1 + 2.0 + 2.0 + 1.9 + 2.0) / 5  # first step minus the mean of the last five
    same = {"loss_curve": [v + 1e-4 for v in base["loss_curve"]]}
    gap, tolerance = rules.loss_gap(base, same)
    assert gap == pytest.approx(1e-4) and tolerance == pytest.approx(rules.LOSS_CURVE_SHARE * learned)
    bump = {
        "loss_curve": base["loss_curve"][:3]
        + [v + 0.6 for v in base["loss_curve"][3:6]]
        + base["loss_curve"][6:]
    }
    assert rules.loss_gap(base, bump)[0] == pytest.approx(0.18)  # the same end, a bump mid-run
    assert rules.moved_training(base, bump) and not rules.moved_training(base, same)
    # rows without curves: the loss after N steps against 2 % of the baseline's
    assert rules.loss_gap({"loss": 2.0}, {"loss": 2.05}) == pytest.approx((0.05, 0.04))
    assert rules.moved_training({"name": "baseline"}, {"name": "x"}) is False  # nothing to judge by


# --------------------------------------------------------------------------- phases from traces


def _write(tmp_path, events, name="t.json.gz"):
    path = tmp_path / name
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    return timeline.load_trace(path)


def _x(name, ts, dur, cat="user_annotation", tid=1, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}


def test_step_phases_on_a_cpu_trace_are_range_lengths(tmp_path):
    events = []
    for i, t0 in enumerate((0, 1000)):
        events += [
            _x(f"ProfilerStep#{i}", t0, 1000),
            _x("dataloader", t0 + 10, 200),
            _x("forward", t0 + 210, 250),
            _x("backward", t0 + 460, 400),
            _x("optimizer", t0 + 860, 100),
            _x("aten::mm", t0 + 300, 50, cat="cpu_op"),
        ]
    got = phases.step_phases(_write(tmp_path, events))
    assert (
        got
        == [
            {
                "step": 1.0,
                "data": 0.2,
                "forward": 0.25,
                "backward": 0.4,
                "optimizer": 0.1,
                "other": pytest.approx(0.05),
            }
        ]
        * 2
    )
    mean = report.mean_phases(got)
    assert mean["backward"] == pytest.approx(0.4)


def test_step_phases_on_a_gpu_trace_follow_kernels_to_their_launch(tmp_path):
    k = dict(cat="kernel", tid=7)
    events = [
        _x("ProfilerStep#0", 0, 1000),
        _x("dataloader", 0, 300),
        _x("forward", 300, 100),
        _x("backward", 400, 100),
        _x("optimizer", 500, 50),
        _x("cudaLaunchKernel", 310, 5, cat="cuda_runtime", correlation=1),
        _x("cudaLaunchKernel", 320, 5, cat="cuda_runtime", correlation=2),
        _x("cudaLaunchKernel", 410, 5, cat="cuda_runtime", correlation=3, tid=2),  # autograd thread
        _x("cudaLaunchKernel", 510, 5, cat="cuda_runtime", correlation=4),
        # forward kernels 0.1 + 0.15 ms (overlapping: union 0.2), backward 0.4 ms, optimizer 0.1 ms
        _x("ampere_gemm_fwd", 320, 100, stream=7, correlation=1, **k),
        _x("elementwise_fwd", 370, 150, stream=7, correlation=2, **k),
        _x("ampere_gemm_bwd", 520, 400, stream=7, correlation=3, **k),
        _x("adam_kernel", 920, 80, stream=7, correlation=4, **k),
    ]
    trace = _write(tmp_path, events)
    assert trace.is_gpu
    got = phases.step_phases(trace)[0]
    assert got["forward"] == pytest.approx(0.2) and got["backward"] == pytest.approx(0.4)
    assert got["optimizer"] == pytest.approx(0.08)
    # the GPU idles 0-320 µs while the host is in dataloader until 300: 0.3 ms of data wait
    assert got["data"] == pytest.approx(0.3)
    assert got["other"] == pytest.approx(1.0 - 0.3 - 0.2 - 0.4 - 0.08)


def test_step_phases_says_what_is_missing(tmp_path):
    with pytest.raises(ValueError, match="no ProfilerStep"):
        phases.step_phases(_write(tmp_path, [_x("forward", 0, 10)]))
    with pytest.raises(ValueError, match="annotate the loop"):
        phases.step_phases(_write(tmp_path, [_x("ProfilerStep#0", 0, 10)], "b.json.gz"))


# --------------------------------------------------------------------------- a real run on this CPU


def micro(**changes) -> report.RunConfig:
    cfg = models.GPTConfig(vocab_size=256, seq_len=16, d_model=32, n_layers=2, n_heads=2, name="micro")
    base = report.RunConfig(
        cfg,
        batch_size=4,
        seq_len=16,
        warmup=1,
        windows=2,
        steps_per_window=2,
        trace_steps=2,
        data_delay_ms=0.0,
    )
    return replace(base, **changes)


@pytest.fixture(scope="module")
def micro_rows(tmp_path_factory):
    folder = tmp_path_factory.mktemp("micro")
    return {
        name: report.run_config(micro(**changes), trace_dir=folder)
        for name, changes in {
            "base": {},
            "ckpt": {"checkpointing": True, "name": "ckpt"},
            "workers": {"workers": 2, "name": "workers", "sync_every_step": False},
        }.items()
    }


def test_run_config_measures_a_complete_row(micro_rows):
    row = micro_rows["base"]
    cfg = micro()
    assert row["peak_mem_mb"] is None and row["saved_mb"] > 0  # CPU: no peak, saved bytes instead
    assert row["memory_mb"] == row["saved_mb"] and row["loss_steps"] == cfg.warmup + 4
    assert len(row["step_time_samples_ms"]) == 2
    assert row["step_time_min_ms"] <= row["step_time_ms"] <= row["step_time_max_ms"]
    assert row["model_flops"] == mfu.model_flops_per_step(cfg.model, 4, 16)
    assert row["executed_flops"] == mfu.counted_flops_formula(cfg.model, 4, 16)
    assert row["peak_kind"] == "measured" and row["peak_flops"] > 0
    assert row["mfu"] == pytest.approx(row["model_flops"] / (row["step_time_ms"] / 1e3 * row["peak_flops"]))
    assert len(row["phase_steps_ms"]) == 2 and set(row["phases_ms"]) == {"step", *rules.PHASES}
    assert row["bottleneck"] in report.NEXT_ACTIONS and Path(row["trace"]).is_file()
    assert 0 < row["loss"] < math.log(256) + 0.5
    json.dumps(row)  # plain data


def test_checkpointing_saves_less_and_executes_more(micro_rows):
    base, ckpt = micro_rows["base"], micro_rows["ckpt"]
    assert ckpt["saved_mb"] < 0.6 * base["saved_mb"]
    assert ckpt["executed_flops"] > base["executed_flops"] and ckpt["model_flops"] == base["model_flops"]
    assert ckpt["hfu"] > ckpt["mfu"]
    assert ckpt["loss"] == pytest.approx(base["loss"], rel=1e-5)  # same math, recomputed


def test_workers_and_no_sync_train_on_the_same_batches(micro_rows):
    assert micro_rows["workers"]["loss"] == pytest.approx(micro_rows["base"]["loss"], rel=1e-6)


def test_saved_bytes_counts_each_storage_once():
    w = torch.randn(64, 64, requires_grad=True)
    x = torch.randn(8, 64)
    _, nbytes = report.saved_bytes(lambda: (x @ w).sum())
    assert nbytes == 8 * 64 * 4  # the gradient of w needs x; w itself is not needed
    x.requires_grad_(True)
    _, both = report.saved_bytes(lambda: (x @ w).sum())
    assert both == (64 * 64 + 8 * 64) * 4
    _, views = report.saved_bytes(lambda: (x[:4] @ w + x[4:] @ w).sum())  # two views of x
    assert views == both


def test_run_config_rejects_bad_settings():
    with pytest.raises(ValueError, match="precision"):
        micro(precision="fp8")
    with pytest.raises(ValueError, match="exceeds the model's context"):
        micro(seq_len=32)
    with pytest.raises(ValueError, match="workers"):
        micro(workers=-1)


# --------------------------------------------------------------------------- the tuner


def windows_comparer(timings):
    """A stand-in for runner.compare_configs: each side's windows cycle through its
    (median, low, high) step times on a fake clock, so the verdict comes from real pairs."""
    from helpers import bench

    def compare(old, new, quick):
        now, calls = [0.0], {old.name: 0, new.name: 0}

        def side(name):
            def run():
                now[0] += timings[name][calls[name] % 3] * 5 / 1e3
                calls[name] += 1

            return run

        return bench.compare_windows(
            side(old.name),
            side(new.name),
            steps=5,
            device="cpu",
            clock=lambda: now[0],
            min_pairs=12,
            max_pairs=12,
            names=(old.name, new.name),
        )

    return compare


def test_tuner_keeps_and_reverts_and_builds_on_what_was_kept():
    # no_sync: lower median, but a pair in three is slower: within noise, reverted
    timings = {
        "baseline": (10, 9.5, 11),
        "no_sync": (9.9, 9.0, 11.5),
        "workers": (6, 5.5, 7),
        "bf16": (5, 4.8, 5.2),
        "fused": (6.5, 6, 7),
        "checkpoint": (7, 6.8, 7.5),
        "compile": (4, 3.5, 4.5),
    }
    seen = []

    def fake_run(config, quick, trace_dir):
        seen.append(config)
        med, lo, hi = timings[config.name]
        loss = 3.0 + (0.2 if config.name == "bf16" else 0.0)  # bf16 moves the loss too much
        return rules.derive(
            fake_row(config.name, med, lo, hi, loss=loss, saved=1.0 if config.checkpointing else 4.0)
        )

    tuner = report.Tuner(report.baseline_config("cpu"), runner=fake_run, comparer=windows_comparer(timings))
    with pytest.raises(RuntimeError, match="baseline first"):
        tuner.try_change("workers")
    tuner.run_baseline()
    decisions = {c.name: tuner.try_change(c.name)["decision"] for c in report.tuning_steps("cpu")}
    assert decisions == {
        "no_sync": "revert",
        "workers": "keep",
        "bf16": "revert",
        "fused": "revert",
        "checkpoint": "revert",
        "compile": "keep",
    }
    assert seen[-1].workers == 4 and seen[-1].compile and not seen[-1].checkpointing
    assert seen[-1].precision == "fp32" and seen[-1].sync_every_step  # reverted changes stay out
    assert tuner.tuned["name"] == "compile" and tuner.rows[-1]["tried_on"] == "workers"
    speed = {r["name"]: r["speed"] for r in tuner.rows[1:]}
    assert speed["no_sync"]["verdict"] == "within noise"
    assert speed["no_sync"]["low"] < 1 < speed["no_sync"]["high"]
    assert speed["checkpoint"]["verdict"] == "slower" and speed["workers"]["verdict"] == "faster"
    assert speed["fused"]["verdict"] == "within noise"  # one pair in three equal
    assert speed["workers"]["pairs"] == 12 and "interleaved pairs" in speed["workers"]["sentence"]
    with pytest.raises(KeyError, match="unknown change"):
        tuner.try_change("magic")
    rep = report.build_report(tuner.rows)
    assert any("reverted bf16 (tried on workers): training moved" in f for f in rep.trace_findings)
    assert rep.tuned["name"] == "compile" and "activation_checkpoint=off" in rep.parallel


def test_a_memory_budget_keeps_checkpointing_even_when_slower():
    def fake_run(config, quick, trace_dir):
        saved = 1.0 if config.checkpointing else 4.0
        med = 12.0 if config.checkpointing else 10.0
        return rules.derive(fake_row(config.name, med, med - 0.5, med + 0.5, saved=saved))

    slower = windows_comparer({"baseline": (10, 9.5, 10.5), "checkpoint": (12, 11.5, 12.5)})
    tuner = report.Tuner(
        replace(report.baseline_config("cpu"), memory_budget_mb=2.0), runner=fake_run, comparer=slower
    )
    tuner.run_baseline()
    assert tuner.try_change("checkpoint")["decision"] == "keep"
    assert tuner.current.checkpointing


def test_tuning_steps_and_baselines():
    cpu = report.tuning_steps("cpu")
    assert [c.name for c in cpu] == ["no_sync", "workers", "bf16", "fused", "checkpoint", "compile"]
    assert cpu[1].fields == {"workers": 4, "pin_memory": False}
    quick, full = report.baseline_config("cpu", True), report.baseline_config("cpu", False)
    assert quick.model.num_params() < full.model.num_params() and quick.data_delay_ms > 0
    assert quick.sync_every_step and quick.precision == "fp32" and not quick.compile


# --------------------------------------------------------------------------- the report document


def _report(tmp_path=None):
    rows = [rules.derive(fake_row("baseline", 10, 9, 11, data=(5.0, 5.0)))]
    rows[0]["decision"] = "baseline"
    workers = dict(
        fake_row("workers", 6, 5.5, 7, tried_on="baseline"),
        speed={"verdict": "faster", "speedup": 1.6, "low": 1.5, "high": 1.7, "pairs": 10},
    )
    rows.append(rules.derive(workers, baseline=rows[0], previous=rows[0]))
    return report.build_report(rows, recorded={"date": "2026-01-01", "where": "a test"})


def test_a_change_with_no_interleaved_verdict_is_not_kept():
    """Medians timed apart never make a change "faster": without a verdict it is reverted."""
    base = rules.derive(fake_row("baseline", 10, 9, 11))
    lower_median = rules.derive(
        fake_row("workers", 6, 5.5, 7, tried_on="baseline"), baseline=base, previous=base
    )
    assert lower_median["faster"] is False and lower_median["decision"] == "revert"


def test_report_has_the_template_sections_and_reads_back(tmp_path):
    rep = _report()
    md = rep.to_markdown()
    for part in (
        "experiment:",
        "hardware:",
        "config:",
        "parallel:",
        "## Throughput",
        "## Trace findings",
        "## Next action",
    ):
        assert part in md
    assert "data-bound" in md and "data stall: data 50% of compute" in md
    paths = rep.write(tmp_path)
    assert set(paths) == {"markdown", "json", "plot"} and paths["plot"].stat().st_size > 10_000
    back = report.read_report(tmp_path)
    assert back.table() == rep.table() == report.parse_markdown_table(paths["markdown"].read_text())
    assert back.rows[1]["decision"] == "keep" and back.tuned["name"] == "workers"
    assert back.to_markdown() == md


def test_reading_back_recomputes_derived_numbers(tmp_path):
    rep = _report()
    data = json.loads(rep.to_json())
    data["rows"][1]["mfu"] = 0.99  # a stale or edited derived number
    data["rows"][1]["step_time_ms"] = 20.0  # a measured number changed: MFU and the flags follow
    data["rows"][1]["speed"]["verdict"] = "within noise"  # and so does the decision
    (tmp_path / "report.json").write_text(json.dumps(data))
    back = report.read_report(tmp_path / "report.json")
    assert back.rows[1]["mfu"] == pytest.approx(report.mfu_hfu(back.rows[1], 1e13)[0])
    assert back.rows[1]["decision"] == "revert"
    # the findings and the next action are the rows', never the text stored with them
    data["next_action"] = ["tuned is compute-bound: next, try bf16, torch.compile"]
    data["trace_findings"] = ["stale"]
    (tmp_path / "report.json").write_text(json.dumps(data))
    back = report.read_report(tmp_path / "report.json")
    assert back.next_action == document.next_actions(back.rows) and "stale" not in back.trace_findings
    assert back.next_action[0].startswith("- ") is False and "baseline" in back.next_action[0]


def test_read_report_errors_are_one_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="no report at"):
        report.read_report(tmp_path / "missing.json")
    (tmp_path / "report.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"not a report written by helpers\.report"):
        report.read_report(tmp_path)
    with pytest.raises(ValueError, match="no table"):
        report.parse_markdown_table("# nothing here")
    with pytest.raises(KeyError, match="unknown recorded report"):
        report.recorded_report("tpu")


@pytest.mark.parametrize("name", sorted(document.RECORDED))
def test_shipped_recordings_are_labelled_and_consistent(name):
    path = ROOT / "src/helpers/data" / document.RECORDED[name]
    stored = json.loads(path.read_text())
    rep = report.recorded_report(name)
    assert rep.recorded["date"] and "CPU" in rep.recorded["where"] and rep.hardware["device"] == "cpu"
    for key in ("command", "device_model", "threads", "torch", "commit"):  # the header's provenance
        assert rep.recorded.get(key) not in (None, ""), (name, key)
    assert rep.rows[0]["name"] == "baseline" and len(rep.rows) >= 4
    by_name = {}
    for old, new in zip(stored["rows"], rep.rows, strict=True):  # derived numbers recompute the same
        for key in (
            "mfu",
            "hfu",
            "bottleneck",
            "stalled",
            "data_ratio",
            "decision",
            "reason",
            "vs_baseline",
            "vs_previous",
            "flags",
        ):
            same = old.get(key) == new.get(key) or old[key] == pytest.approx(new[key])
            assert same, (name, old["name"], key)
        assert new["top_ops"] and new["loss_curve"] and len(new["loss_curve"]) == new["loss_steps"]
        if new["name"] == "baseline":
            by_name[new["name"]] = new
            continue
        # every change was decided by an interleaved comparison with the configuration it was tried on
        speed = new["speed"]
        assert speed["verdict"] in ("faster", "slower", "within noise") and speed["pairs"] >= 6, new["name"]
        assert speed["low"] <= speed["speedup"] <= speed["high"], new["name"]
        assert new["why"], new["name"]  # the tuner said why it tried the change
        before = by_name[new["tried_on"]]
        assert new["decision"] == report.decide(
            report.moved_training(rep.rows[0], new),
            before["memory_mb"],
            new["memory_mb"],
            speed["verdict"] == "faster",
            None,
        )
        by_name[new["name"]] = new
    # the tuner followed the profile: each change it picked fixes the kept configuration's bottleneck,
    # or the next largest part of the step once those fixes were spent
    picked = [r for r in rep.rows[1:] if not r["why"].startswith("asked for")]
    assert picked and all(r["name"] in r["why"] for r in picked)
    assert rep.control and rep.control["verdict"] == "within noise" and rep.control["pairs"] >= 6
    # the traces of the rows ship with the recording, and the rows point to them
    for row in rep.rows:
        assert report.recorded_row_trace(name, row).is_file(), (name, row["name"])
    assert rep.recorded["load_average_1min"]["start"] is not None
    readme = (ROOT / "src/helpers/data/capstone_recorded_README.md").read_text()
    assert document.RECORDED[name] in readme and rep.recorded["date"] in readme
    load = rep.recorded["load_average_1min"]
    assert f"{load['start']}–{load['end']}" in readme  # the README states the load the recording saw


def test_cli_show_and_bad_input(tmp_path):
    _report().write(tmp_path, plot=False)
    ok = subprocess.run(
        [sys.executable, "-m", "helpers.report", "show", str(tmp_path)], capture_output=True, text=True
    )
    assert ok.returncode == 0 and "| workers |" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "helpers.report", "show", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no report at" in bad.stderr


# --------------------------------------------------------------------------- the report's flags


def test_a_clean_row_raises_no_flag():
    base = rules.derive(fake_row("baseline", 12.0, 11.5, 12.5))
    fused = rules.derive(
        fake_row("fused", 10.5, 10, 11, compute=((3.0, 5.0, 0.5),) * 2), baseline=base, previous=base
    )
    assert base["flags"] == [] and fused["flags"] == []


def test_each_flag_fires_on_its_case():
    base = rules.derive(fake_row("baseline", 12.0, 11.5, 12.5))  # phases sum to 11.5 ms
    # fused AdamW saving 7 ms when the optimizer took 2 ms of the step
    fused = rules.flags(fake_row("fused", 5.0, 4.8, 5.2, compute=((3.0, 2.0, 0.5),) * 2), base)
    assert any("more than the 2.50 ms of optimizer + other" in f for f in fused)
    assert any("backward moved -3.00 ms though the change does not act on it" in f for f in fused)
    assert any("timed step 5.00 ms vs profiled 7.00 ms" in f for f in fused)
    noisy = fake_row("baseline")
    noisy["peak_spread"] = 1.07
    assert rules.flags(noisy) == ["the measured peak's runs spread 107%: MFU is not reliable"]
    assert any("MFU 250%: above 100 %" in f for f in rules.flags(dict(fake_row("bf16"), mfu=2.5)))
    short = fake_row("workers", 11.5, 11, 12)
    short["config"].update(workers=4, prefetch_factor=4, windows=4, steps_per_window=5)
    assert any("20 timed steps against a loader queue of 4 × 4" in f for f in rules.flags(short))
    short["config"].update(prefetch_factor=2, windows=5)
    assert rules.flags(short) == []
    assert rules.derive(noisy)["flags"] and "check:" in document.table_row(rules.derive(noisy))[-1]
    # the interleaved verdict says faster, the medians timed apart say slower (and the reverse)
    for verdict, timed in (("faster", 12.4), ("slower", 11.6)):
        row = dict(fake_row("fused", timed, timed - 0.3, timed + 0.3), speed={"verdict": verdict})
        assert any(f"disagree with the interleaved verdict '{verdict}'" in f for f in rules.flags(row, base))
        agreeing = dict(row, step_time_ms=24.0 - timed)
        assert not any("disagree" in f for f in rules.flags(agreeing, base))
    within = dict(fake_row("fused", 12.4, 12.1, 12.7), speed={"verdict": "within noise"})
    assert not any("disagree" in f for f in rules.flags(within, base))
    # an interval whose low end is above what removing the phases the change acts on allows
    bound = rules.speedup_bound(base, "fused")  # 12 / (12 - 2.5)
    assert bound == pytest.approx(12.0 / 9.5)
    beyond = dict(fake_row("fused", 9.6, 9.5, 9.7), speed={"verdict": "faster", "low": 1.3, "high": 1.4})
    assert any(
        "above the 1.26x that removing all of optimizer + other" in f for f in rules.flags(beyond, base)
    )
    inside = dict(beyond, speed={"verdict": "faster", "low": 1.2, "high": 1.25})
    assert not any("removing all of" in f for f in rules.flags(inside, base))
    # an interval too wide to act on
    wide = dict(fake_row("bf16"), speed={"verdict": "faster", "low": 1.13, "high": 3.01})
    assert any("too wide to act on" in f for f in rules.flags(wide))
    assert not any("too wide" in f for f in rules.flags(dict(wide, speed={"low": 1.1, "high": 1.4})))
    # a verdict from windows shorter than 3 x the loader's queue, while the run waited for data
    waited = dict(
        fake_row("bf16", 10.0, 9.8, 10.2), data_wait_ms=1.0, speed={"verdict": "faster", "window_steps": 3}
    )
    waited["config"].update(workers=4, prefetch_factor=2, windows=5, steps_per_window=5)
    said = "the verdict's windows of 3 steps are shorter than 3 × the loader's queue of 4 × 2 batches"
    assert any(said in f for f in rules.flags(waited))
    for quiet in (
        dict(waited, data_wait_ms=0.2),  # the loader keeps up: nothing to hide
        dict(waited, speed={"verdict": "faster", "window_steps": 24}),
    ):  # long enough windows
        assert not any("verdict's windows" in f for f in rules.flags(quiet))


def test_with_workers_the_verdict_windows_outlast_the_loader_queue(monkeypatch):
    seen = {}

    def fake_windows(a, b, *, steps, **kw):
        seen["steps"] = steps
        raise RuntimeError("stop here")

    monkeypatch.setattr(runner, "compare_windows", fake_windows)
    monkeypatch.setattr(
        runner.Trainer,
        "build",
        classmethod(
            lambda cls, cfg, total: types.SimpleNamespace(
                step=lambda *a: None, next_batch=lambda: (None, None), batches=None
            )
        ),
    )
    old = micro()
    for workers, want in ((0, 2), (4, 3 * 4 * 2)):
        with pytest.raises(RuntimeError, match="stop here"):
            runner.compare_configs(old, micro(name="workers", workers=workers))
        assert seen["steps"] == want


def test_the_quick_baselines_time_long_enough_for_their_loader_queue():
    for device in ("cpu", "cuda"):
        for quick in (True, False):
            cfg = report.baseline_config(device, quick)
            workers = tuning.worker_count(device)
            assert cfg.timed_steps >= rules.QUEUE_RUNS * workers * cfg.prefetch_factor, (device, quick)


def test_compare_configs_times_two_configurations_interleaved():
    """Real timing of two micro configurations: only the shape of the answer is checked."""
    from helpers import bench

    speed = runner.compare_configs(
        micro(), micro(name="no_sync", sync_every_step=False), min_pairs=3, max_pairs=4, max_seconds=5
    )
    # the 5 s budget is wall-clock: on a busy machine it may end the timing before 3 pairs
    assert speed.verdict in bench.VERDICTS and 1 <= speed.pairs <= 4 and speed.low <= speed.high
    assert speed.names == ("baseline", "no_sync") and speed.unit == "step"
    summary = runner.speed_summary(speed)
    assert summary["verdict"] == speed.verdict and "interleaved pairs" in summary["sentence"]


# --------------------------------------------------------------------------- judgement (exercises 1-4)


def _phases(data, fwd, bwd, opt, other):
    return {"data": data, "forward": fwd, "backward": bwd, "optimizer": opt, "other": other}


@pytest.mark.parametrize(
    "phases, threshold, want",
    [
        (_phases(8, 10, 20, 2, 1), 0.2, ("data-bound", "data")),  # 25% of compute
        (_phases(8, 10, 20, 2, 1), 0.25, ("compute-bound", "backward")),  # exactly 25%: not above
        (_phases(0, 30, 20, 2, 1), 0.2, ("compute-bound", "forward")),
        (_phases(0, 1, 2, 9, 1), 0.2, ("optimizer-bound", "optimizer")),
        (_phases(0, 1, 2, 1, 9), 0.2, ("host-bound", "other")),
    ],
)
def test_bottleneck_phase(phases, threshold, want):
    assert rules.bottleneck_phase(phases, threshold) == want


def test_recorded_traces_are_real_capstone_steps_with_distinct_bottlenecks():
    assert set(document.RECORDED_TRACES) == {
        "tiny-baseline",
        "tiny-workers",
        "tiny-fused",
        "tiny-compiled",
        "wide-batch1",
    }
    found = {}
    for name in document.RECORDED_TRACES:
        trace = timeline.load_trace(report.recorded_trace(name))
        per_step = report.step_phases(trace)
        assert len(per_step) == 3 and not trace.is_gpu, name
        found[name] = rules.bottleneck_phase(report.mean_phases(per_step))
        ops = report.top_operators(trace)
        assert ops and all(ms > 0 for _, ms in ops) and ops == sorted(ops, key=lambda kv: -kv[1]), name
        assert report.device_idle_share(trace) is None  # a CPU trace: no device to sit idle
    assert found["tiny-baseline"] == ("data-bound", "data")
    assert found["wide-batch1"] == ("optimizer-bound", "optimizer")
    assert found["tiny-compiled"][0] == "compute-bound"
    readme = (ROOT / "src/helpers/data/capstone_recorded_README.md").read_text()
    assert all(file in readme for file in document.RECORDED_TRACES.values())
    with pytest.raises(KeyError, match="recorded trace"):
        report.recorded_trace("nope")


def test_top_operators_count_self_time_once(tmp_path):
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "ts": 0,
            "dur": 100,
            "pid": 1,
            "tid": 1,
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": 10, "dur": 50, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": 12, "dur": 40, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "ts": 70, "dur": 20, "pid": 1, "tid": 1},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    ops = dict(report.top_operators(timeline.load_trace(path)))
    assert ops == pytest.approx({"aten::addmm": 0.040, "aten::relu": 0.020, "aten::linear": 0.010})


def test_doubt_checks_the_phase_before_the_change_then_the_verdict():
    before = {"name": "baseline", "step_time_ms": 30.0, "phases_ms": _phases(20, 3, 5, 1, 0.5)}
    row = {
        "name": "workers",
        "tried_on": "baseline",
        "step_time_ms": 12.0,
        "phases_ms": _phases(2, 3, 5, 1, 0.5),
        "speed": {"verdict": "faster"},
    }
    assert report.doubt(row, before) == "ok"  # saved 18 of the 20 ms data phase it acts on
    assert report.doubt(dict(row, step_time_ms=9.0), before) == "larger than the phase"
    assert report.doubt(dict(row, speed={"verdict": "within noise"}), before) == "not faster"
    impossible = dict(row, name="no_sync", speed={"verdict": "within noise"})
    assert report.doubt(impossible, before) == "larger than the phase"  # the first reason wins
    assert report.doubt(dict(row, speed=None), before) == "not faster"


def _made(*spec, curve=(5.0, 4.0, 3.0, 2.5, 2.2, 2.1, 2.0, 2.0, 1.9, 2.0)):
    """Example rows: (name, decision, tried_on, phases, peak MiB, nats the loss curve moved)."""
    return [
        {
            "name": n,
            "decision": d,
            "tried_on": on,
            "phases_ms": _phases(*ms),
            "peak_mem_mb": mem,
            "saved_mb": None,
            "loss_curve": [v + shift for v in curve],
        }
        for n, d, on, ms, mem, shift in spec
    ]


def test_findings_and_next_action_follow_the_kept_configuration():
    rows = report.recorded_report("cpu-quick").rows
    assert report.report_findings(rows[:1])["next_action"] == "workers"
    kept = rules.kept_row(rows)
    done = report.report_findings(rows)
    assert done["bottleneck"] == kept["bottleneck"]
    assert report.check_findings(rows, done) == []
    wrong = dict(done, bottleneck="data-bound", evidence_ms=-1.0, next_action="workers")
    problems = report.check_findings(rows, wrong)
    assert len(problems) == 3 and "bottleneck" in problems[0] and "next action" in problems[2]
    assert report.check_findings(rows, {"bottleneck": "x"})[0].startswith("missing field")
    # host-bound, its first fix tried on the kept configuration: the other one is left
    host = _made(
        ("baseline", "baseline", None, (0.5, 3, 4, 1, 12), None, 0),
        ("no_sync", "revert", "baseline", (0.5, 3, 4, 1, 11.8), None, 0),
    )
    found = report.report_findings(host)
    assert found == {
        "bottleneck": "host-bound",
        "evidence_ms": 12,
        "next_action": "compile",
        "expected_gain_ms": pytest.approx(20.0),
    }


def test_the_next_action_weighs_memory_training_and_context():
    # over the budget: checkpointing first, and it can save no time
    over = _made(("baseline", "baseline", None, (1, 9, 14, 1, 1), 1500, 0))
    assert report.next_actions_for(over, 1000.0) == ("checkpoint",)
    assert report.report_findings(over, memory_budget_mb=1000.0)["expected_gain_ms"] == 0.0
    assert report.next_actions_for(over) == ("bf16", "compile")  # no budget: speed
    # workers did not fit on the baseline; checkpointing made room: try workers again
    fits = _made(
        ("baseline", "baseline", None, (20, 6, 9, 1, 1), 1500, 0),
        ("workers", "revert", "baseline", (1, 6, 9, 1, 1), 1510, 0),
        ("checkpoint", "keep", "baseline", (20, 6, 14, 1, 1), 900, 0),
    )
    assert report.next_actions_for(fits, 1000.0) == ("workers",)
    # a change that moved training is never tried again; one that was not faster, by either reading
    moved = _made(
        ("baseline", "baseline", None, (25, 4, 6, 4, 1), None, 0),
        ("fused", "revert", "baseline", (25, 4, 6, 1, 1), None, 0.8),
        ("workers", "keep", "baseline", (1, 4, 6, 12, 1), None, 0),
    )
    assert report.acceptable_next_actions(moved) == ("compile",)
    slow = _made(
        ("baseline", "baseline", None, (25, 4, 6, 4, 1), None, 0),
        ("fused", "revert", "baseline", (25, 4, 6, 1, 1), None, 0.01),
        ("workers", "keep", "baseline", (1, 4, 6, 12, 1), None, 0),
    )
    assert report.next_actions_for(slow) == ("compile",)
    assert set(report.acceptable_next_actions(slow)) == {"fused", "compile"}
    # every fix tried on the kept configuration: None, and where to look beyond
    spent = _made(
        ("baseline", "baseline", None, (0.2, 9, 6, 1, 1), None, 0),
        ("bf16", "revert", "baseline", (0.2, 9.5, 6, 1, 1), None, 0),
        ("compile", "revert", "baseline", (0.2, 8.8, 6, 1, 1), None, 0),
    )
    assert report.acceptable_next_actions(spent) == (None,)
    assert (
        report.next_actions_for(spent, beyond_bottleneck=True)[0] == "fused"
    )  # optimizer 1 > other 1? ties keep order


def test_kept_changes_replays_the_tuner_on_every_report():
    for name in ("cpu-quick", "cpu-full"):
        rows = report.recorded_report(name).rows
        assert report.kept_changes(rows) == [r["name"] for r in rows if r["decision"] == "keep"], name
    for name, rep in report.example_gpu_reports().items():
        rows = rep["rows"]
        assert all(r["example"] for r in rows), name  # labelled: example numbers, not measurements
        assert report.kept_changes(rows, rep["memory_budget_mb"]) == [
            r["name"] for r in rows if r["decision"] == "keep"
        ], name
    large = report.example_gpu_reports()["gpu-large-example"]
    fits = report.kept_changes(large["rows"], large["memory_budget_mb"])
    assert fits == ["checkpoint"]  # it makes the run fit, though slower
    assert "compile" not in report.kept_changes(large["rows"])  # its loss moved 5%


def test_the_report_lists_top_operators_and_checks_the_analysts_findings(micro_rows):
    rows = [dict(micro_rows["base"], decision="baseline")]
    rep = report.build_report(rows, analyst_findings=report.report_findings(rows))
    md = rep.to_markdown()
    assert "## Top operators and device idle time" in md and "aten::" in md
    assert "GPU idle: not applicable" in md and "every field agrees" in md
    wrong = report.build_report(rows, analyst_findings=dict(report.report_findings(rows), evidence_ms=-1.0))
    assert "evidence -1.0 ms" in wrong.to_markdown()
    assert report.build_report(rows).findings_problems() == ["no findings written yet"]


def test_the_tuner_follows_the_profile_and_says_why():
    """Each round tries the fix for the kept configuration's bottleneck; once those are spent, the
    next largest part of the step; a kept change's own profile drives the next round."""

    def fake_run(config, quick, trace_dir):
        data = (1.0, 1.0) if config.workers else (20.0, 20.0)
        opt = 0.4 if config.fused_optimizer else 6.0  # after workers, the optimizer is next
        fwd, bwd = (2.0, 3.0) if config.compile else (3.0, 5.0)
        step = data[0] + fwd + bwd + opt + 0.5
        return rules.derive(
            fake_row(config.name, step, step - 0.2, step + 0.2, data=data, compute=((fwd, bwd, opt),) * 2)
        )

    def fake_compare(old, new, quick):
        verdict = "within noise" if new.name in ("bf16", "baseline (copy)") else "faster"
        speed = 1.0 if verdict == "within noise" else 1.5
        return types.SimpleNamespace(
            speedup=speed,
            low=speed - 0.02,
            high=speed + 0.02,
            verdict=verdict,
            pairs=10,
            threads=1,
            stopped="narrow",
            meta={"steps": 24},
            __str__=lambda self: verdict,
        )

    tuner = report.Tuner(report.baseline_config("cpu"), runner=fake_run, comparer=fake_compare)
    tuner.run_baseline()
    assert tuner.control()["verdict"] == "within noise" and tuner.control_row["pairs"] == 10
    name, why = tuner.next_change()
    assert name == "workers" and "baseline is data-bound" in why
    rows = tuner.run()
    order = [r["name"] for r in rows]
    # data-bound -> workers; compute-bound -> bf16 (within noise), compile; then optimizer-bound -> fused;
    # then compute-bound with its fixes spent: the next largest part, the host's 0.5 ms -> no_sync
    assert order == ["workers", "bf16", "compile", "fused", "no_sync"]
    assert all(r["why"] for r in rows) and tuner.next_change() is None
    assert {r["name"]: r["decision"] for r in rows}["bf16"] == "revert"
    rep = report.build_report(tuner.rows, control=tuner.control_row)
    md = rep.to_markdown()
    assert "A/A control (the baseline against itself): within noise" in md
    assert "## Why each change was tried" in md and "- workers: tried because baseline is data-bound" in md


def test_a_change_reverted_for_memory_is_tried_again_when_the_run_fits():
    def fake_run(config, quick, trace_dir):
        peak = 900.0 if config.checkpointing else 1500.0
        data = (1.0, 1.0) if config.workers else (20.0, 20.0)
        row = fake_row(config.name, 30.0, 29.5, 30.5, data=data, compute=((4.0, 6.0, 1.0),) * 2, peak=peak)
        return rules.derive(row)

    def fake_compare(old, new, quick):
        return types.SimpleNamespace(
            speedup=1.3,
            low=1.2,
            high=1.4,
            verdict="faster",
            pairs=10,
            threads=1,
            stopped="narrow",
            meta={"steps": 24},
        )

    cfg = replace(report.baseline_config("cpu"), memory_budget_mb=1000.0)
    tuner = report.Tuner(cfg, runner=fake_run, comparer=fake_compare)
    tuner.run_baseline()
    assert tuner.next_change()[0] == "checkpoint"  # over the budget: make it fit first
    first = tuner.try_change("workers")
    assert (first["decision"], first["reason"]) == ("revert", "too big")
    rows = tuner.run()
    assert [r["name"] for r in rows][:2] == ["checkpoint", "workers"]
    assert rows[0]["reason"] == "fits now" and rows[1]["decision"] == "keep"
    assert "again, on a configuration that has changed" in rows[1]["why"]


def test_git_answers_for_the_provenance(tmp_path):
    """The one git call the report's commit line makes: what git prints, stripped; an
    uncommitted edit shows in `status`."""
    import subprocess

    from helpers.report.provenance import _git

    def run(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    run("init", "-q")
    (tmp_path / "a.txt").write_text("1")
    run("add", "a.txt")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    sha = _git(tmp_path, "rev-parse", "--short", "HEAD")
    assert sha and len(sha) >= 7 and sha == sha.strip()
    assert _git(tmp_path, "status", "--porcelain", "--untracked-files=no") == ""
    (tmp_path / "a.txt").write_text("2")
    assert _git(tmp_path, "status", "--porcelain", "--untracked-files=no") == "M a.txt"
