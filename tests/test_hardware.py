"""The device table, lookups, GPU-name matching and measuring on CPU."""

import pytest
import torch

from helpers import hardware

# (device, dtype) -> dense TFLOP/s and TB/s as printed in the named datasheet
DATASHEET = {
    ("T4", "fp32"): 8.1,
    ("T4", "fp16"): 65,
    ("V100 SXM2", "fp16"): 125,
    ("A100 40GB SXM", "bf16"): 312,
    ("A100 80GB SXM", "tf32"): 156,
    ("L4", "bf16"): 121,
    ("H100 SXM", "bf16"): 989.5,
    ("H100 SXM", "fp8"): 1979,
    ("H200", "bf16"): 989.5,
    ("H100 SXM", "fp32"): 67,
    ("H100 NVL", "bf16"): 835.5,
    ("H100 NVL", "fp8"): 1670.5,
    ("GH200 96GB", "bf16"): 989.5,
    ("GH200 144GB", "fp8"): 1979,
    ("L40S", "bf16"): 362.05,
    ("L40S", "fp8"): 733,
    ("L40S", "fp32"): 91.6,
    ("B200", "bf16"): 2250,
    ("B200", "fp8"): 4500,
}


@pytest.mark.parametrize("key,tflops", DATASHEET.items())
def test_dense_peaks(key, tflops):
    name, dtype = key
    assert hardware.get_device(name).peak(dtype) == pytest.approx(tflops * 1e12)


def test_required_devices_present_with_sources():
    for name in [
        "T4",
        "L4",
        "A10G",
        "V100 SXM2",
        "A100 40GB SXM",
        "A100 80GB SXM",
        "H100 SXM",
        "H200",
        "H100 NVL",
        "GH200 96GB",
        "GH200 144GB",
        "L40S",
        "B200",
    ]:
        spec = hardware.get_device(name)
        assert spec.source and spec.memory_bandwidth > 0 and spec.peak_flops["fp32"] > 0


def test_sparse_figures_are_never_peaks():
    # H100 SXM datasheet: 1,979 TFLOP/s bf16 is the WITH-SPARSITY figure; dense is half.
    h100 = hardware.get_device("H100 SXM")
    assert h100.peak("bf16") == pytest.approx(1979e12 / 2)
    for spec in hardware.DEVICES.values():
        # a dense tensor peak is never more than 2x the next-narrower format's
        if "bf16" in spec.peak_flops and "fp8" in spec.peak_flops:
            # (within 2%: the L40S datasheet prints 362.05 bf16 and 733 fp8 TFLOP/s)
            assert spec.peak("fp8") == pytest.approx(2 * spec.peak("bf16"), rel=0.02)


def test_bandwidths_are_decimal():
    assert hardware.get_device("H100 SXM").memory_bandwidth == 3.35e12
    assert hardware.get_device("A100 80GB SXM").memory_bandwidth == 2.039e12
    assert hardware.get_device("H200").memory_bandwidth == 4.8e12
    assert hardware.get_device("H100 NVL").memory_bandwidth == 3.9e12
    assert hardware.get_device("GH200 144GB").memory_bandwidth == 4.9e12
    assert hardware.get_device("L40S").memory_bandwidth == 864e9


def test_lookup_ignores_case_and_punctuation_and_aliases():
    assert hardware.get_device("h100-sxm").name == "H100 SXM"
    assert hardware.get_device("Tesla T4").name == "T4"
    with pytest.raises(KeyError, match="unknown device 'RTX 9090'; choose one of:"):
        hardware.get_device("RTX 9090")


@pytest.mark.parametrize(
    "name,parts",
    [
        ("H100", ["H100 SXM", "H100 PCIe", "H100 NVL"]),
        ("A100", ["A100 40GB SXM", "A100 80GB SXM"]),
        ("GH200", ["GH200 96GB", "GH200 144GB"]),
        ("V100", ["V100 SXM2", "V100 PCIe"]),
    ],
)
def test_ambiguous_names_list_the_parts_instead_of_guessing(name, parts):
    with pytest.raises(KeyError) as err:
        hardware.get_device(name)
    message = str(err.value)
    assert "several devices" in message and all(p in message for p in parts)
    assert not message.startswith("'")  # a readable line, not a quoted repr


def test_a_near_miss_suggests_the_part():
    with pytest.raises(KeyError, match="did you mean 'L40S'"):
        hardware.get_device("L40")


def test_missing_dtype_is_a_clear_error():
    with pytest.raises(KeyError, match="no bf16 peak"):
        hardware.get_device("T4").peak("bf16")


@pytest.mark.parametrize(
    "cuda_name,mem,expected",
    [
        ("NVIDIA H100 80GB HBM3", 85e9, "H100 SXM"),
        ("NVIDIA H100 PCIe", 85e9, "H100 PCIe"),
        ("NVIDIA H200", 150e9, "H200"),
        ("NVIDIA A100-SXM4-40GB", 42e9, "A100 40GB SXM"),
        ("NVIDIA A100-SXM4-80GB", 85e9, "A100 80GB SXM"),
        ("NVIDIA A100 80GB PCIe", 85e9, "A100 80GB PCIe"),
        ("Tesla T4", 16e9, "T4"),
        ("NVIDIA L4", 24e9, "L4"),
        ("NVIDIA A10G", 24e9, "A10G"),
        ("Tesla V100-SXM2-16GB", 16e9, "V100 SXM2"),
        ("NVIDIA L40S", 48e9, "L40S"),
        ("NVIDIA L40", 48e9, None),
        ("NVIDIA H100 NVL", 100e9, "H100 NVL"),
        ("NVIDIA GH200 480GB", 102e9, "GH200 96GB"),
        ("NVIDIA GH200 144G HBM3e", 150e9, "GH200 144GB"),
        ("NVIDIA B200", 190e9, "B200"),
        ("NVIDIA H200 NVL", 150e9, "H200"),
    ],
)
def test_gpu_name_matching(cuda_name, mem, expected):
    spec = hardware.match_gpu_name(cuda_name, mem)
    assert (spec.name if spec else None) == expected


def test_detect_gpu_is_none_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert hardware.detect_gpu() is None


@pytest.mark.parametrize(
    "dtype,key,width",
    [
        (torch.float32, "fp32", 4),
        ("bfloat16", "bf16", 2),
        ("half", "fp16", 2),
        (torch.float8_e4m3fn, "fp8", 1),
        (torch.float8_e5m2, "fp8", 1),
        ("tf32", "tf32", 4),
    ],
)
def test_dtype_keys_and_widths(dtype, key, width):
    assert hardware.dtype_key(dtype) == key and hardware.bytes_per_element(dtype) == width


def test_measure_device_on_cpu_gives_real_figures():
    m = hardware.measure_device("cpu", dtypes=["fp32"], gemm_n=128, copy_mib=4)
    assert m.device == "cpu" and m.gemm_n == 128
    run = m.gemm_runs["fp32"]
    assert len(run.samples) == 5 and all(s > 0 for s in run.samples)
    # a roof is a best case: the fastest timed run, not the median
    assert m.gemm_flops["fp32"] == pytest.approx(2 * 128**3 / run.min)
    assert m.copy_bytes == 2 * 4 * 2**20
    assert m.copy_bandwidth == pytest.approx(m.copy_bytes / m.copy_run.min)
    assert "TFLOP/s" in m.summary() and "best of 5" in m.summary()


def test_measured_roofs_warn_when_runs_spread():
    from helpers.bench import Measurement

    m = hardware.MeasuredDevice("cpu", "CPU", 512)
    m.gemm_runs["fp32"] = Measurement([1.0, 1.1, 3.0], 1.0, "cpu")
    m.gemm_flops["fp32"] = 2 * 512**3
    m.copy_run, m.copy_bytes, m.copy_bandwidth = Measurement([1.0, 1.01], 1.0, "cpu"), 8, 8.0
    warnings = m.warnings()
    assert len(warnings) == 1 and "GEMM" in warnings[0] and "182%" in warnings[0]
    assert "WARNING" in m.summary()


def test_measure_device_refuses_fp8_rather_than_faking_it():
    with pytest.raises(ValueError, match="fp8"):
        hardware.measure_device("cpu", dtypes=["fp8"], gemm_n=16, copy_mib=1)


def test_cuda_requested_without_gpu_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="no CUDA GPU"):
        hardware.measure_device("cuda")


def _fake_sysfs(tmp_path, entries):
    for i, (level, kind, size) in enumerate(entries):
        folder = tmp_path / f"index{i}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    return str(tmp_path)


def test_last_level_cache_is_the_highest_data_or_unified_level_in_sysfs(tmp_path):
    sysfs = _fake_sysfs(
        tmp_path,
        [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"), (3, "Unified", "105M")],
    )
    size, source = hardware.last_level_cache("cpu", sysfs=sysfs)
    assert size == 105 * 2**20 and source == "the CPU's L3 cache (Linux sysfs)"
    assert hardware.last_level_cache("cpu", sysfs=str(tmp_path / "none")) == (
        None,
        "the OS does not report the CPU caches (no sysfs cache entries)",
    )


def test_the_copy_buffer_is_eight_times_the_last_level_cache_or_says_what_it_assumed(monkeypatch):
    l3 = (32 * 2**20, "the CPU's L3 cache (Linux sysfs)")
    monkeypatch.setattr(hardware, "last_level_cache", lambda device: l3)
    mib, note = hardware.main_memory_copy_mib("cpu", least_mib=64)
    assert mib == 256 and "8x the CPU's L3 cache" in note and "main memory" in note
    monkeypatch.setattr(hardware, "last_level_cache", lambda device: (None, "no sysfs"))
    mib, note = hardware.main_memory_copy_mib("cpu")
    assert mib == 8 * hardware.ASSUMED_LLC_BYTES // 2**20 and "assumed 32 MiB cache (no sysfs)" in note
    monkeypatch.setattr(hardware, "last_level_cache", lambda device: (2 * 2**20, "L2"))
    assert hardware.main_memory_copy_mib("cpu", least_mib=64)[0] == 64  # never below the floor


# ------------------------------------------------ the copy buffer: cache per CPU, memory available
# Issue 42: a VM's sysfs reported a 480 MiB L3, so chapter 1 copied 3840 MiB (8.3 GB at peak).


def _sysfs_l3(tmp_path, size: str, shared: str | None):
    sysfs = _fake_sysfs(tmp_path, [(1, "Data", "32K"), (2, "Unified", "1024K"), (3, "Unified", size)])
    if shared is not None:
        (tmp_path / "index2" / "shared_cpu_list").write_text(f"{shared}\n")
    return sysfs


def test_an_implausible_cache_per_cpu_is_not_believed_and_the_source_says_so(tmp_path):
    size, source = hardware.last_level_cache("cpu", sysfs=_sysfs_l3(tmp_path, "491520K", "0-1"))
    assert size == 2 * hardware.PLAUSIBLE_LLC_PER_CPU == 64 * 2**20
    assert source == (
        "the CPU's L3 cache (Linux sysfs reports 480 MiB, 240 MiB per CPU that shares it: more "
        "than 32 MiB per CPU, so 64 MiB is assumed)"
    )


@pytest.mark.parametrize(
    "size,shared,expected",
    [("32768K", "0-1", 32), ("491520K", "0-15,32-47", 480), ("98304K", "0", 32), ("491520K", None, 480)],
)
def test_the_cache_is_one_instance_checked_against_the_cpus_sharing_it(tmp_path, size, shared, expected):
    # 480 MiB for 32 CPUs is 15 MiB each: believed; a CPU list sysfs does not give cannot be checked
    assert hardware.last_level_cache("cpu", sysfs=_sysfs_l3(tmp_path, size, shared))[0] == expected * 2**20


def test_cpu_lists_are_counted():
    assert [hardware._cpu_count(s) for s in ("0", "0-1", "0-3,8-11\n", "2,4,6")] == [1, 2, 8, 3]


def _files(tmp_path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


MEMINFO = "MemTotal:        8000000 kB\nMemFree:          500000 kB\nMemAvailable:    6000000 kB\n"


def test_available_memory_is_memavailable_or_a_containers_smaller_headroom(tmp_path):
    _files(tmp_path, {"meminfo": MEMINFO, "self_cgroup": "0::/\n"})
    args = {"meminfo": str(tmp_path / "meminfo"), "cgroup_root": str(tmp_path / "cg")}
    found = hardware.available_memory(**args, self_cgroup=str(tmp_path / "self_cgroup"))
    assert found == (6000000 * 1024, "MemAvailable in /proc/meminfo")  # no cgroup files: no limit
    # cgroup v2, the process in /job: limit 2 GiB, 1.5 GiB used of which 0.5 GiB droppable cache
    _files(
        tmp_path,
        {
            "self_cgroup": "0::/job\n",
            "cg/job/memory.max": f"{2 * 2**30}\n",
            "cg/job/memory.current": f"{3 * 2**29}\n",
            "cg/job/memory.stat": f"anon 123\ninactive_file {2**29}\n",
        },
    )
    limited = hardware.available_memory(**args, self_cgroup=str(tmp_path / "self_cgroup"))
    assert limited == (2**30, "the memory limit of this container (cgroup) less what it uses")
    # cgroup v1: "no limit" is a huge number, so MemAvailable stands
    _files(
        tmp_path,
        {
            "self_cgroup": "4:memory:/box\n0::/\n",
            "cg/memory/box/memory.limit_in_bytes": "9223372036854771712\n",
            "cg/memory/box/memory.usage_in_bytes": "5898240\n",
        },
    )
    assert hardware.available_memory(**args, self_cgroup=str(tmp_path / "self_cgroup"))[0] == 6000000 * 1024


def test_the_copy_is_bounded_by_the_memory_available_and_says_which_bound_applied(monkeypatch):
    l3 = (480 * 2**20, "the CPU's L3 cache (Linux sysfs)")
    monkeypatch.setattr(hardware, "last_level_cache", lambda device: l3)
    laptop = (7800 * 2**20, "MemAvailable in /proc/meminfo")  # an 8 GB laptop
    mib, note = hardware.main_memory_copy_mib("cpu", least_mib=64, available=laptop)
    assert 2 * mib <= 7800 / 4 and mib == 975  # the two buffers: at most a quarter
    first, second = note.split("\n")
    assert first == (
        "975 MiB is 2.03x the CPU's L3 cache (Linux sysfs) of 480 MiB, so the copy reads and writes "
        "main memory"
    )
    assert second == (
        "bounded by the memory available, not by the cache: 8x the cache needs two buffers of 3840 MiB, "
        "and the two may take at most 25% of the 7800 MiB available (MemAvailable in /proc/meminfo)"
    )
    small = (1000 * 2**20, "MemAvailable in /proc/meminfo")  # under twice the cache: it says so
    mib, note = hardware.main_memory_copy_mib("cpu", least_mib=64, available=small)
    assert mib == 125 and note.startswith(
        "125 MiB is only 0.26x the CPU's L3 cache (Linux sysfs) of 480 MiB, so part of the copy may "
        "stay in the cache and the bandwidth read too high\nbounded by the memory available"
    )
    roomy = (64 * 2**30, "MemAvailable in /proc/meminfo")  # the cache bound applies: one line, as before
    assert hardware.main_memory_copy_mib("cpu", least_mib=64, available=roomy) == (
        3840,
        "3840 MiB is 8x the CPU's L3 cache (Linux sysfs) of 480 MiB, so the copy reads and writes "
        "main memory",
    )


def test_measure_device_copies_what_the_memory_allows_and_prints_each_bound(monkeypatch):
    monkeypatch.setattr(
        hardware, "last_level_cache", lambda device: (32 * 2**20, "the CPU's L3 cache (Linux sysfs)")
    )
    monkeypatch.setattr(hardware, "available_memory", lambda: (64 * 2**20, "MemAvailable in /proc/meminfo"))
    m = hardware.measure_device("cpu", dtypes=["fp32"], gemm_n=32)
    assert m.copy_bytes == 2 * 8 * 2**20  # 64 MiB available: two 8 MiB buffers, not two of 256
    lines = m.summary().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  copy 8 MiB buffer"))
    assert lines[at + 1] == (
        "    (8 MiB is only 0.25x the CPU's L3 cache (Linux sysfs) of 32 MiB, so part of the copy may "
        "stay in the cache and the bandwidth read too high)"
    )
    assert lines[at + 2].startswith("    (bounded by the memory available, not by the cache: 8x the cache")
