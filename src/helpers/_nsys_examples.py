"""Generator of the EXAMPLE Nsight Systems outputs shipped in ``helpers/data`` (chapter 3).

Nsight Systems cannot run here, so the course ships example files in its formats, clearly
labelled as synthetic. For each scenario this module simulates five captured training steps
(steps 10-14) of a described workload on one CUDA stream — host thread issuing CUDA API calls,
the GPU running kernels and copies in order — and writes:

- ``nsys_example_<scenario>_export.sqlite``: tables named and laid out as in
  ``nsys export --type sqlite`` (a subset of their columns): StringIds,
  CUPTI_ACTIVITY_KIND_KERNEL / _MEMCPY / _MEMSET / _RUNTIME, NVTX_EVENTS, plus a
  TRAINPERF_EXAMPLE table saying it is synthetic;
- ``nsys_example_<scenario>_stats.csv``: what ``nsys stats --format csv --report
  cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum,nvtx_sum`` prints for such a database,
  computed from the same events, led by a NOTICE line saying it is synthetic.

All durations are invented (a per-kernel mean times a seeded log-normal jitter); none is measured.
Regenerate with ``python -c "import helpers.nsys as n; n.make_nsys_examples()"``.
"""

from __future__ import annotations

import csv
import io
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np

NOTE = ("SYNTHETIC EXAMPLE written by helpers.nsys.make_nsys_examples in the layout of Nsight "
        "Systems output; it is not a real capture. Durations are invented; see "
        "helpers/data/nsys_example_README.md")
PID = 4242
GLOBAL_TID = (PID << 24) | PID  # nsys packs process and thread ids into one integer
STREAM, DEVICE, CONTEXT = 7, 0, 1
CAPTURED_STEPS = range(10, 15)

# (demangled name, short name) of the kernels the scenarios use
LN = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
      "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, "
      "c10::BFloat16*)", "vectorized_layer_norm_kernel")
LN_BWD = ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<c10::BFloat16, float>"
          "(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, "
          "c10::BFloat16 const*, c10::BFloat16*, int)", "layer_norm_grad_input_kernel")
GEMM_TN = ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn",) * 2  # cuBLAS: same short name
GEMM_SMALL = ("ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_stages_64x5_tn",) * 2
GEMM_NN = ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn",) * 2
GEMM_NT = ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_nt",) * 2
GEMM_HEAD = ("ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_tn",) * 2
FLASH_FWD = ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 64, 4, "
             "false, false, cutlass::bfloat16_t>, false, true, false, false, true, true, false, false>"
             "(pytorch_flash::Flash_fwd_params)", "flash_fwd_kernel")
FLASH_BWD = ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<pytorch_flash::"
             "Flash_bwd_kernel_traits<64, 128, 128, 8, 4, 4, 4, false, false, cutlass::bfloat16_t>, "
             "true, false, false, false, false, false>(pytorch_flash::Flash_bwd_params)",
             "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel")
GELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl, "
        "at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl, at::detail::Array<char*, 2>)",
        "vectorized_elementwise_kernel")
GELU_BWD = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl, "
            "at::detail::Array<char*, 3> >(int, at::native::GeluBackwardCUDAKernelImpl, "
            "at::detail::Array<char*, 3>)", "vectorized_elementwise_kernel")
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
       "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
       "at::detail::Array<char*, 3>)", "vectorized_elementwise_kernel")
SOFTMAX = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, float, "
           "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, c10::BFloat16 const*, int)",
           "cunn_SoftMaxForward")
SOFTMAX_BWD = ("void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, c10::BFloat16, float, "
               "float, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(c10::BFloat16*, "
               "float const*, float const*, int)", "cunn_SoftMaxBackward")
ADAM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
        "namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::"
        "FusedAdamMathFunctor<float, 4>, "
        "float*, double, double, double, double, double, bool, bool*, float*>(...)",
        "multi_tensor_apply_kernel")
NORM = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::NormTwoOps<float, "
        "float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::NormTwoOps<float, "
        "float, float>, unsigned int, float, 4>)", "reduce_kernel")
SGEMM = ("ampere_sgemm_32x32_sliced1x4_tn", "ampere_sgemm_32x32_sliced1x4_tn")
SGEMM_NN = ("ampere_sgemm_32x32_sliced1x4_nn", "ampere_sgemm_32x32_sliced1x4_nn")
BIAS = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
        "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
        "vectorized_elementwise_kernel")
RELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
        "launch_clamp_scalar, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::"
        "launch_clamp_scalar, at::detail::Array<char*, 2>)", "vectorized_elementwise_kernel")
THRESH_BWD = ("void at::native::vectorized_elementwise_kernel<4, at::native::threshold_kernel_impl<float>, "
              "at::detail::Array<char*, 3> >(int, at::native::threshold_kernel_impl<float>, "
              "at::detail::Array<char*, 3>)", "vectorized_elementwise_kernel")
SUM_BIAS = ("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_wrapper_t"
            "<float, at::native::sum_functor<float, float, float>::operator()>, unsigned int, float, 4> "
            ">(...)",
            "reduce_kernel")
ADAM_STEP = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
             "addcmul_cuda_kernel, at::detail::Array<char*, 4> >(int, at::native::(anonymous namespace)::"
             "addcmul_cuda_kernel, at::detail::Array<char*, 4>)", "vectorized_elementwise_kernel")


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    forward: tuple[tuple[tuple[str, str], float], ...]  # ((names), mean µs) in launch order
    backward: tuple[tuple[tuple[str, str], float], ...]
    optimizer: tuple[tuple[tuple[str, str], float], ...]
    h2d_bytes: int
    d2h_bytes: int
    copy_gb_s: float  # pinned-memory copy bandwidth assumed
    launch_us: float  # host time of one cudaLaunchKernel call
    python_us: float  # host time between two launches (Python, dispatcher)
    dataloader_us: float
    memsets_per_step: int
    seed: int


def _gpt_block(scale: float):
    fwd = [(LN, 22), (GEMM_TN, 185), (FLASH_FWD, 160), (GEMM_SMALL, 66), (ADD, 18), (LN, 22),
           (GEMM_TN, 245), (GELU, 31), (GEMM_TN, 245), (ADD, 18)]
    bwd = [(GEMM_NN, 250), (GEMM_NT, 250), (GELU_BWD, 35), (GEMM_NN, 250), (GEMM_NT, 250), (LN_BWD, 30),
           (GEMM_NN, 70), (GEMM_NT, 70), (FLASH_BWD, 410), (GEMM_NN, 190), (GEMM_NT, 190), (LN_BWD, 30)]
    return ([(n, t * scale) for n, t in fwd], [(n, t * scale) for n, t in bwd])


def _gpt(scale: float, layers: int = 4):
    fwd, bwd = _gpt_block(scale)
    forward = tuple(fwd * layers + [(LN, 22 * scale), (GEMM_HEAD, 420 * scale), (SOFTMAX, 95 * scale)])
    backward = tuple([(SOFTMAX_BWD, 90 * scale), (GEMM_NN, 430 * scale), (GEMM_NT, 430 * scale),
                      (LN_BWD, 30 * scale)] + bwd * layers)
    optimizer = tuple([(NORM, 25 * scale)] + [(ADAM, 120 * scale)] * 3)
    return forward, backward, optimizer


def _deep_narrow(layers: int = 24):
    forward = tuple([(SGEMM, 6.0), (BIAS, 2.5), (RELU, 2.5), (LN, 3.0), (ADD, 2.4)] * layers)
    backward = tuple([(ADD, 2.4), (LN_BWD, 3.2), (THRESH_BWD, 2.6), (SUM_BIAS, 3.1), (SGEMM_NN, 6.0),
                      (SGEMM, 6.0), (BIAS, 2.4)] * layers)
    optimizer = tuple([(ADAM_STEP, 2.2)] * (6 * layers))  # for-loop Adam: several tiny kernels per tensor
    return forward, backward, optimizer


_F, _B, _O = _gpt(1.0)
_Fs, _Bs, _Os = _gpt(0.25)
_Fd, _Bd, _Od = _deep_narrow()
SCENARIOS = {
    "compute": Scenario(
        "compute",
        "a 4-layer GPT-style transformer in bf16 (flash attention, fused Adam), batch 64 x 1024 tokens; "
        "token ids (1 MiB) copied host-to-device from pinned memory each step; ~105 kernels per step",
        _F, _B, _O, h2d_bytes=1 << 20, d2h_bytes=4, copy_gb_s=22.0, launch_us=5.0, python_us=6.0,
        dataloader_us=180.0, memsets_per_step=2, seed=3),
    "memcpy": Scenario(
        "memcpy",
        "the same transformer at a quarter of the work per kernel, fed 160 MB of float32 features per step "
        "(copied host-to-device from pinned memory, non_blocking) and copying 16 MB of outputs back "
        "for metrics",
        _Fs, _Bs, _Os, h2d_bytes=160_000_000, d2h_bytes=16_000_000, copy_gb_s=24.0, launch_us=5.0,
        python_us=6.0, dataloader_us=400.0, memsets_per_step=2, seed=5),
    "launch": Scenario(
        "launch",
        "a deep narrow fp32 MLP (24 layers of width 256, batch 32) with a for-loop Adam: ~430 tiny kernels "
        "per step, each shorter than the host takes to launch it",
        _Fd, _Bd, _Od, h2d_bytes=32 * 256 * 4, d2h_bytes=4, copy_gb_s=12.0, launch_us=6.5, python_us=9.0,
        dataloader_us=60.0, memsets_per_step=0, seed=7),
}


class _Sim:
    """Events of a host thread issuing work to one CUDA stream, in nanoseconds."""

    def __init__(self, sc: Scenario):
        self.sc, self.rng = sc, np.random.default_rng(sc.seed)
        self.host, self.gpu, self.corr = 1_000_000_000, 1_000_000_000, 100
        self.strings: dict[str, int] = {}
        self.kernels, self.memcpy, self.memset, self.runtime, self.nvtx = [], [], [], [], []

    def sid(self, text: str) -> int:
        return self.strings.setdefault(text, len(self.strings) + 1)

    def jitter(self, mean_ns: float, sigma: float = 0.06) -> int:
        return max(1, int(round(mean_ns * self.rng.lognormal(0.0, sigma))))

    def api(self, name: str, mean_us: float) -> tuple[int, int, int]:
        self.corr += 1
        start = self.host
        self.host += self.jitter(mean_us * 1e3, 0.15)
        self.runtime.append((start, self.host, 1, GLOBAL_TID, self.corr, self.sid(name), 0, 0))
        return start, self.host, self.corr

    def gpu_after(self, api_start: int, duration: int) -> tuple[int, int]:
        start = max(self.gpu, api_start + 2_500)  # the GPU sees work ~2.5 µs after the call begins
        self.gpu = start + duration
        return start, self.gpu

    def launch(self, names: tuple[str, str], mean_us: float) -> None:
        s, _, corr = self.api("cudaLaunchKernel_v7000", self.sc.launch_us)
        ks, ke = self.gpu_after(s, self.jitter(mean_us * 1e3))
        self.kernels.append((ks, ke, DEVICE, CONTEXT, STREAM, corr, PID << 24, self.sid(names[0]),
                             self.sid(names[1])))
        self.host += self.jitter(self.sc.python_us * 1e3, 0.2)

    def copy(self, nbytes: int, kind: int) -> None:
        s, _, corr = self.api("cudaMemcpyAsync_v3020", 8.0)
        cs, ce = self.gpu_after(s, self.jitter(1e3 + nbytes / self.sc.copy_gb_s, 0.03))
        src, dst = (1, 2) if kind == 1 else (2, 1)  # memory kinds: 1 pinned host, 2 device
        self.memcpy.append((cs, ce, DEVICE, CONTEXT, STREAM, corr, PID << 24, nbytes, kind, src, dst))

    def fill(self, nbytes: int) -> None:
        s, _, corr = self.api("cudaMemsetAsync_v3020", 4.0)
        ms, me = self.gpu_after(s, self.jitter(1.5e3 + nbytes / 900.0))
        self.memset.append((ms, me, DEVICE, CONTEXT, STREAM, corr, PID << 24, 0, nbytes, 2))

    def range(self, name: str, start: int, end: int) -> None:
        self.nvtx.append((start, end, 59, None, None, None, name, GLOBAL_TID, GLOBAL_TID, None, 0))

    def step(self) -> None:
        sc = self.sc
        t_step = self.host
        t = self.host
        self.host += self.jitter(sc.dataloader_us * 1e3, 0.1)
        self.copy(sc.h2d_bytes, 1)
        self.range("dataloader", t, self.host)
        for phase, kernels in (("forward", sc.forward), ("backward", sc.backward),
                               ("optimizer", sc.optimizer)):
            t = self.host
            if phase == "backward":
                for _ in range(sc.memsets_per_step):
                    self.fill(4 << 20)
            for names, mean_us in kernels:
                self.launch(names, mean_us)
            self.range(phase, t, self.host)
        self.copy(sc.d2h_bytes, 2)  # loss / metrics back to the host ...
        s, _, _ = self.api("cudaStreamSynchronize_v3020", 3.0)  # ... and wait for them
        self.host = max(self.host, self.gpu + 3_000)
        self.runtime[-1] = (s, self.host) + self.runtime[-1][2:]
        self.range("step", t_step, self.host + 1_000)
        self.host += self.jitter(25e3, 0.2)  # the loop's own overhead between steps


def simulate(sc: Scenario) -> _Sim:
    sim = _Sim(sc)
    for _ in CAPTURED_STEPS:
        sim.step()
    return sim


def _write_sqlite(sim: _Sim, path: Path) -> None:
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
            deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
            correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
            shortName INTEGER NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
            deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
            correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL,
            srcKind INTEGER, dstKind INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL,
            deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
            correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL,
            memKind INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
            eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,
            returnValue INTEGER NOT NULL, callchainId INTEGER);
        CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
            rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
            endGlobalTid INTEGER, textId INTEGER, domainId INTEGER);
        CREATE TABLE TRAINPERF_EXAMPLE (key TEXT NOT NULL, value TEXT NOT NULL);
    """)
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in sim.strings.items()])
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?,?)", sim.kernels)
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?,?,?,?,?,?)", sim.memcpy)
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?,?,?,?,?,?,?,?,?,?)", sim.memset)
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?,?)", sim.runtime)
    con.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?,?,?,?,?,?)", sorted(sim.nvtx))
    con.executemany("INSERT INTO TRAINPERF_EXAMPLE VALUES (?, ?)",
                    [("note", NOTE), ("workload", f"{sim.sc.name}: {sim.sc.description}")])
    con.commit()
    con.close()


def _summary_rows(groups: dict[str, list[int]]) -> list[list[str]]:
    grand = sum(sum(v) for v in groups.values())
    stats = []
    for name, durs in groups.items():
        a = np.asarray(durs, dtype=np.int64)
        std = float(a.std(ddof=1)) if len(a) > 1 else 0.0
        stats.append((int(a.sum()), name, len(a), float(a.mean()), float(np.median(a)), int(a.min()),
                      int(a.max()), std))
    stats.sort(key=lambda s: (-s[0], s[1]))
    return [[f"{100.0 * tot / grand:.1f}", str(tot), str(n), f"{avg:.1f}", f"{med:.1f}", str(lo), str(hi),
             f"{std:.1f}", name] for tot, name, n, avg, med, lo, hi, std in stats]


def stats_text(sim: _Sim, sqlite_name: str) -> str:
    """The console output of ``nsys stats --format csv`` with the four reports, for ``sim``."""
    names = {i: s for s, i in sim.strings.items()}
    kern: dict[str, list[int]] = {}
    for k in sim.kernels:
        kern.setdefault(names[k[7]], []).append(k[1] - k[0])
    api: dict[str, list[int]] = {}
    for r in sim.runtime:
        api.setdefault(names[r[5]].rsplit("_v", 1)[0], []).append(r[1] - r[0])
    mem: dict[str, list[int]] = {}
    for m in sim.memcpy:
        label = "Host-to-Device" if m[8] == 1 else "Device-to-Host"
        mem.setdefault(f"[CUDA memcpy {label}]", []).append(m[1] - m[0])
    for m in sim.memset:
        mem.setdefault("[CUDA memset]", []).append(m[1] - m[0])
    nvtx: dict[str, list[int]] = {}
    for n in sim.nvtx:
        nvtx.setdefault(n[6], []).append(n[1] - n[0])
    stat = ["Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)"]
    reports = [
        ("cuda_gpu_kern_sum", ["Time (%)", "Total Time (ns)", "Instances", *stat, "Name"],
         _summary_rows(kern)),
        ("cuda_api_sum", ["Time (%)", "Total Time (ns)", "Num Calls", *stat, "Name"], _summary_rows(api)),
        ("cuda_gpu_mem_time_sum", ["Time (%)", "Total Time (ns)", "Count", *stat, "Operation"],
         _summary_rows(mem)),
        ("nvtx_sum", ["Time (%)", "Total Time (ns)", "Instances", *stat, "Style", "Range"],
         [r[:-1] + ["PushPop", r[-1]] for r in _summary_rows(nvtx)]),
    ]
    out = io.StringIO()
    out.write(f"NOTICE: {NOTE}\n")
    out.write(f"NOTICE: workload {sim.sc.name!r}: {sim.sc.description}\n")
    writer = csv.writer(out, lineterminator="\n")
    for report, header, rows in reports:
        out.write(f"Processing [{sqlite_name}] with [reports/{report}.py]... \n")
        writer.writerow(header)
        writer.writerows(rows)
        out.write("\n")
    return out.getvalue()


def write_examples(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, sc in SCENARIOS.items():
        sim = simulate(sc)
        db = out_dir / f"nsys_example_{name}_export.sqlite"
        _write_sqlite(sim, db)
        csv_path = out_dir / f"nsys_example_{name}_stats.csv"
        csv_path.write_text(stats_text(sim, db.name))
        written += [db, csv_path]
    return written
