"""What fits on which GPU: the ledger and the activations of a chosen model as stacked bars.

:func:`estimate` adds the model-state ledger (:func:`model_state_bytes`) and the activations
(Korthikanti et al.'s per-layer formula × layers, plus the output layer's fp32 log-softmax,
4·s·b·vocab bytes) for one data-parallel rank. :class:`MemoryExplorer` draws it, with the
GPU memory of a device from :data:`helpers.hardware.DEVICES` as a line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import hardware, i18n, models
from .._validate import count as _count
from .._validate import flag as _flag
from .._validate import unknown
from .._widgets import with_static_fallback
from ..i18n import text, tr
from ._ledger import OPTIMIZER_STATES, RECOMPUTE, activation_bytes, model_state_bytes

GB = 1e9  # the explorer shows decimal gigabytes
GIB = 2**30


def gpu_capacity_bytes(gpu: str) -> float:
    """The memory of a GPU from the course's hardware table, in bytes. A GPU datasheet's "80 GB"
    of HBM is binary: HBM stacks hold powers of two, so an "80 GB" A100 or H100 has 80 GiB
    (85.9 × 10⁹ bytes). The device reports a little less to PyTorch (an A100 80GB: 79.19 GiB in
    ``torch.cuda.mem_get_info()`` and in section 9's out-of-memory message): measure yours."""
    return hardware.get_device(gpu).memory_gb * GIB


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs to know about a decoder-only transformer."""

    name: str
    n_params: int
    layers: int
    hidden: int
    heads: int
    vocab: int
    seq_len: int  # its context length, the default sequence length
    note: str = ""


def _llama_7b() -> ModelShape:
    # Touvron et al. 2023 (LLaMA / Llama 2 7B): 32 layers, d 4096, 32 heads, SwiGLU MLP of 11008,
    # vocabulary 32000, untied input and output embeddings, RMSNorm weights only.
    L, h, f, V = 32, 4096, 11008, 32000
    n = 2 * V * h + L * (4 * h * h + 3 * h * f + 2 * h) + h
    return ModelShape(
        "Llama-style 7B", n, L, h, 32, V, 4096, "SwiGLU MLP: the GPT layer formula is an approximation for it"
    )


def model_presets() -> dict[str, ModelShape]:
    """The course models, GPT-2 small / XL, GPT-3 6.7B and a Llama-style 7B."""
    out = {}
    for key, label in [
        ("tiny", "course tiny"),
        ("small-cpu", "course small-cpu"),
        ("gpt2-small", "GPT-2 small (124M)"),
        ("gpt2-xl", "GPT-2 XL (1.5B)"),
        ("gpt3-6.7b", "GPT-3 6.7B"),
    ]:
        c = models.CONFIGS[key]
        out[label] = ModelShape(
            label, c.num_params(), c.n_layers, c.d_model, c.n_heads, c.vocab_size, c.seq_len
        )
    llama = _llama_7b()
    out[llama.name] = llama
    return out


def _shard(n_bytes: int, zero_stage: int, dp: int) -> int:
    """The 16-bit weights are split over the ranks only by ZeRO stage 3."""
    return -(-n_bytes // dp) if zero_stage >= 3 else n_bytes


#: AdamW's implementations (``torch.optim.AdamW(foreach=..., fused=...)``) and what each holds
#: beyond the ledger during ``optimizer.step()``.
OPTIMIZER_IMPLS = {
    "foreach": "one fp32 copy of the parameters the rank updates (torch's default on a GPU)",
    "single-tensor": "two fp32 tensors the size of the largest parameter (the default on a CPU)",
    "fused": "as single-tensor here: MemTracker on a CPU measures two fp32 tensors the size of the "
    "largest parameter (not measured on a GPU in this course)",
}


def _step_temporaries(impl: str, optimizer_state: int, shape: ModelShape) -> int:
    if impl == "foreach":
        return optimizer_state // 2  # Adam's state is two fp32 tensors per parameter: half is one copy
    return 2 * 4 * shape.vocab * shape.hidden  # single-tensor, and fused as measured on a CPU


def _moments(
    shape: ModelShape,
    batch: int,
    seq_len: int,
    *,
    mixed_precision: bool = True,
    optimizer: str = "adamw",
    zero_stage: int = 0,
    dp: int = 1,
    recompute: str = "none",
    fused_attention: bool = True,
    optimizer_impl: str = "foreach",
    grad_accum: int = 1,
) -> tuple[dict[str, int], dict[str, int]]:
    """The parts of :func:`estimate`'s two moments: when backward starts, and in the optimizer
    step (same arguments, without the overhead)."""
    _flag(mixed_precision=mixed_precision, fused_attention=fused_attention)
    batch, seq_len, grad_accum = _count(batch=batch, seq_len=seq_len, grad_accum=grad_accum)
    if optimizer_impl not in OPTIMIZER_IMPLS:
        raise unknown("optimizer_impl", optimizer_impl, OPTIMIZER_IMPLS)
    ledger = model_state_bytes(shape.n_params, optimizer, mixed_precision, zero_stage=zero_stage, dp=dp)
    state = {k: v for k, v in ledger.as_dict().items() if k != "total"}
    e = 2 if mixed_precision else 4
    sb, sbh = seq_len * batch, seq_len * batch * shape.hidden
    full_layer = (
        activation_bytes(
            seq_len,
            batch,
            shape.hidden,
            shape.heads,
            "none",
            bytes_per_element=e,
            dropout=False,
            fused_attention=fused_attention,
        )
        + (4 * sbh if mixed_precision else 0)
        + 16 * sb
    )  # fp32 residual stream; LN statistics
    if recompute == "full":
        per_layer = 4 * sbh  # the block's input: the residual stream, fp32
    else:
        per_layer = (
            activation_bytes(
                seq_len,
                batch,
                shape.hidden,
                shape.heads,
                recompute,
                bytes_per_element=e,
                dropout=False,
                fused_attention=fused_attention,
            )
            + (4 * sbh if mixed_precision else 0)
            + 16 * sb
        )
    outside = 4 * sbh + 8 * sb + e * sbh + 8 * (2 * sb + seq_len)  # final LN in + stats, head in, ids
    logits = 4 * sb * shape.vocab
    loss_grads = 2 * logits
    held = 4 * shape.n_params  # the accumulated fp32 gradients
    start = {
        **state,
        "gradients": (-(-held // dp) if zero_stage >= 2 else held) if grad_accum > 1 else 0,
        "activations": shape.layers * per_layer + outside,
        "logits": logits,
        "temporaries": max(loss_grads, full_layer) if recompute == "full" else loss_grads,
    }
    if grad_accum > 1:
        # backward makes each gradient before adding it to the kept one: for a moment both exist,
        # and the token embedding's (4·vocab·hidden, the largest) can outgrow the loss's two
        start["temporaries"] = max(start["temporaries"], 4 * shape.vocab * shape.hidden)
    if mixed_precision and recompute == "full":
        # the blocks' 16-bit weight copies are made inside the checkpointed region: recomputed,
        # not kept (the layers' matrices, 12·h² each as in a GPT layer)
        copies = _shard(2 * shape.layers * 12 * shape.hidden**2, zero_stage, dp)
        start["parameters"] -= min(start["parameters"], copies)
    adam = optimizer in ("adam", "adamw")
    end = {
        **state,
        "activations": 0,
        "logits": 0,
        "temporaries": _step_temporaries(optimizer_impl, state["optimizer_state"], shape) if adam else 0,
    }
    return start, end


def estimate(
    shape: ModelShape,
    batch: int,
    seq_len: int,
    *,
    mixed_precision: bool = True,
    optimizer: str = "adamw",
    zero_stage: int = 0,
    dp: int = 1,
    recompute: str = "none",
    fused_attention: bool = True,
    overhead_bytes: float = 0,
    optimizer_impl: str = "foreach",
    grad_accum: int = 1,
) -> dict[str, Any]:
    """The **peak** memory of one training step per rank, by part, and when it comes.

    Two moments compete (chapter 5, section 3, measures both with ``MemTracker``):

    * **the start of the backward pass** (``moment="backward starts"``): the model state
      without gradients (none exist yet), every saved activation, the loss's fp32 log-softmax
      (``"logits"``, 4·s·b·vocab bytes) and the two fp32 gradients the loss's backward makes
      (``"temporaries"``, 2 × 4·s·b·vocab); under ``recompute="full"``, the larger of those and
      one block's activations while it is recomputed;
    * **the optimizer step** (``moment="optimizer step"``): the whole ledger, gradients
      included, and the temporaries of the AdamW implementation (``optimizer_impl``):
      ``"foreach"``, torch's default on a GPU, updates every parameter at once and holds one more
      fp32 copy of the parameters this rank updates (:data:`OPTIMIZER_IMPLS`); ``"single-tensor"``,
      the default on a CPU, one parameter at a time: two fp32 tensors the size of the largest
      parameter (the token embedding, vocab × hidden); ``"fused"``: as much as single-tensor, as
      ``MemTracker`` measures it on a CPU (not measured on a GPU here). Each is checked against
      ``MemTracker`` with that implementation (``tests/test_memory.py``).

    ``grad_accum``: micro-steps per optimizer step (gradient accumulation). From the second
    micro-step on, the gradients of the earlier micro-steps are alive when the backward pass
    starts, so that moment holds them too (``"gradients"``). They are fp32, 4 bytes per
    parameter, in mixed precision as well: autocast's parameters are fp32, and stacks with
    16-bit weights accumulate into an fp32 buffer (Megatron-LM's ``main_grad``); ZeRO stage 2
    and 3 keep only this rank's shard. Backward also makes each new gradient before it adds it
    in: the token embedding's, 4·vocab·hidden bytes, can be the larger temporary.

    Activations (``"activations"``): layers × Korthikanti et al.'s per-layer formula without
    dropout (16-bit elements with ``mixed_precision``, fp32 without), with the residual stream
    kept in fp32 as ``torch.autocast`` keeps it (the two LayerNorm inputs: 4·s·b·h more per
    layer), LayerNorm statistics, and outside the layers the final LayerNorm's and the output
    layer's inputs and the token ids. Mixed precision's ledger (2-byte weights, fp32 master
    copy) has the same bytes as autocast's fp32 weights plus the 16-bit copies it keeps; under
    ``recompute="full"`` the blocks' copies are recomputed, not kept.
    ``overhead_bytes``: what PyTorch does not count (CUDA context, communication buffers,
    allocator fragmentation), added as ``"overhead"``; 0 by default, since it depends on the
    setup. Tested against :func:`helpers.memory.track` on several models, sizes and precisions.
    """

    _flag(mixed_precision=mixed_precision, fused_attention=fused_attention)
    if isinstance(overhead_bytes, bool) or not isinstance(overhead_bytes, (int, float)) or overhead_bytes < 0:
        raise ValueError(f"overhead_bytes must be a number of bytes >= 0, got {overhead_bytes!r}")
    start, end = _moments(
        shape,
        batch,
        seq_len,
        mixed_precision=mixed_precision,
        optimizer=optimizer,
        zero_stage=zero_stage,
        dp=dp,
        recompute=recompute,
        fused_attention=fused_attention,
        optimizer_impl=optimizer_impl,
        grad_accum=grad_accum,
    )
    start_total, end_total = sum(start.values()), sum(end.values())
    out: dict[str, Any] = dict(start if start_total >= end_total else end)
    out["overhead"] = int(overhead_bytes)
    out["total"] = sum(v for v in out.values())
    out["moment"] = "backward starts" if start_total >= end_total else "optimizer step"
    return out


PARTS = (
    ("parameters", "tab:blue"),
    ("gradients", "tab:orange"),
    ("optimizer_state", "tab:green"),
    ("master_weights", "tab:olive"),
    ("activations", "tab:red"),
    ("logits", "tab:purple"),
    ("temporaries", "tab:pink"),
    ("overhead", "tab:gray"),
)


def plot_estimates(
    bars: dict[str, dict[str, int]],
    capacity: float | None = None,
    *,
    highlight: str | None = None,
    capacity_label: str = "",
    ax: Any = None,
    title: str = "",
    autocast: bool = False,
) -> Any:
    """Stacked bars (GB) of :func:`estimate` results, one per label, and a capacity line.
    ``autocast``: name the mixed-precision ledger's parts as autocast holds them (fp32 weights,
    and the 16-bit copies autocast makes in the forward pass)."""
    _flag(autocast=autocast)
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    i18n.for_plot()
    if ax is None:
        _, ax = plt.subplots(figsize=(7.2, 4.2))
    labels = list(bars)
    top = 0.0
    for i, label in enumerate(labels):
        bottom = 0.0
        alpha = 1.0 if highlight in (None, label) else 0.35
        for key, color in PARTS:
            value = bars[label].get(key, 0) / GB
            ax.bar(i, value, bottom=bottom, color=color, alpha=alpha)
            bottom += value
        ax.annotate(f"{bottom:,.1f}", (i, bottom), ha="center", va="bottom", fontsize=8)
        top = max(top, bottom)
    if capacity is not None:
        ax.axhline(capacity / GB, color="black", ls="--", lw=1.2)
        ax.annotate(
            text(capacity_label), (len(labels) - 0.5, capacity / GB), ha="right", va="bottom", fontsize=8
        )
        top = max(top, capacity / GB)
    ax.set_ylim(0, top * 1.12)
    ax.set_xticks(range(len(labels)), [text(label) for label in labels], fontsize=8)
    ax.set_ylabel(tr("GB per GPU (10⁹ bytes)"))
    ax.set_title(text(title), fontsize=9)
    handles = [Patch(color=color, label=_part(key, autocast)) for key, color in PARTS]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, axis="y", alpha=0.3)
    return ax


def _part(key: str, autocast: bool = False) -> str:
    """A ledger part's name as shown ("optimizer_state" -> "optimizer state"), translated. Under
    autocast the ledger's 16-bit "parameters" are the copies autocast makes of the fp32 weights
    in each forward pass (freed or recomputed with their block), and its "master weights" are
    the model's own fp32 weights."""
    if autocast and key == "parameters":
        return tr("16-bit weight copies (autocast)")
    if autocast and key == "master_weights":
        return tr("fp32 weights")
    names = {
        "parameters": tr("parameters"),
        "gradients": tr("gradients"),
        "optimizer_state": tr("optimizer state"),
        "master_weights": tr("master weights"),
        "activations": tr("activations"),
        "logits": tr("logits"),
        "temporaries": tr("temporaries"),
        "overhead": tr("overhead (assumed)"),
    }
    return names.get(key, key.replace("_", " "))


def _control_labels() -> dict[str, str]:
    """The explorer's choices as the learner reads them (a Chinese notebook shows them in
    Chinese); the values the code passes to :func:`estimate` stay the English ones."""
    return {
        "bf16 mixed": tr("bf16 mixed"),
        "fused": tr("fused"),
        "unfused": tr("unfused"),
        "none": tr("none"),
        "selective": tr("selective"),
        "full": tr("full"),
    }


def _options(values: list[str]) -> list[tuple[str, str]]:
    """A dropdown's (label, value) pairs: the label in the notebook's language."""
    shown = _control_labels()
    return [(shown.get(v, v), v) for v in values]


class MemoryExplorer:
    """Model, batch, sequence, micro-steps, precision, optimizer, ZeRO and recompute, against a
    GPU's memory.

    A live widget in Jupyter front ends with a widget manager; everywhere else (papermill,
    nbconvert, GitHub) the output also carries a static PNG of the same view.
    """

    def __init__(
        self, model: str = "GPT-2 XL (1.5B)", gpu: str = "A100 80GB SXM", batch: int = 8, seq_len: int = 1024
    ) -> None:
        import ipywidgets as w

        self._presets = model_presets()
        if model not in self._presets:
            raise unknown("model preset", model, self._presets)
        spec = hardware.get_device(gpu)
        dd = {"style": {"description_width": "90px"}}
        self.model = w.Dropdown(options=list(self._presets), value=model, description=tr("model"), **dd)
        self.gpu = w.Dropdown(options=list(hardware.DEVICES), value=spec.name, description="GPU", **dd)
        self.precision = w.Dropdown(
            options=_options(["bf16 mixed", "fp32"]), value="bf16 mixed", description=tr("precision"), **dd
        )
        self.optimizer = w.Dropdown(
            options=list(OPTIMIZER_STATES), value="adamw", description=tr("optimizer"), **dd
        )
        self.impl = w.Dropdown(
            options=list(OPTIMIZER_IMPLS), value="foreach", description=tr("AdamW step"), **dd
        )
        self.recompute = w.Dropdown(
            options=_options(list(RECOMPUTE)), value="none", description=tr("recompute"), **dd
        )
        self.attention = w.Dropdown(
            options=_options(["fused", "unfused"]), value="fused", description=tr("attention"), **dd
        )
        self.batch = w.SelectionSlider(
            options=[2**i for i in range(9)], value=batch, description=tr("batch"), **dd
        )
        self.seq = w.SelectionSlider(
            options=[2**i for i in range(7, 16)], value=seq_len, description=tr("seq_len"), **dd
        )
        self.accum = w.Dropdown(options=[1, 2, 4, 8], value=1, description=tr("micro-steps"), **dd)
        self.stage = w.IntSlider(value=0, min=0, max=3, description=tr("ZeRO stage"), **dd)
        self.dp = w.SelectionSlider(
            options=[2**i for i in range(11)], value=8, description=tr("DP ranks"), **dd
        )
        self.overhead = w.SelectionSlider(
            options=[0.0, 0.5, 1.0, 2.0, 4.0], value=1.0, description=tr("overhead GB"), **dd
        )
        self.row = w.HTML()
        self.out = w.Output()
        controls = [
            self.model,
            self.gpu,
            self.precision,
            self.optimizer,
            self.impl,
            self.recompute,
            self.attention,
            self.batch,
            self.seq,
            self.accum,
            self.stage,
            self.dp,
            self.overhead,
        ]
        self.box = w.VBox(
            [
                w.HBox(controls[:3]),
                w.HBox(controls[3:6]),
                w.HBox(controls[6:9]),
                w.HBox(controls[9:11]),
                w.HBox(controls[11:]),
                self.row,
                self.out,
            ]
        )
        for control in controls:
            control.observe(lambda _change: self.redraw(), names="value")
        self.redraw()

    def settings(self) -> dict[str, Any]:
        return {
            "mixed_precision": self.precision.value != "fp32",
            "optimizer": self.optimizer.value,
            "zero_stage": self.stage.value,
            "dp": self.dp.value,
            "fused_attention": self.attention.value == "fused",
            "overhead_bytes": self.overhead.value * GB,
            "optimizer_impl": self.impl.value,
            "grad_accum": self.accum.value,
        }

    def current(self, recompute: str | None = None) -> dict[str, Any]:
        """The estimate for the current controls (or another recompute mode)."""
        shape = self._presets[self.model.value]
        return estimate(
            shape,
            self.batch.value,
            self.seq.value,
            recompute=recompute or self.recompute.value,
            **self.settings(),
        )

    def _title(self) -> str:
        shown = _control_labels()
        return tr(
            "{model} · batch {batch} × seq {seq} × {accum} micro-steps · {precision} · {optimizer} "
            "({impl} step) · ZeRO-{stage} × {dp} ranks · {attention} attention · recompute {recompute}",
            model=self.model.value,
            batch=self.batch.value,
            seq=self.seq.value,
            accum=self.accum.value,
            precision=shown.get(self.precision.value, self.precision.value),
            optimizer=self.optimizer.value,
            impl=self.impl.value,
            stage=self.stage.value,
            dp=self.dp.value,
            attention=shown.get(self.attention.value, self.attention.value),
            recompute=shown.get(self.recompute.value, self.recompute.value),
        )

    def figure(self) -> Any:
        import matplotlib.pyplot as plt

        spec = hardware.get_device(self.gpu.value)
        bars = {mode: self.current(mode) for mode in RECOMPUTE}
        shown = _control_labels()
        fig, ax = plt.subplots(figsize=(8.4, 4.2), layout="constrained")
        plot_estimates(
            {tr("recompute") + f"\n{shown.get(m, m)}": v for m, v in bars.items()},
            gpu_capacity_bytes(spec.name),
            highlight=tr("recompute") + f"\n{shown.get(self.recompute.value, self.recompute.value)}",
            capacity_label=f"{spec.name}: {spec.memory_gb:g} GiB",
            ax=ax,
            title=self._title(),
            autocast=self.precision.value != "fp32",
        )
        plt.close(fig)
        return fig

    def redraw(self) -> None:
        from IPython.display import display

        spec = hardware.get_device(self.gpu.value)
        total = self.current()["total"]
        room = gpu_capacity_bytes(spec.name) - total
        verdict = (
            tr("fits, {room:,.1f} GB to spare", room=room / GB)
            if room >= 0
            else tr("does NOT fit: {over:,.1f} GB over", over=-room / GB)
        )
        now = self.current()
        parts = ", ".join(
            f"{_part(k, self.precision.value != 'fp32')} {v / GB:,.2f}"
            for k, v in now.items()
            if k not in ("total", "moment") and v
        )
        moment = {
            "backward starts": tr("when the backward pass starts"),
            "optimizer step": tr("in the optimizer step"),
        }[now["moment"]]
        self.row.value = (
            "<code>"
            + self._title()
            + "<br>"
            + tr(
                "peak per GPU {total:,.2f} GB, {moment} ({parts} GB) on {device} "
                "({capacity:g} GiB = {capacity_gb:,.1f} GB, datasheet): {verdict}",
                total=total / GB,
                moment=moment,
                parts=parts,
                device=spec.name,
                capacity=spec.memory_gb,
                capacity_gb=gpu_capacity_bytes(spec.name) / GB,
                verdict=verdict,
            )
            + "</code>"
        )
        self.out.clear_output(wait=True)
        with self.out:
            display(self.figure())

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        total, spec = self.current()["total"], hardware.get_device(self.gpu.value)
        return with_static_fallback(
            self.box,
            self.figure(),
            tr(
                "Memory explorer ({title}): {total:,.2f} GB per GPU vs {device} {capacity:g} GiB",
                title=self._title(),
                total=total / GB,
                device=spec.name,
                capacity=spec.memory_gb,
            ),
            **kwargs,
        )


def max_batch(shape: ModelShape, seq_len: int, capacity_bytes: float, **settings: Any) -> int:
    """Largest micro batch whose peak (:func:`estimate`) fits in ``capacity_bytes`` (0 if none
    does). The peak never falls as the batch grows, so a doubling search and then a bisection
    find it (the peak is not linear in the batch: the optimizer step's moment does not grow)."""
    (seq_len,) = _count(seq_len=seq_len)

    def fits(b: int) -> bool:
        return estimate(shape, b, seq_len, **settings)["total"] <= capacity_bytes

    if not fits(1):
        return 0
    low, high = 1, 2
    while fits(high):
        low, high = high, high * 2
        if high > 2**40:
            raise ValueError("every batch fits: the capacity is larger than any batch needs")
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low
