"""Generator of the EXAMPLE Nsight Systems outputs shipped in ``src/helpers/data`` (chapter 3).

Nsight Systems cannot run here, so the course ships example files in its formats, clearly
labelled as synthetic. For each scenario this module simulates five captured training steps
(steps 10-14) of a described workload on one CUDA stream — the host issuing CUDA API calls, the
GPU running kernels and copies in order — and writes. As in a real PyTorch capture, the
backward kernels are launched from the autograd engine's own thread, not from the thread that
holds the ``backward`` NVTX range; it writes:

- ``nsys_example_<scenario>_export.sqlite``: tables named and laid out as in
  ``nsys export --type sqlite`` (a subset of their columns): StringIds,
  CUPTI_ACTIVITY_KIND_KERNEL / _MEMCPY / _MEMSET / _RUNTIME, NVTX_EVENTS, plus a
  TRAINPERF_EXAMPLE table saying it is synthetic;
- ``nsys_example_<scenario>_stats.csv``: what ``nsys stats --format csv --report
  cuda_gpu_kern_sum,cuda_api_sum,cuda_gpu_mem_time_sum,nvtx_sum`` prints for such a database,
  computed from the same events, led by a NOTICE line saying it is synthetic.

Durations are invented, not measured, but they are physically possible: each kernel has the
shapes of the stated workload, and its mean time is the chapter 1 roofline bound on the stated
GPU (an A100 80GB SXM) divided by an efficiency below 1, with a floor for tiny kernels; a seeded
log-normal jitter varies each launch. Copies move their bytes at an assumed pinned-memory rate
below the PCIe 4.0 x16 link's 32 GB/s per direction. ``tests/test_nsys.py`` checks every event
against those bounds. The note every file carries and the scenarios' descriptions live in the
package (``helpers.nsys.EXAMPLE_NOTE``, ``helpers.nsys.describe_example``), which reads the files.
Usage: ``python scripts/make_nsys_examples.py [--out DIR]`` (default: ``src/helpers/data``).
"""

from __future__ import annotations

import argparse
import csv
import io
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from helpers import hardware, nsys, roofline

DATA = Path(__file__).resolve().parents[1] / "src" / "helpers" / "data"
NOTE = nsys.EXAMPLE_NOTE
PID = 4242
GLOBAL_TID = (PID << 24) | PID  # nsys packs process and thread ids into one integer
# PyTorch runs backward in the autograd engine's own thread (``pt_autograd_0`` in nsys): the main
# thread's ``backward`` range waits in ``loss.backward()`` while that thread launches the kernels
AUTOGRAD_TID = (PID << 24) | (PID + 1)
STREAM, DEVICE, CONTEXT = 7, 0, 1
CAPTURED_STEPS = range(10, 15)
GPU = "A100 80GB SXM"  # the GPU every scenario is simulated on (its kernel names are Ampere's)
HOST_LINK_BYTES_S = 32e9  # PCIe 4.0 x16, per direction (A100 datasheet: 64 GB/s both ways)
# CUPTI_ActivityMemoryKind, used for a copy's source and destination
MEMORY_PAGEABLE, MEMORY_PINNED, MEMORY_DEVICE = 1, 2, 3

# (demangled name, short name) of the kernels the scenarios use
LN = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
    "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, "
    "c10::BFloat16*)",
    "vectorized_layer_norm_kernel",
)
LN_BWD = (
    "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<c10::BFloat16, float>"
    "(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, "
    "c10::BFloat16 const*, c10::BFloat16*, int)",
    "layer_norm_grad_input_kernel",
)
GEMM_TN = ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn",) * 2  # cuBLAS: same short name
GEMM_SMALL = ("ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_stages_64x5_tn",) * 2
GEMM_NN = ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn",) * 2
GEMM_NT = ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_nt",) * 2
GEMM_HEAD = ("ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_tn",) * 2
FLASH_FWD = (
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 64, 4, "
    "false, false, cutlass::bfloat16_t>, false, true, false, false, true, true, false, false>"
    "(pytorch_flash::Flash_fwd_params)",
    "flash_fwd_kernel",
)
FLASH_BWD = (
    "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<pytorch_flash::"
    "Flash_bwd_kernel_traits<64, 128, 128, 8, 4, 4, 4, false, false, cutlass::bfloat16_t>, "
    "true, false, false, false, false, false>(pytorch_flash::Flash_bwd_params)",
    "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel",
)
GELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl, "
    "at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl, at::detail::Array<char*, 2>)",
    "vectorized_elementwise_kernel",
)
GELU_BWD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl, "
    "at::detail::Array<char*, 3> >(int, at::native::GeluBackwardCUDAKernelImpl, "
    "at::detail::Array<char*, 3>)",
    "vectorized_elementwise_kernel",
)
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3>)",
    "vectorized_elementwise_kernel",
)
SOFTMAX = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, float, "
    "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, c10::BFloat16 const*, int)",
    "cunn_SoftMaxForward",
)
SOFTMAX_BWD = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, c10::BFloat16, float, "
    "float, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(c10::BFloat16*, "
    "float const*, float const*, int)",
    "cunn_SoftMaxBackward",
)
ADAM = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
    "namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::"
    "FusedAdamMathFunctor<float, 4>, "
    "float*, double, double, double, double, double, bool, bool*, float*>(...)",
    "multi_tensor_apply_kernel",
)
NORM = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::NormTwoOps<float, "
    "float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::NormTwoOps<float, "
    "float, float>, unsigned int, float, 4>)",
    "reduce_kernel",
)
SGEMM = ("ampere_sgemm_32x32_sliced1x4_tn", "ampere_sgemm_32x32_sliced1x4_tn")
SGEMM_NN = ("ampere_sgemm_32x32_sliced1x4_nn", "ampere_sgemm_32x32_sliced1x4_nn")
BIAS = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
    "vectorized_elementwise_kernel",
)
RELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "launch_clamp_scalar, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::"
    "launch_clamp_scalar, at::detail::Array<char*, 2>)",
    "vectorized_elementwise_kernel",
)
THRESH_BWD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::threshold_kernel_impl<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::threshold_kernel_impl<float>, "
    "at::detail::Array<char*, 3>)",
    "vectorized_elementwise_kernel",
)
SUM_BIAS = (
    "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_wrapper_t"
    "<float, at::native::sum_functor<float, float, float>::operator()>, unsigned int, float, 4> "
    ">(...)",
    "reduce_kernel",
)
ADAM_STEP = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
    "addcmul_cuda_kernel, at::detail::Array<char*, 4> >(int, at::native::(anonymous namespace)::"
    "addcmul_cuda_kernel, at::detail::Array<char*, 4>)",
    "vectorized_elementwise_kernel",
)


@dataclass(frozen=True)
class Kernel:
    """One kernel of a workload: its names, the work its shapes imply, and how close to the
    roofline it gets. Its mean time is derived, never typed: roofline bound / efficiency."""

    names: tuple[str, str]  # (demangled name, short name)
    flops: float  # FLOPs of its shapes (an FMA is 2)
    bytes: float  # minimum bytes it must move
    dtype: str  # which peak of the GPU applies ("bf16" tensor cores, "fp32")
    efficiency: float = 0.7  # fraction of the roofline bound it reaches
    floor_us: float = 2.5  # no kernel finishes faster than this on a real GPU (launch, ramp-up)

    def ideal_s(self, gpu: str = GPU) -> float:
        """The chapter 1 roofline bound on this kernel's time."""
        spec = hardware.get_device(gpu)
        return roofline.ideal_time(self.flops, self.bytes, spec.peak(self.dtype), spec.memory_bandwidth)

    def mean_us(self, gpu: str = GPU) -> float:
        return max(self.floor_us, self.ideal_s(gpu) / self.efficiency * 1e6)


def _gemm(names, M, K, N, b=2, dtype="bf16", efficiency=0.7, floor_us=2.5) -> Kernel:
    return Kernel(
        names, roofline.gemm_flops(M, K, N), roofline.gemm_bytes(M, K, N, b), dtype, efficiency, floor_us
    )


def _elementwise(
    names, elements, flops_per, tensors, b=2, dtype="bf16", efficiency=0.8, floor_us=2.5
) -> Kernel:
    return Kernel(names, elements * flops_per, elements * tensors * b, dtype, efficiency, floor_us)


def _attention(names, batch, seq, width, backward=False) -> Kernel:
    # causal flash attention: the kernel skips the masked half of the score matrix. Forward:
    # QKᵀ and PV, 2 products of 2·b·s²·D (halved); backward: QKᵀ again plus 4 products.
    products = 5 if backward else 2
    flops = products * 2 * batch * seq * seq * width / 2
    tensors = 8 if backward else 4  # q, k, v, o (+ dO, dQ, dK, dV)
    return Kernel(names, flops, tensors * batch * seq * width * 2, "bf16", 0.5 if backward else 0.6)


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    forward: tuple[Kernel, ...]  # in launch order
    backward: tuple[Kernel, ...]
    optimizer: tuple[Kernel, ...]
    h2d_bytes: int
    d2h_bytes: int
    copy_gb_s: float  # pinned-memory copy rate assumed (below the PCIe link)
    launch_us: float  # host time of one cudaLaunchKernel call
    python_us: float  # host time between two launches (Python, dispatcher)
    dataloader_us: float
    memsets_per_step: int
    seed: int

    def kernels(self) -> tuple[Kernel, ...]:
        """Every kernel of one step, in launch order."""
        return self.forward + self.backward + self.optimizer


def _gpt(batch: int, seq: int = 1024, d: int = 1024, layers: int = 4, vocab: int = 32000):
    """A GPT-style decoder in bf16: LayerNorm, fused QKV, flash attention, MLP 4d, GELU."""
    M, f = batch * seq, 4 * d
    fwd = [
        _elementwise(LN, M * d, 7, 2),
        _gemm(GEMM_TN, M, d, 3 * d),
        _attention(FLASH_FWD, batch, seq, d),
        _gemm(GEMM_SMALL, M, d, d),
        _elementwise(ADD, M * d, 1, 3),
        _elementwise(LN, M * d, 7, 2),
        _gemm(GEMM_TN, M, d, f),
        _elementwise(GELU, M * f, 9, 2),
        _gemm(GEMM_TN, M, f, d),
        _elementwise(ADD, M * d, 1, 3),
    ]
    # backward of each GEMM (M, K, N): dX = dY·Wᵀ is (M, N, K), dW = Xᵀ·dY is (K, M, N)
    bwd = [
        _gemm(GEMM_NN, M, d, f),
        _gemm(GEMM_NT, f, M, d),
        _elementwise(GELU_BWD, M * f, 12, 3),
        _gemm(GEMM_NN, M, f, d),
        _gemm(GEMM_NT, d, M, f),
        _elementwise(LN_BWD, M * d, 12, 3),
        _gemm(GEMM_NN, M, d, d),
        _gemm(GEMM_NT, d, M, d),
        _attention(FLASH_BWD, batch, seq, d, True),
        _gemm(GEMM_NN, M, 3 * d, d),
        _gemm(GEMM_NT, d, M, 3 * d),
        _elementwise(LN_BWD, M * d, 12, 3),
    ]
    forward = tuple(
        fwd * layers
        + [
            _elementwise(LN, M * d, 7, 2),
            _gemm(GEMM_HEAD, M, d, vocab),
            _elementwise(SOFTMAX, M * vocab, 5, 3),
        ]
    )  # bf16 in, fp32 out
    backward = tuple(
        [
            _elementwise(SOFTMAX_BWD, M * vocab, 3, 3),
            _gemm(GEMM_NN, M, vocab, d),
            _gemm(GEMM_NT, d, M, vocab),
            _elementwise(LN_BWD, M * d, 12, 3),
        ]
        + bwd * layers
    )
    params = layers * 12 * d * d + vocab * d
    # gradient norm (read every fp32 grad), then fused Adam in three launches: read param, grad,
    # two moments; write param and moments: 7 fp32 values per parameter
    optimizer = tuple(
        [_elementwise(NORM, params, 2, 1, b=4, dtype="fp32")]
        + [_elementwise(ADAM, params // 3, 12, 7, b=4, dtype="fp32")] * 3
    )
    return forward, backward, optimizer


def _deep_narrow(layers: int = 24, width: int = 256, batch: int = 32):
    """A deep narrow fp32 MLP: every kernel is far too small to fill an A100, so each takes its
    floor time (a few µs), not its roofline time."""
    mm = lambda names, M, K, N: _gemm(names, M, K, N, b=4, dtype="fp32", floor_us=6.0)  # noqa: E731
    ew = lambda names, tensors: _elementwise(names, batch * width, 1, tensors, b=4, dtype="fp32")  # noqa: E731
    layer_fwd = [mm(SGEMM, batch, width, width), ew(BIAS, 3), ew(RELU, 2), ew(LN, 2), ew(ADD, 3)]
    layer_bwd = [
        ew(ADD, 3),
        ew(LN_BWD, 3),
        ew(THRESH_BWD, 3),
        ew(SUM_BIAS, 2),
        mm(SGEMM_NN, batch, width, width),
        mm(SGEMM, width, batch, width),
        ew(BIAS, 3),
    ]
    forward, backward = tuple(layer_fwd * layers), tuple(layer_bwd * layers)
    # for-loop Adam: several tiny kernels per parameter tensor
    optimizer = tuple([_elementwise(ADAM_STEP, width * width, 3, 4, b=4, dtype="fp32")] * (6 * layers))
    return forward, backward, optimizer


_F, _B, _O = _gpt(batch=8)
_Fs, _Bs, _Os = _gpt(batch=2)
_Fd, _Bd, _Od = _deep_narrow()
SCENARIOS = {
    "compute": Scenario(
        "compute",
        nsys.describe_example("compute"),
        _F,
        _B,
        _O,
        h2d_bytes=1 << 20,
        d2h_bytes=4,
        copy_gb_s=22.0,
        launch_us=5.0,
        python_us=6.0,
        dataloader_us=180.0,
        memsets_per_step=2,
        seed=3,
    ),
    "memcpy": Scenario(
        "memcpy",
        nsys.describe_example("memcpy"),
        _Fs,
        _Bs,
        _Os,
        h2d_bytes=400_000_000,
        d2h_bytes=16_000_000,
        copy_gb_s=24.0,
        launch_us=5.0,
        python_us=6.0,
        dataloader_us=400.0,
        memsets_per_step=2,
        seed=5,
    ),
    "launch": Scenario(
        "launch",
        nsys.describe_example("launch"),
        _Fd,
        _Bd,
        _Od,
        h2d_bytes=32 * 256 * 4,
        d2h_bytes=4,
        copy_gb_s=12.0,
        launch_us=6.5,
        python_us=9.0,
        dataloader_us=60.0,
        memsets_per_step=0,
        seed=7,
    ),
}


class _Sim:
    """Events of a host thread issuing work to one CUDA stream, in nanoseconds."""

    def __init__(self, sc: Scenario):
        self.sc, self.rng = sc, np.random.default_rng(sc.seed)
        self.host, self.gpu, self.corr = 1_000_000_000, 1_000_000_000, 100
        self.thread = GLOBAL_TID  # the thread issuing CUDA calls now
        self.strings: dict[str, int] = {}
        self.kernels, self.memcpy, self.memset, self.runtime, self.nvtx = [], [], [], [], []

    def sid(self, text: str) -> int:
        return self.strings.setdefault(text, len(self.strings) + 1)

    def jitter(self, mean_ns: float, sigma: float = 0.06) -> int:
        return max(1, round(float(mean_ns * self.rng.lognormal(0.0, sigma))))

    def api(self, name: str, mean_us: float) -> tuple[int, int, int]:
        self.corr += 1
        start = self.host
        self.host += self.jitter(mean_us * 1e3, 0.15)
        self.runtime.append((start, self.host, 1, self.thread, self.corr, self.sid(name), 0, 0))
        return start, self.host, self.corr

    def gpu_after(self, api_start: int, duration: int) -> tuple[int, int]:
        start = max(self.gpu, api_start + 2_500)  # the GPU sees work ~2.5 µs after the call begins
        self.gpu = start + duration
        return start, self.gpu

    def launch(self, kernel: Kernel) -> None:
        s, _, corr = self.api("cudaLaunchKernel_v7000", self.sc.launch_us)
        ks, ke = self.gpu_after(s, self.jitter(kernel.mean_us() * 1e3))
        self.kernels.append(
            (
                ks,
                ke,
                DEVICE,
                CONTEXT,
                STREAM,
                corr,
                PID << 24,
                self.sid(kernel.names[0]),
                self.sid(kernel.names[1]),
            )
        )
        self.host += self.jitter(self.sc.python_us * 1e3, 0.2)

    def copy(self, nbytes: int, kind: int) -> None:
        s, _, corr = self.api("cudaMemcpyAsync_v3020", 8.0)
        cs, ce = self.gpu_after(s, self.jitter(1e3 + nbytes / self.sc.copy_gb_s, 0.03))
        # host-to-device from pinned memory, device-to-host into pinned memory
        src, dst = (MEMORY_PINNED, MEMORY_DEVICE) if kind == 1 else (MEMORY_DEVICE, MEMORY_PINNED)
        self.memcpy.append((cs, ce, DEVICE, CONTEXT, STREAM, corr, PID << 24, nbytes, kind, src, dst))

    def fill(self, nbytes: int) -> None:
        s, _, corr = self.api("cudaMemsetAsync_v3020", 4.0)
        ms, me = self.gpu_after(s, self.jitter(1.5e3 + nbytes / 900.0))
        self.memset.append((ms, me, DEVICE, CONTEXT, STREAM, corr, PID << 24, 0, nbytes, MEMORY_DEVICE))

    def range(self, name: str, start: int, end: int) -> None:
        self.nvtx.append((start, end, 59, None, None, None, name, GLOBAL_TID, GLOBAL_TID, None, 0))

    def step(self) -> None:
        sc = self.sc
        t_step = self.host
        t = self.host
        self.host += self.jitter(sc.dataloader_us * 1e3, 0.1)
        self.copy(sc.h2d_bytes, 1)
        self.range("dataloader", t, self.host)
        for phase, kernels in (
            ("forward", sc.forward),
            ("backward", sc.backward),
            ("optimizer", sc.optimizer),
        ):
            t = self.host
            if phase == "backward":
                self.fill(4)  # the main thread seeds the loss's gradient (ones_like), then waits
                self.thread = AUTOGRAD_TID
                for _ in range(sc.memsets_per_step):
                    self.fill(4 << 20)
            for kernel in kernels:
                self.launch(kernel)
            self.thread = GLOBAL_TID
            self.range(phase, t, self.host)
        self.copy(sc.d2h_bytes, 2)  # loss / metrics back to the host ...
        s, _, _ = self.api("cudaStreamSynchronize_v3020", 3.0)  # ... and wait for them
        self.host = max(self.host, self.gpu + 3_000)
        self.runtime[-1] = (s, self.host, *self.runtime[-1][2:])
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
    con.executemany(
        "INSERT INTO TRAINPERF_EXAMPLE VALUES (?, ?)",
        [("note", NOTE), ("workload", f"{sim.sc.name}: {sim.sc.description}")],
    )
    con.commit()
    con.close()


def _summary_rows(groups: dict[str, list[int]]) -> list[list[str]]:
    grand = sum(sum(v) for v in groups.values())
    stats = []
    for name, durs in groups.items():
        a = np.asarray(durs, dtype=np.int64)
        std = float(a.std(ddof=1)) if len(a) > 1 else 0.0
        stats.append(
            (
                int(a.sum()),
                name,
                len(a),
                float(a.mean()),
                float(np.median(a)),
                int(a.min()),
                int(a.max()),
                std,
            )
        )
    stats.sort(key=lambda s: (-s[0], s[1]))
    return [
        [
            f"{100.0 * tot / grand:.1f}",
            str(tot),
            str(n),
            f"{avg:.1f}",
            f"{med:.1f}",
            str(lo),
            str(hi),
            f"{std:.1f}",
            name,
        ]
        for tot, name, n, avg, med, lo, hi, std in stats
    ]


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
        (
            "cuda_gpu_kern_sum",
            ["Time (%)", "Total Time (ns)", "Instances", *stat, "Name"],
            _summary_rows(kern),
        ),
        ("cuda_api_sum", ["Time (%)", "Total Time (ns)", "Num Calls", *stat, "Name"], _summary_rows(api)),
        (
            "cuda_gpu_mem_time_sum",
            ["Time (%)", "Total Time (ns)", "Count", *stat, "Operation"],
            _summary_rows(mem),
        ),
        (
            "nvtx_sum",
            ["Time (%)", "Total Time (ns)", "Instances", *stat, "Style", "Range"],
            [[*r[:-1], "PushPop", r[-1]] for r in _summary_rows(nvtx)],
        ),
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python scripts/make_nsys_examples.py",
        description="(Re)write chapter 3's EXAMPLE nsys files: for each "
        "scenario an `nsys export` SQLite database and the `nsys stats "
        "--format csv` output computed from it. Deterministic (seeded).",
    )
    parser.add_argument("--out", type=Path, default=DATA, help=f"folder to write (default: {DATA})")
    args = parser.parse_args(argv)
    for path in write_examples(args.out):
        print(path)


if __name__ == "__main__":
    main()
