"""helpers.nsys: the command lines, the stats CSV and SQLite readers, the examples."""

import importlib.util
import re
import shlex
import shutil
import sqlite3
import sys

import numpy as np
import pytest
from conftest import ROOT

from helpers import hardware, nsys, roofline

# The generator of the shipped examples is a course script, not part of the package.
_spec = importlib.util.spec_from_file_location(
    "make_nsys_examples", ROOT / "scripts" / "make_nsys_examples.py"
)
_nsys_examples = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("make_nsys_examples", _nsys_examples)  # dataclasses look their module up
_spec.loader.exec_module(_nsys_examples)

# --------------------------------------------------------------------------- command lines


def test_single_process_command():
    cmd = nsys.profile_command("train.py")
    assert cmd.argv == [
        "nsys",
        "profile",
        "--trace=cuda,nvtx,osrt,cublas,cudnn",
        "--sample=none",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        "--force-overwrite=true",
        "--output=trace_step",
        "python",
        "train.py",
    ]
    assert shlex.split(cmd.shell) == cmd.argv
    assert cmd.pretty().splitlines()[0] == "nsys profile \\"


def test_torchrun_per_rank_puts_nsys_inside_each_rank():
    cmd = nsys.profile_command("train.py", "--lr=1e-3", nproc_per_node=8)
    assert cmd.argv[:4] == ["torchrun", "--nproc_per_node=8", "--no-python", "nsys"]
    # nsys has no "nccl" trace value: NCCL's own NVTX ranges and its kernels show with nvtx, cuda
    assert "--trace=cuda,nvtx,osrt,cublas,cudnn" in cmd.argv
    assert "--output=trace_step_rank%q{RANK}" in cmd.argv
    assert cmd.argv[-3:] == ["python", "train.py", "--lr=1e-3"]
    assert shlex.split(cmd.shell) == cmd.argv  # braces survive the shell quoting


def test_torchrun_one_report_wraps_the_launcher():
    cmd = nsys.profile_command("train.py", nproc_per_node=4, per_rank=False, capture_range=None)
    assert cmd.argv[:2] == ["nsys", "profile"]
    assert cmd.argv[-3:] == ["torchrun", "--nproc_per_node=4", "train.py"]
    assert not any(a.startswith("--capture-range") for a in cmd.argv)
    parsed = nsys.parse_profile_command(cmd.argv)
    assert parsed["wraps_torchrun"] and parsed["nproc_per_node"] == 4


def test_parse_profile_command_ignores_option_order():
    a = nsys.parse_profile_command(nsys.profile_command("t.py", nproc_per_node=2).argv)
    b = nsys.parse_profile_command(
        [
            "torchrun",
            "--nproc_per_node=2",
            "--no-python",
            "nsys",
            "profile",
            "-t",
            "cudnn,cuda,nvtx,osrt,cublas",
            "--output=trace_step_rank%q{RANK}",
            "--sample=none",
            "--force-overwrite=true",
            "--capture-range-end=stop",
            "--capture-range=cudaProfilerApi",
            "python",
            "t.py",
        ]
    )
    assert a["options"] == b["options"]  # -t is --trace
    assert a["program"] == b["program"] == ["python", "t.py"]
    with pytest.raises(ValueError, match="Not an nsys profile"):
        nsys.parse_profile_command(["python", "t.py"])


def test_parse_accepts_the_equivalent_spellings():
    want = nsys.parse_profile_command(nsys.profile_command("t.py", nproc_per_node=8, output="o").argv)
    spaced = nsys.parse_profile_command(
        [
            "torchrun",
            "--standalone",
            "--nproc_per_node",
            "8",
            "--no-python",
            "nsys",
            "profile",
            "-t",
            "cuda,nvtx,osrt,cublas,cudnn",
            "-s",
            "none",
            "--capture-range",
            "cudaProfilerApi",
            "--capture-range-end=stop",
            "-f",
            "true",
            "-o",
            "o_rank%q{RANK}",
            "python",
            "t.py",
        ]
    )
    assert spaced == want and spaced["nproc_per_node"] == 8
    dashed = nsys.parse_profile_command(["torchrun", "--nproc-per-node=8", *want_argv_tail()])
    assert dashed["nproc_per_node"] == 8
    with pytest.raises(ValueError, match="no value"):
        nsys.parse_profile_command(["nsys", "profile", "-t"])


def want_argv_tail():
    return nsys.profile_command("t.py", nproc_per_node=8, output="o").argv[2:]


def test_nvtx_capture_range_names_the_range():
    cmd = nsys.profile_command("train.py", capture_range="nvtx", nvtx_capture="step")
    assert "--capture-range=nvtx" in cmd.argv and "--nvtx-capture=step" in cmd.argv
    assert "--env-var=NSYS_NVTX_PROFILER_REGISTER_ONLY=0" in cmd.argv
    assert "--capture-range-end=stop" in cmd.argv
    with pytest.raises(ValueError, match="nvtx_capture"):
        nsys.profile_command("train.py", capture_range="nvtx")
    with pytest.raises(ValueError, match="only with"):
        nsys.profile_command("train.py", nvtx_capture="step")


def test_profile_only_some_ranks():
    import subprocess

    cmd = nsys.profile_command("train.py", nproc_per_node=8, ranks=(5, 0))
    assert cmd.argv[:6] == ["torchrun", "--nproc_per_node=8", "--no-python", "bash", "-c", cmd.argv[-1]]
    wrapper = cmd.argv[-1]
    assert '[ "$RANK" = 0 ] || [ "$RANK" = 5 ]' in wrapper
    assert "exec nsys profile" in wrapper and "--output=trace_step_rank%q{RANK}" in wrapper
    assert wrapper.endswith("else exec python train.py; fi")
    assert subprocess.run(["bash", "-n", "-c", wrapper]).returncode == 0  # valid shell
    assert "then\n    exec nsys" in cmd.pretty()
    for bad in ({"ranks": (8,)}, {"ranks": ()}, {"ranks": (0,), "per_rank": False}):
        with pytest.raises(ValueError, match="ranks"):
            nsys.profile_command("train.py", nproc_per_node=8, **bad)


def test_stats_and_export_commands():
    assert nsys.stats_command("trace_step.nsys-rep").argv == [
        "nsys",
        "stats",
        "--report",
        "cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum,nvtx_sum",
        "--format",
        "csv",
        "trace_step.nsys-rep",
    ]
    assert nsys.export_command("run/trace_step.nsys-rep").argv[-2:] == [
        "--output=run/trace_step.sqlite",
        "run/trace_step.nsys-rep",
    ]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"nproc_per_node": 0},
        {"nproc_per_node": 2.5},
        {"output": "has space"},
        {"capture_range": "cudaProfilerAPI"},
        {"trace": []},
    ],
)
def test_profile_command_rejects_bad_input(kwargs):
    with pytest.raises(ValueError):
        nsys.profile_command("train.py", **kwargs)


def _options(cmd):
    return nsys.parse_profile_command(cmd.argv)["options"]


def test_extra_options_appear_only_when_asked():
    plain = _options(nsys.profile_command("train.py"))
    for key in ("--cuda-graph-trace", "--gpu-metrics-devices", "--python-backtrace", "--cuda-memory-usage"):
        assert key not in plain
    cmd = nsys.profile_command(
        "train.py",
        cuda_graph_trace="node",
        gpu_metrics_devices=[0, 1, 0],
        gpu_metrics_frequency=20000,
        python_backtrace="cuda",
        sample="process-tree",
        cuda_memory_usage=True,
    )
    got = _options(cmd)
    # written out from the User Guide's switch table, not from the builder's constants
    assert got["--cuda-graph-trace"] == "node"
    assert got["--gpu-metrics-devices"] == "0,1"
    assert got["--gpu-metrics-frequency"] == "20000"
    assert got["--python-backtrace"] == "cuda"
    assert got["--cudabacktrace"] == "all"  # the guide: --python-backtrace needs --cudabacktrace
    assert got["--sample"] == "process-tree"
    assert got["--cuda-memory-usage"] == "true"
    # the rest of the command is the plain one
    assert {k: v for k, v in got.items() if k in plain and k != "--sample"} == {
        k: v for k, v in plain.items() if k != "--sample"
    }
    assert _options(nsys.profile_command("t.py", gpu_metrics_devices="cuda-visible"))[
        "--gpu-metrics-devices"
    ] == ("cuda-visible")


def test_extra_options_with_torchrun_go_to_every_rank():
    cmd = nsys.profile_command(
        "train.py", nproc_per_node=4, cuda_graph_trace="node", gpu_metrics_devices="all"
    )
    parsed = nsys.parse_profile_command(cmd.argv)
    assert parsed["launcher"] == "torchrun"
    assert parsed["options"]["--cuda-graph-trace"] == "node"


def test_nvtx_capture_with_a_domain():
    got = _options(
        nsys.profile_command("train.py", capture_range="nvtx", nvtx_capture="step", nvtx_domain="trainer")
    )
    assert got["--nvtx-capture"] == "step@trainer"
    assert got["--capture-range"] == "nvtx"
    anyd = _options(
        nsys.profile_command("train.py", capture_range="nvtx", nvtx_capture="step", nvtx_domain="*")
    )
    assert anyd["--nvtx-capture"] == "step@*"


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"cuda_graph_trace": "nodes"}, "cuda_graph_trace"),
        ({"gpu_metrics_devices": "everything"}, "gpu_metrics_devices"),
        ({"gpu_metrics_devices": [-1]}, "gpu_metrics_devices"),
        ({"gpu_metrics_devices": []}, "gpu_metrics_devices"),
        ({"gpu_metrics_devices": "all", "gpu_metrics_frequency": 9}, "gpu_metrics_frequency"),
        ({"gpu_metrics_devices": "all", "gpu_metrics_frequency": 200_001}, "gpu_metrics_frequency"),
        ({"gpu_metrics_frequency": 1000}, "gpu_metrics_devices"),
        ({"python_backtrace": "python"}, "python_backtrace"),
        ({"python_backtrace": "cuda"}, "sample='process-tree'"),
        ({"sample": "cpu-everything"}, "sample"),
        ({"nvtx_domain": "trainer"}, "capture_range='nvtx'"),
        ({"capture_range": "nvtx", "nvtx_capture": "step@trainer"}, "nvtx_domain"),
        ({"capture_range": "nvtx", "nvtx_capture": "step", "nvtx_domain": "a b"}, "nvtx_domain"),
    ],
)
def test_extra_options_reject_unknown_values(kwargs, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        nsys.profile_command("train.py", **kwargs)


def test_cuda_memory_usage_must_be_a_flag():
    with pytest.raises(TypeError):
        nsys.profile_command("train.py", cuda_memory_usage="yes")


# --------------------------------------------------------------------------- stats CSV

STATS = """Generating SQLite file /tmp/r.sqlite from /tmp/r.nsys-rep
Processing [/tmp/r.sqlite] with [/opt/nsys/2024.5.1/reports/cuda_gpu_kern_sum.py]...
Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name
75.0,3000,2,1500.0,1500.0,1000,2000,707.1,"void gemm<float, 4>(int, float*)"
25.0,1000,4,250.0,250.0,200,300,57.7,relu_kernel

Processing [/tmp/r.sqlite] with [/opt/nsys/2024.5.1/reports/cuda_api_sum.py]...
Time (%),Total Time (ns),Num Calls,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name
90.0,9000,1,9000.0,9000.0,9000,9000,0.0,cudaStreamSynchronize
10.0,1000,6,166.7,160.0,100,250,50.0,cudaLaunchKernel

Processing [/tmp/r.sqlite] with [/opt/nsys/2024.5.1/reports/cuda_gpu_mem_time_sum.py]...
SKIPPED: /tmp/r.sqlite does not contain GPU memory data.

Processing [/tmp/r.sqlite] with [/opt/nsys/2024.5.1/reports/nvtx_sum.py]...
Time (%),Total Time (ns),Instances,Avg (us),Med (us),Min (us),Max (us),StdDev (us),Style,Range
100.0,5000,1,5.0,5.0,5.0,5.0,0.0,PushPop,step
"""


def test_read_stats_csv_skips_banners_and_matches_columns_by_name(tmp_path):
    path = tmp_path / "stats.csv"
    path.write_text(STATS)
    tables = nsys.read_stats_csv(path)
    assert list(tables) == list(nsys.DEFAULT_REPORTS)
    kern = tables["cuda_gpu_kern_sum"]
    assert list(kern["name"]) == ["void gemm<float, 4>(int, float*)", "relu_kernel"]
    assert list(kern["total_ns"]) == [3000.0, 1000.0] and list(kern["count"]) == [2, 4]
    assert tables["cuda_api_sum"]["count"].tolist() == [1, 6]
    assert len(tables["cuda_gpu_mem_time_sum"]) == 0
    assert "does not contain" in tables["cuda_gpu_mem_time_sum"].meta["skipped"]
    nv = tables["nvtx_sum"]
    assert nv["avg_ns"][0] == 5000.0  # --timeunit us converted back to ns
    assert nv["style"][0] == "PushPop" and nv["name"][0] == "step"
    assert kern.meta["example"] is False


def test_columns_are_found_by_name_not_position(tmp_path):
    path = tmp_path / "x_cuda_gpu_kern_sum.csv"  # `nsys stats --output x` names files like this
    path.write_text("Name,Instances,Total Time (ms)\nk1,3,2.5\nk2,1,0.5\n")
    kern = nsys.read_stats_csv(path)["cuda_gpu_kern_sum"]
    assert kern["total_ns"].tolist() == [2.5e6, 0.5e6] and kern["count"].tolist() == [3, 1]


def test_stats_errors_are_one_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="No such file"):
        nsys.read_stats_csv(tmp_path / "missing.csv")
    cases = {
        "not_csv.txt": b"hello world\nthis is not a report\n",
        "wrong_columns.csv": b"a,b,c\n1,2,3\n",
        "binary.nsys-rep": b"\x00\x01QDSTRM\x00" * 10,
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError) as err:
            nsys.read_stats_csv(tmp_path / name)
        assert "\n" not in str(err.value), name
    missing = tmp_path / "kern.csv"  # a kernel table without a Name column
    missing.write_text(
        "Processing [r] with [reports/cuda_gpu_kern_sum.py]...\n"
        "Time (%),Total Time (ns),Instances,Range\n100,5,1,x\n"
    )
    with pytest.raises(ValueError, match="lacks column"):
        nsys.read_stats_csv(missing)
    bad_number = tmp_path / "num.csv"
    bad_number.write_text("Time (%),Total Time (ns),Instances,Name\n100,lots,1,k\n")
    with pytest.raises(ValueError, match="not a number"):
        nsys.read_stats_csv(bad_number)


# --------------------------------------------------------------------------- SQLite export


def _tiny_db(path, with_text_id=True):
    """A few rows in the nsys export schema, with values worked out by hand below."""
    con = sqlite3.connect(path)
    tid = (77 << 24) | 78
    con.executescript(f"""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO StringIds VALUES (1, 'void big_gemm<1>(float*)'), (2, 'big_gemm'),
            (3, 'relu_kernel'), (4, 'cudaLaunchKernel_v7000'), (5, 'registered_step');
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, contextId INT,
            streamId INT, correlationId INT, globalPid INT, demangledName INT, shortName INT);
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (100, 400, 0, 1, 7, 11, 0, 1, 2),
            (500, 550, 0, 1, 7, 12, 0, 3, 3), (600, 900, 0, 1, 7, 13, 0, 1, 2);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, deviceId INT, contextId INT,
            streamId INT, correlationId INT, globalPid INT, bytes INT, copyKind INT);
        INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (10, 90, 0, 1, 7, 10, 0, 4096, 1),
            (950, 960, 0, 1, 7, 14, 0, 4, 2);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, eventClass INT, globalTid INT,
            correlationId INT, nameId INT, returnValue INT, callchainId INT);
        INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (50, 60, 1, {tid}, 11, 4, 0, 0),
            (60, 75, 1, {tid}, 12, 4, 0, 0);
        CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, rangeId INT, category INT,
            color INT, text TEXT, globalTid INT, endGlobalTid INT
            {", textId INT" if with_text_id else ""}, domainId INT);
    """)
    rows = [
        (0, 1000, 59, "step", None),
        (5, 95, 59, "dataloader", None),
        (100, 300, 59, None, 5),
        (400, 400, 34, "a mark", None),
        (200, 250, 60, "async", None),
        (2000, None, 59, "open", None),
    ]
    for start, end, kind, text, text_id in rows:
        if with_text_id:
            con.execute(
                "INSERT INTO NVTX_EVENTS VALUES (?,?,?,0,0,0,?,?,?,?,0)",
                (start, end, kind, text, tid, tid, text_id),
            )
        elif text is not None:
            con.execute(
                "INSERT INTO NVTX_EVENTS VALUES (?,?,?,0,0,0,?,?,?,0)", (start, end, kind, text, tid, tid)
            )
    con.commit()
    con.close()


def test_read_sqlite_on_a_hand_made_database(tmp_path):
    path = tmp_path / "tiny.sqlite"
    _tiny_db(path)
    db = nsys.read_sqlite(path)
    k = db["kernels"]
    assert k["name"].tolist() == ["void big_gemm<1>(float*)", "relu_kernel", "void big_gemm<1>(float*)"]
    assert k["short_name"][0] == "big_gemm" and k["duration_ns"].tolist() == [300, 50, 300]
    nv = db["nvtx"]
    assert nv["name"].tolist() == ["step", "dataloader", "registered_step", "async"]  # textId resolved
    assert nv["depth"].tolist() == [0, 1, 1, 0]  # the start/end range is not on the push/pop stack
    assert nv["style"].tolist() == ["PushPop", "PushPop", "PushPop", "StartEnd"]
    assert nv["thread"].tolist() == [78] * 4 and nv.meta["unterminated"] == 1
    m = db["memcpy"]
    assert m["kind"].tolist() == ["Host-to-Device", "Device-to-Host"] and m["bytes"].tolist() == [4096, 4]
    rt = db["runtime"]
    assert rt["api"].tolist() == ["cudaLaunchKernel"] * 2 and rt["duration_ns"].tolist() == [10, 15]
    assert "memset" not in db and db["kernels"].meta["example"] is False
    s = nsys.summarize(k)  # like cuda_gpu_kern_sum, by hand: 600 ns of gemm, 50 of relu
    assert s["name"].tolist() == ["void big_gemm<1>(float*)", "relu_kernel"]
    assert s["total_ns"].tolist() == [600.0, 50.0] and s["count"].tolist() == [2, 1]
    assert s["time_pct"][0] == pytest.approx(100 * 600 / 650)
    assert s["stddev_ns"].tolist() == [0.0, 0.0]


def test_read_sqlite_without_text_id_column(tmp_path):
    path = tmp_path / "old.sqlite"
    _tiny_db(path, with_text_id=False)
    assert nsys.read_sqlite(path)["nvtx"]["name"].tolist() == ["step", "dataloader", "async"]


def test_read_sqlite_errors_are_one_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="No such file"):
        nsys.read_sqlite(tmp_path / "missing.sqlite")
    text = tmp_path / "not.sqlite"
    text.write_text("Time (%),Total Time (ns)\n" * 200)
    with pytest.raises(ValueError, match="not an SQLite database"):
        nsys.read_sqlite(text)
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x INT)").connection.commit()
    with pytest.raises(ValueError, match="StringIds"):
        nsys.read_sqlite(other)
    broken = tmp_path / "broken.sqlite"
    _tiny_db(broken)
    con = sqlite3.connect(broken)
    con.execute("DELETE FROM StringIds WHERE id = 3")
    con.commit()
    con.close()
    with pytest.raises(ValueError, match="StringIds id 3") as err:
        nsys.read_sqlite(broken)
    assert "\n" not in str(err.value)


def test_absent_tables_come_back_empty(tmp_path):
    path = tmp_path / "nvtx_only.sqlite"
    con = sqlite3.connect(path)
    con.executescript("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);")
    con.close()
    db = nsys.read_sqlite(path)
    assert all(len(t) == 0 for t in db.values()) and db["kernels"].meta["absent"]


# --------------------------------------------------------------------------- examples


@pytest.mark.parametrize("scenario", nsys.EXAMPLE_SCENARIOS)
def test_examples_are_labelled_and_the_csv_agrees_with_the_database(scenario):
    stats = nsys.read_stats_csv(nsys.example_path(scenario))
    db = nsys.read_sqlite(nsys.example_path(scenario, "sqlite"))
    assert stats["cuda_gpu_kern_sum"].meta["example"] and db["kernels"].meta["example"]
    assert "not a real capture" in stats["nvtx_sum"].meta["note"]
    assert "not a real capture" in db["nvtx"].meta["note"]
    assert all("example" in nsys.example_path(scenario, kind).name for kind in ("stats", "sqlite"))
    for report, table, by in [
        ("cuda_gpu_kern_sum", "kernels", "name"),
        ("cuda_api_sum", "runtime", "api"),
        ("nvtx_sum", "nvtx", "name"),
    ]:
        want = nsys.summarize(db[table], by=by)
        got = stats[report]
        for column in ("total_ns", "count"):
            assert dict(zip(got["name"], got[column], strict=True)) == dict(
                zip(want["name"], want[column], strict=True)
            )
        assert got["med_ns"] == pytest.approx(want["med_ns"], abs=0.05)
    mem = stats["cuda_gpu_mem_time_sum"]
    assert mem["total_ns"].sum() == db["memcpy"]["duration_ns"].sum() + (
        db["memset"]["duration_ns"].sum() if "memset" in db else 0
    )
    steps = db["nvtx"].take(db["nvtx"]["name"] == "step")
    assert len(steps) == 5 and set(db["nvtx"]["depth"][db["nvtx"]["name"] != "step"]) == {1}


def test_generator_reproduces_the_committed_examples(tmp_path):
    _nsys_examples.write_examples(tmp_path)
    for scenario in nsys.EXAMPLE_SCENARIOS:
        committed = nsys.example_path(scenario)
        assert (tmp_path / committed.name).read_text() == committed.read_text()
        fresh = nsys.read_sqlite(tmp_path / nsys.example_path(scenario, "sqlite").name)
        shipped = nsys.read_sqlite(nsys.example_path(scenario, "sqlite"))
        for name in shipped:
            assert fresh[name].rows() == shipped[name].rows()


def test_example_scenarios_show_what_they_are_described_to():
    got = {}
    for scenario in nsys.EXAMPLE_SCENARIOS:
        s = nsys.read_stats_csv(nsys.example_path(scenario))
        got[scenario] = nsys.dominant_bucket(
            nsys.step_buckets(s["cuda_gpu_kern_sum"], s["cuda_gpu_mem_time_sum"], s["nvtx_sum"])
        )
    assert got == {"compute": "gemm/attention", "memcpy": "memcpy", "launch": "gpu idle"}
    assert "GPT" in nsys.describe_example("compute") and nsys.EXAMPLE_NOTE.startswith("SYNTHETIC")
    assert _nsys_examples.SCENARIOS["launch"].description == nsys.describe_example("launch")
    with pytest.raises(ValueError, match="Unknown example"):
        nsys.example_path("real")


@pytest.mark.parametrize("scenario", nsys.EXAMPLE_SCENARIOS)
def test_example_timings_are_physically_possible(scenario):
    """Every kernel takes at least its chapter 1 roofline time on the stated GPU, and every copy
    at least its bytes over the PCIe 4.0 x16 link: the examples are invented, not impossible."""
    sc = _nsys_examples.SCENARIOS[scenario]
    assert "A100 80GB SXM" in sc.description or scenario == "memcpy"
    spec = hardware.get_device(_nsys_examples.GPU)
    sim = _nsys_examples.simulate(sc)
    kernels = sc.kernels() * len(_nsys_examples.CAPTURED_STEPS)
    assert len(sim.kernels) == len(kernels)
    for k, row in zip(kernels, sim.kernels, strict=True):
        bound = roofline.ideal_time(k.flops, k.bytes, spec.peak(k.dtype), spec.memory_bandwidth)
        assert (row[1] - row[0]) * 1e-9 >= bound, (k.names[1], row[1] - row[0], bound)
    for row in sim.memcpy:
        assert (row[1] - row[0]) * 1e-9 >= row[7] / _nsys_examples.HOST_LINK_BYTES_S
        assert (row[9], row[10]) in ((2, 3), (3, 2))  # CUPTI memory kinds: 2 pinned, 3 device


def test_examples_name_memory_kinds_as_cupti_does():
    db = nsys.read_sqlite(nsys.example_path("memcpy", "sqlite"))
    pairs = set(zip(db["memcpy"]["kind"], db["memcpy"]["src_kind"], db["memcpy"]["dst_kind"], strict=True))
    assert pairs == {("Host-to-Device", "pinned", "device"), ("Device-to-Host", "device", "pinned")}


def test_nvtx_ranges_measure_host_time_the_projection_shows_the_gpu():
    db = nsys.read_sqlite(nsys.example_path("compute", "sqlite"))
    proj = {r["name"]: r for r in nsys.nvtx_gpu_projection(db).rows()}
    # the host queues the forward in a fraction of the time the GPU needs to run it
    assert proj["forward"]["proj_ns"] > 5 * proj["forward"]["range_ns"]
    assert proj["forward"]["gpu_ops"] == 5 * len(_nsys_examples.SCENARIOS["compute"].forward)
    # backward's kernels come from the autograd engine's thread: the main thread's range gets only
    # the loss gradient's seed (one small fill per step), as on a real PyTorch capture
    assert (
        proj["backward"]["gpu_ops"] == 5 and proj["backward"]["proj_ns"] < 0.01 * proj["backward"]["range_ns"]
    )
    threads = {r["thread"]: r for r in nsys.launches_by_thread(db).rows()}
    assert len(threads) == 2
    engine = max(threads.values(), key=lambda r: r["gpu_ops"])
    backward = _nsys_examples.SCENARIOS["compute"].backward
    memsets = _nsys_examples.SCENARIOS["compute"].memsets_per_step
    assert engine["gpu_ops"] == 5 * (len(backward) + memsets)
    by_range = nsys.kernels_by_range(db, "optimizer")
    assert set(by_range["name"]) == {"reduce_kernel", "multi_tensor_apply_kernel"}
    assert by_range["count"].sum() == 5 * 4
    with pytest.raises(ValueError, match="No NVTX range"):
        nsys.kernels_by_range(db, "nope")


# --------------------------------------------------------------------------- first questions


def _table(name, rows):
    return nsys.Table.from_rows(name, [{"name": n, "total_ns": float(t), "count": 1} for n, t in rows])


def test_top_kernel_and_buckets_by_hand():
    kern = _table("cuda_gpu_kern_sum", [("relu", 100), ("flash_fwd_kernel", 300), ("sm80_xmma_gemm", 500)])
    mem = _table("cuda_gpu_mem_time_sum", [("[CUDA memcpy Host-to-Device]", 60), ("[CUDA memset]", 40)])
    api = _table("cuda_api_sum", [("cudaLaunchKernel", 70), ("cudaDeviceSynchronize", 900)])
    nvtx = _table("nvtx_sum", [("step", 1500), ("forward", 200)])
    name, share = nsys.top_kernel(kern, mem)
    assert name == "sm80_xmma_gemm" and share == pytest.approx(500 / 1000)
    assert nsys.top_kernel(kern)[1] == pytest.approx(500 / 900)
    b = nsys.step_buckets(kern, mem, nvtx)
    assert b == {
        "gemm/attention": 800.0,
        "other kernels": 100.0,
        "memcpy": 60.0,
        "memset": 40.0,
        "gpu idle": 500.0,
    }
    assert nsys.dominant_bucket(b) == "gemm/attention"
    assert nsys.api_time(api) == {"cuda api": 70.0, "sync wait": 900.0}
    idle = nsys.step_buckets(kern, mem, _table("nvtx_sum", [("step", 5000)]))
    assert nsys.dominant_bucket(idle) == "gpu idle"
    with pytest.raises(ValueError, match="no 'step' range"):
        nsys.step_buckets(kern, mem, _table("nvtx_sum", [("forward", 10)]))
    with pytest.raises(ValueError, match="empty"):
        nsys.top_kernel(_table("k", []))


def test_table_basics():
    t = _table("k", [("a", 1), ("b", 3), ("c", 2)])
    assert t.sorted_by("total_ns")["name"].tolist() == ["b", "c", "a"]
    assert t.take(np.array([True, False, True]))["name"].tolist() == ["a", "c"]
    assert "b" in t.format() and len(t) == 3 and "total_ns" in t
    with pytest.raises(KeyError, match="no column"):
        t["missing"]


def test_without_nsys_the_notebook_falls_back_to_labelled_examples(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    stats, db, what = nsys.example_or_capture("launch")
    assert stats == nsys.example_path("launch") and db == nsys.example_path("launch", "sqlite")
    assert what.startswith("EXAMPLE") and "not a capture" in what and "nsys is not installed" in what
    with pytest.raises(RuntimeError, match="nsys is not on PATH"):
        nsys.capture_demo()


def test_supports_trace_asks_this_machines_nsys(monkeypatch):
    import subprocess

    monkeypatch.setattr(shutil, "which", lambda _name: None)
    assert nsys.supports_trace("python-gil") is None  # no nsys here: unknown, not False
    monkeypatch.setattr(shutil, "which", lambda _name: "/usr/bin/nsys")
    help_text = "-t, --trace=\n   Possible values: cuda, nvtx, osrt, cublas, python-gil, none\n-s, --sample="
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, help_text, ""))
    assert nsys.supports_trace("python-gil") is True and nsys.supports_trace("mpi") is False
