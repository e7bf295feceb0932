"""helpers.timeline at trace scale: the fast parser gives the same figures as the standard
library, the vectorised analysis gives HTA's figures to the digit and the same results as a
plain per-event reference, folders of ranks give the same rows as one file at a time, and bad
input gives one line. Speed is measured by ``python -m helpers.timeline bench``, never here."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import re
import shutil

import msgspec  # declared in the course extra (via fast): a missing one is a broken install
import pytest
from conftest import HTA_FIGURES, SHARED_TRACES, shared_trace

from helpers import timeline as tl
from helpers.timeline import _bench as _timeline_bench
from helpers.timeline import _trace_read

PARSERS = ["json", "msgspec"]


def _shared(name):
    return shared_trace(name)


def _everything(t):
    """All a learner can read from a trace and its analysis, as plain data."""
    out = {
        "events": [tuple(e[:8]) for e in t.events],
        "steps": [tuple(e[:8]) for e in t.steps()],
        "threads": t.thread_names,
        "rank": (t.rank, t.world_size, t.backend),
        "tb": dataclasses.astuple(tl.temporal_breakdown(t)),
        "steps_bd": [dataclasses.astuple(b) for b in tl.step_breakdown(t)],
        "iv": {k: tl.intervals(t, k) for k in ("compute", "comm", "other", "data")},
    }
    try:
        out["overlap"] = tl.comm_comp_overlap(t)
    except ValueError as err:
        out["overlap"] = str(err)
    return out


def _all_traces():
    """The shared GPU traces, each a skipped parameter when missing (so a run without them says
    so), and the CPU traces the helpers ship."""
    shared = [
        pytest.param(
            SHARED_TRACES / n,
            id=n,
            marks=()
            if (SHARED_TRACES / n).exists()
            else pytest.mark.skip(
                reason=f"{n} is not in {SHARED_TRACES} (see the README, "
                "'Tests that need the shared GPU traces')"
            ),
        )
        for n in sorted(HTA_FIGURES)
    ]
    shipped = tl.example_traces("ddp_balanced") + tl.example_traces("ddp_one_slow")
    return shared + [pytest.param(p, id=p.name) for p in shipped]


# ---------------------------------------------------------------- the two parsers agree


@pytest.mark.parametrize("path", _all_traces())
def test_fast_parser_gives_identical_figures(path):
    slow, fast = tl.load_trace(path, parser="json"), tl.load_trace(path, parser="msgspec")
    assert slow.parser == "json (standard library)" and fast.parser.startswith("msgspec ")
    assert _everything(slow) == _everything(fast)
    assert fast.meta["distributedInfo"] == slow.meta["distributedInfo"]


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("name", sorted(HTA_FIGURES))
def test_hta_figures_to_the_digit(name, parser):
    t = tl.load_trace(_shared(name), parser=parser)
    tb = tl.temporal_breakdown(t)
    got = (tb.idle_pct, tb.compute_pct, tb.non_compute_pct, tb.kernel_time_us, tl.comm_comp_overlap(t))
    assert got == HTA_FIGURES[name]


def _reference_hta(t):
    """HTA's rules (../shared/traces/README.md) event by event, with the list functions."""
    steps = [e for e in t.events if e.stream is None and re.match(r"^ProfilerStep#\d+$", e.name)]
    keep = None
    if len(steps) >= 2:
        last = math.ceil(max(s.ts for s in steps))
        keep = {
            e.correlation
            for e in t.events
            if e.stream is None and e.correlation is not None and math.ceil(e.ts) < last
        }
    every, comp, comm = [], [], []
    for e in t.events:
        if e.stream is None or (keep is not None and e.correlation not in keep):
            continue
        span = (math.ceil(e.ts), max(math.ceil(e.ts), math.floor(e.ts + e.dur)))
        every.append(span)
        if re.match(r"^nccl.*Kernel", e.name):
            comm.append(span)
        elif not re.match(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)", e.name):
            comp.append(span)
    kernel = max(e for _, e in every) - min(s for s, _ in every)
    idle = kernel - tl.union_length(every)
    return (
        kernel,
        idle,
        tl.union_length(comp),
        round(100 * tl.overlap(comm, comp) / tl.union_length(comm), 2),
    )


@pytest.mark.parametrize("name", sorted(HTA_FIGURES))
def test_vectorised_hta_path_equals_an_event_by_event_reference(name):
    t = tl.load_trace(_shared(name))
    tb = tl.temporal_breakdown(t)
    assert (tb.kernel_time_us, tb.idle_us, tb.compute_us, tl.comm_comp_overlap(t)) == _reference_hta(t)


def test_step_breakdown_equals_the_list_functions_per_step():
    t = tl.load_trace(tl.example_traces("ddp_one_slow")[0])
    main = {(s.pid, s.tid) for s in t.steps()}
    data = tl.merge_intervals(
        (e.ts, e.end)
        for e in t.events
        if re.search("dataloader|data_load|next_batch|fetch_batch", e.name, re.I)
    )
    comm = [(e.ts, e.end) for e in t.events if re.match(r"^(gloo|nccl|mpi|ucc):|^c10d::", e.name)]
    comp = tl.subtract(
        [
            (e.ts, e.end)
            for e in t.events
            if e.cat == "cpu_op" and (e.pid, e.tid) in main and (e.ts, e.end) not in comm
        ],
        data,
    )
    for b, s in zip(tl.step_breakdown(t), t.steps(), strict=True):
        c, k = tl.clip(comp, s.ts, s.end), tl.clip(comm, s.ts, s.end)
        assert b.compute_us == pytest.approx(tl.union_length(c), abs=1e-6)
        assert b.exposed_comm_us == pytest.approx(tl.exposed(k, c), abs=1e-6)


def test_a_trace_built_from_events_analyses_like_the_loaded_one():
    t = tl.load_trace(tl.example_traces("ddp_balanced")[1])
    again = tl.Trace(t.path, t.events, t.rank, t.world_size, t.backend, t.thread_names, t.meta)
    assert again == t and _everything(again) == _everything(t)


def test_keep_args_keeps_every_argument():
    path = tl.example_traces("ddp_balanced")[0]
    short, full = tl.load_trace(path), tl.load_trace(path, keep_args=True)
    op = next(i for i, e in enumerate(full.events) if e.cat == "cpu_op" and len(e.args) > 2)
    assert (
        set(short.events[op].args)
        <= {"stream", "correlation"}
        < set(full.events[op].args) | {"stream", "correlation"}
    )
    assert _everything(short) == _everything(full)


# ---------------------------------------------------------------- many ranks


def _rank_copy(src, dst, rank):
    with gzip.open(src, "rt") as fh:
        data = json.load(fh)
    data["distributedInfo"] = {**data.get("distributedInfo", {}), "rank": rank}
    for e in data["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] += 50 * rank
    with gzip.open(dst, "wt") as fh:
        json.dump(data, fh)


@pytest.fixture(scope="module")
def rank_folder(tmp_path_factory):
    src = _shared("gpu_128rank_sampled_rank1.json.gz")
    folder = tmp_path_factory.mktemp("ranks")
    for r in (2, 0, 1):  # the profiler's own naming: host_pid.time.pt.trace.json(.gz)
        _rank_copy(src, folder / f"node{r}_{4000 + r}.17000000{r}.pt.trace.json.gz", r)
    return folder


def test_folder_report_equals_one_file_at_a_time(rank_folder):
    report = tl.analyse_ranks(rank_folder, jobs=2)
    assert [r.rank for r in report.rows] == [0, 1, 2] and not report.failed
    assert report == tl.analyse_ranks(rank_folder, jobs=1) == tl.temporal_breakdown(rank_folder, jobs=2)
    for row in report.rows:
        t = tl.load_trace(rank_folder / row.file)
        tb, steps = tl.temporal_breakdown(t), tl.step_breakdown(t)
        assert (row.idle_pct, row.compute_pct, row.non_compute_pct, row.kernel_time_us) == (
            tb.idle_pct,
            tb.compute_pct,
            tb.non_compute_pct,
            tb.kernel_time_us,
        )
        assert row.overlap_pct == tl.comm_comp_overlap(t)
        assert row.step_us == pytest.approx(tl.mean_step(steps).duration_us)
        assert row.exposed_comm_us == pytest.approx(tl.mean_step(steps).exposed_comm_us)
    by_rank = {t.rank: tl.step_breakdown(t) for t in tl.load_trace(rank_folder)}
    assert report.slowest == tl.slowest_rank(by_rank)
    steps = [tl.mean_step(b).duration_us for b in by_rank.values()]
    assert report.step_spread_us == pytest.approx((min(steps), sorted(steps)[1], max(steps)))
    assert "slowest rank" in str(report) and str(report).count("\n") == 4
    assert tl.comm_comp_overlap(rank_folder) == {r.rank: r.overlap_pct for r in report.rows}


def test_folder_load_in_a_pool_equals_sequential(rank_folder, monkeypatch):
    pooled = tl.load_trace(rank_folder, jobs=2)
    assert [t.rank for t in pooled] == [0, 1, 2]
    assert pooled == tl.load_trace(rank_folder, jobs=1) == tl.load_trace(rank_folder)
    # what a Jupyter kernel (several threads) gets: clean workers instead of fork
    import multiprocessing

    from helpers.timeline import _ranks

    monkeypatch.setattr(_ranks, "_context", lambda: multiprocessing.get_context("spawn"))
    assert tl.analyse_ranks(rank_folder, jobs=2) == tl.analyse_ranks(rank_folder, jobs=1)
    with pytest.raises(ValueError, match="jobs must be a positive integer"):
        tl.load_trace(rank_folder, jobs=0)


def test_a_bad_rank_file_is_named_and_the_others_still_analyse(rank_folder, tmp_path):
    for f in rank_folder.iterdir():
        shutil.copy(f, tmp_path / f.name)
    (tmp_path / "rank-7.json").write_text('{"traceEvents": [{"ph": "X", "ts": 1')  # truncated
    report = tl.analyse_ranks(tmp_path, jobs=2)
    assert [r.rank for r in report.rows] == [0, 1, 2]
    ((name, line),) = report.failed.items()
    assert name.endswith("rank-7.json") and "rank-7.json" in line and "\n" not in line
    with pytest.raises(ValueError, match=r"1 of 4 trace files could not be read: .*rank-7\.json") as err:
        tl.load_trace(tmp_path, jobs=2)
    assert "\n" not in str(err.value)


def test_rank_from_the_file_name():
    assert tl.rank_from_name("out/rank-12.json.gz") == 12
    assert tl.rank_from_name("trace_rank3.json") == 3
    assert tl.rank_from_name("host_1234.1700000.pt.trace.json") is None


# ---------------------------------------------------------------- bad input: one line


def _bad_files(tmp_path):
    def gz(name, text):
        (tmp_path / name).write_bytes(gzip.compress(text.encode()))
        return tmp_path / name

    good = '{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}'
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "trunc.json.gz").write_bytes(gzip.compress(good.encode())[:-9])
    (tmp_path / "half.json").write_text(good[:40])
    return {
        "empty.json": "is empty",
        gz("empty.json.gz", "").name: "is empty",
        "trunc.json.gz": "not a readable JSON",
        "half.json": "not a readable JSON",
        gz("other.json.gz", '{"hello": 1}').name: "no 'traceEvents'",
        gz("number.json.gz", "42").name: "no 'traceEvents'",
        gz("events_dict.json.gz", '{"traceEvents": {"a": 1}}').name: "no 'traceEvents'",
        gz("ts.json.gz", good.replace('"ts": 1', '"ts": "1"')).name: "no numeric 'ts'",
        gz("dur.json.gz", good.replace('"dur": 2', '"dur": -2')).name: "no numeric 'ts'",
        gz("bool.json.gz", good.replace('"ts": 1', '"ts": true')).name: "no numeric 'ts'",
        gz("args.json.gz", good.replace('"pid"', '"args": [1], "pid"')).name: "not an object",
        gz("name.json.gz", good.replace('"name": "k"', '"name": 5')).name: "not text",
        gz("pid.json.gz", good.replace('"pid": 1', '"pid": [1]')).name: "unexpected type",
    }


@pytest.mark.parametrize("parser", PARSERS)
def test_bad_files_are_one_line_errors_with_both_parsers(tmp_path, parser):
    for name, message in _bad_files(tmp_path).items():
        with pytest.raises(ValueError, match=re.escape(message)) as err:
            tl.load_trace(tmp_path / name, parser=parser)
        text = str(err.value)
        assert "\n" not in text and name in text, (name, text)
    with pytest.raises(FileNotFoundError, match=r"no \.json or \.json\.gz"):
        (tmp_path / "nothing").mkdir()
        tl.load_trace(tmp_path / "nothing")
    with pytest.raises(ValueError, match="unknown parser 'yaml'; choose one of:"):
        tl.load_trace(tmp_path / "empty.json", parser="yaml")


def test_odd_but_valid_files_take_the_general_path(tmp_path):
    """Values the fast path does not expect (a string stream, a null correlation, a gzip file
    named .json) still load, with the same events as the standard library gives."""
    ev = [
        {
            "ph": "X",
            "name": "k",
            "cat": "kernel",
            "ts": 5,
            "dur": 2,
            "pid": 0,
            "tid": "s7",
            "args": {"stream": "7", "correlation": None},
        },
        {"ph": "X", "name": "ProfilerStep#1", "ts": 0, "dur": 9, "pid": 1, "tid": 1},
        7,
        "junk",
    ]
    path = tmp_path / "odd.json"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": ev}).encode()))
    traces = [tl.load_trace(path, parser=p) for p in PARSERS]
    assert all(t.is_gpu and len(t.events) == 2 for t in traces)
    assert all(_everything(t) == _everything(traces[0]) for t in traces)


def test_bench_command_gives_one_line_for_bad_input(tmp_path, capsys):
    files = _bad_files(tmp_path)
    for name in ("empty.json", "trunc.json.gz", "other.json.gz", "ts.json.gz"):
        assert _timeline_bench.main(["bench", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert files
    assert _timeline_bench.main(["bench", str(tmp_path / "missing.json")]) == 2
    assert "trace file not found" in capsys.readouterr().err
    assert _timeline_bench.main(["bench", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    cpu = tl.example_traces("ddp_balanced")[0]
    assert _timeline_bench.main(["bench", str(cpu)]) == 2
    assert "no GPU kernels" in capsys.readouterr().err


def test_bench_command_runs_small(capsys):
    path = _shared("gpu_128rank_sampled_rank1.json.gz")
    assert (
        _timeline_bench.main(
            ["bench", str(path), "--events", "6000", "--repeat", "1", "--ranks", "2", "--jobs", "2"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "our JSON parser:" in out and "1. one rank: 9,440 events" in out and "2. 2 ranks" in out


def test_benchmark_result_is_a_measured_sentence():
    text = tl.benchmark_result()
    assert "HTA" in text and re.search(r"\d+\.\dx (our time )?\((95 % interval|range)", text)
    # a verdict comes only with a 95 % interval, from 6 interleaved pairs or more
    six = [(1.0, 9.0), (1.1, 9.5), (0.9, 9.2), (1.0, 8.8), (1.05, 9.1), (0.95, 8.9)]
    r = _timeline_bench._ratio({"pairs": six})
    assert r["verdict"] == "faster" and r["ratio_low"] <= r["ratio"] <= r["ratio_high"]
    assert "helpers.timeline is faster than HTA" in _timeline_bench._ratio_text(r)
    five = _timeline_bench._ratio({"pairs": six[:5]})
    assert "ratio" not in five and "no ratio shown" in _timeline_bench._ratio_text(five)
    # a record from before (5 pairs, a verdict stored): its range is shown, its verdict is not
    old = {"ratio": 8.6, "ratio_low": 7.3, "ratio_high": 9.0, "ratio_pairs": 5, "verdict": "faster"}
    assert "too few for a 95 % interval" in _timeline_bench._ratio_text(old)
    assert "faster" not in _timeline_bench._ratio_text(old)
    assert _trace_read.msgspec is msgspec and tl.json_parser() == f"msgspec {msgspec.__version__}"


def test_without_the_optional_packages_the_standard_library_reads_the_trace():
    import subprocess
    import sys

    path = tl.example_traces("ddp_balanced")[0]
    code = (
        "import sys\n"
        "for m in ('msgspec', 'isal', 'isal.isal_zlib'): sys.modules[m] = None\n"
        "from helpers import timeline as tl\n"
        f"t = tl.load_trace({str(path)!r})\n"
        "print(tl.json_parser(), '|', t.parser, '|', tl.temporal_breakdown(t))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    want = tl.temporal_breakdown(tl.load_trace(path))
    assert out.strip() == f"json (standard library) | json (standard library) | {want}"
