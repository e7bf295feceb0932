"""What fits on which GPU: the ledger and the activations of a chosen model as stacked bars.

:func:`estimate` adds the model-state ledger (:func:`model_state_bytes`) and the activations
(Korthikanti et al.'s per-layer formula × layers, plus the output layer's fp32 log-softmax,
4·s·b·vocab bytes) for one data-parallel rank. :class:`MemoryExplorer` draws it, with the
GPU memory of a device from :data:`helpers.hardware.DEVICES` as a line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .. import hardware, i18n, models
from .._validate import count as _count
from .._validate import flag as _flag
from .._validate import unknown
from .._widgets import with_static_fallback
from ..i18n import text, tr
from ._ledger import OPTIMIZER_STATES, RECOMPUTE, activation_bytes, model_state_bytes

GB = 1e9  # datasheets print memory in GB


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
    return ModelShape("Llama-style 7B", n, L, h, 32, V, 4096,
                      "SwiGLU MLP: the GPT layer formula is an approximation for it")


def model_presets() -> dict[str, ModelShape]:
    """The course models, GPT-2 small / XL, GPT-3 6.7B and a Llama-style 7B."""
    out = {}
    for key, label in [("tiny", "course tiny"), ("small-cpu", "course small-cpu"),
                       ("gpt2-small", "GPT-2 small (124M)"), ("gpt2-xl", "GPT-2 XL (1.5B)"),
                       ("gpt3-6.7b", "GPT-3 6.7B")]:
        c = models.CONFIGS[key]
        out[label] = ModelShape(label, c.num_params(), c.n_layers, c.d_model, c.n_heads, c.vocab_size,
                                c.seq_len)
    llama = _llama_7b()
    out[llama.name] = llama
    return out


def estimate(shape: ModelShape, batch: int, seq_len: int, *, mixed_precision: bool = True,
             optimizer: str = "adamw", zero_stage: int = 0, dp: int = 1, recompute: str = "none",
             fused_attention: bool = True) -> dict[str, int]:
    """Bytes per rank: the ledger's four parts, ``"activations"`` (layers × Korthikanti's
    formula without dropout, 2 bytes per element with mixed precision, 4 without),
    ``"logits"`` (fp32 log-softmax of the loss) and ``"total"``."""
    _flag(mixed_precision=mixed_precision, fused_attention=fused_attention)
    batch, seq_len = _count(batch=batch, seq_len=seq_len)
    ledger = model_state_bytes(shape.n_params, optimizer, mixed_precision, zero_stage=zero_stage, dp=dp)
    per_layer = activation_bytes(seq_len, batch, shape.hidden, shape.heads, recompute,
                                 bytes_per_element=2 if mixed_precision else 4, dropout=False,
                                 fused_attention=fused_attention)
    out = {k: v for k, v in ledger.as_dict().items() if k != "total"}
    out["activations"] = shape.layers * per_layer
    out["logits"] = 4 * seq_len * batch * shape.vocab
    out["total"] = sum(out.values())
    return out


PARTS = (("parameters", "tab:blue"), ("gradients", "tab:orange"), ("optimizer_state", "tab:green"),
         ("master_weights", "tab:olive"), ("activations", "tab:red"), ("logits", "tab:purple"))


def plot_estimates(bars: dict[str, dict[str, int]], capacity: float | None = None, *,
                   highlight: str | None = None, capacity_label: str = "", ax: Any = None,
                   title: str = "") -> Any:
    """Stacked bars (GB) of :func:`estimate` results, one per label, and a capacity line."""
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
        ax.annotate(text(capacity_label), (len(labels) - 0.5, capacity / GB), ha="right", va="bottom",
                    fontsize=8)
        top = max(top, capacity / GB)
    ax.set_ylim(0, top * 1.12)
    ax.set_xticks(range(len(labels)), [text(label) for label in labels], fontsize=8)
    ax.set_ylabel(tr("GB per GPU (10⁹ bytes)"))
    ax.set_title(text(title), fontsize=9)
    handles = [Patch(color=color, label=_part(key)) for key, color in PARTS]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, axis="y", alpha=0.3)
    return ax


def _part(key: str) -> str:
    """A ledger part's name as shown ("optimizer_state" -> "optimizer state"), translated."""
    names = {"parameters": tr("parameters"), "gradients": tr("gradients"),
             "optimizer_state": tr("optimizer state"), "master_weights": tr("master weights"),
             "activations": tr("activations"), "logits": tr("logits")}
    return names.get(key, key.replace("_", " "))


class MemoryExplorer:
    """Model, batch, sequence, precision, optimizer, ZeRO and recompute, against a GPU's memory.

    A live widget in Jupyter front ends with a widget manager; everywhere else (papermill,
    nbconvert, GitHub) the output also carries a static PNG of the same view.
    """

    def __init__(self, model: str = "GPT-2 XL (1.5B)", device: str = "A100 80GB SXM", batch: int = 8,
                 seq_len: int = 1024) -> None:
        import ipywidgets as w

        self._presets = model_presets()
        if model not in self._presets:
            raise unknown("model preset", model, self._presets)
        spec = hardware.get_device(device)
        dd = {"style": {"description_width": "90px"}}
        self.model = w.Dropdown(options=list(self._presets), value=model, description=tr("model"), **dd)
        self.device = w.Dropdown(options=list(hardware.DEVICES), value=spec.name, description="GPU", **dd)
        self.precision = w.Dropdown(options=["bf16 mixed", "fp32"], value="bf16 mixed",
                                    description=tr("precision"), **dd)
        self.optimizer = w.Dropdown(options=list(OPTIMIZER_STATES), value="adamw",
                                    description=tr("optimizer"), **dd)
        self.recompute = w.Dropdown(options=list(RECOMPUTE), value="none", description=tr("recompute"),
                                    **dd)
        self.attention = w.Dropdown(options=["fused", "unfused"], value="fused",
                                    description=tr("attention"), **dd)
        self.batch = w.SelectionSlider(options=[2**i for i in range(9)], value=batch,
                                       description=tr("batch"), **dd)
        self.seq = w.SelectionSlider(options=[2**i for i in range(7, 16)], value=seq_len,
                                     description=tr("seq_len"), **dd)
        self.stage = w.IntSlider(value=0, min=0, max=3, description=tr("ZeRO stage"), **dd)
        self.dp = w.SelectionSlider(options=[2**i for i in range(11)], value=8, description=tr("DP ranks"),
                                    **dd)
        self.row = w.HTML()
        self.out = w.Output()
        controls = [self.model, self.device, self.precision, self.optimizer, self.recompute,
                    self.attention, self.batch, self.seq, self.stage, self.dp]
        self.box = w.VBox([w.HBox(controls[:3]), w.HBox(controls[3:6]), w.HBox(controls[6:8]),
                           w.HBox(controls[8:]), self.row, self.out])
        for control in controls:
            control.observe(lambda _change: self.redraw(), names="value")
        self.redraw()

    def settings(self) -> dict[str, Any]:
        return {"mixed_precision": self.precision.value != "fp32", "optimizer": self.optimizer.value,
                "zero_stage": self.stage.value, "dp": self.dp.value,
                "fused_attention": self.attention.value == "fused"}

    def current(self, recompute: str | None = None) -> dict[str, int]:
        """The estimate for the current controls (or another recompute mode)."""
        shape = self._presets[self.model.value]
        return estimate(shape, self.batch.value, self.seq.value, recompute=recompute or self.recompute.value,
                        **self.settings())

    def _title(self) -> str:
        return tr("{model} · batch {batch} × seq {seq} · {precision} · {optimizer} · ZeRO-{stage} × {dp} "
                  "ranks · {attention} attention · recompute {recompute}", model=self.model.value,
                  batch=self.batch.value, seq=self.seq.value, precision=self.precision.value,
                  optimizer=self.optimizer.value, stage=self.stage.value, dp=self.dp.value,
                  attention=self.attention.value, recompute=self.recompute.value)

    def figure(self) -> Any:
        import matplotlib.pyplot as plt

        spec = hardware.get_device(self.device.value)
        bars = {mode: self.current(mode) for mode in RECOMPUTE}
        fig, ax = plt.subplots(figsize=(8.4, 4.2), layout="constrained")
        plot_estimates({tr("recompute") + f"\n{m}": v for m, v in bars.items()}, spec.memory_gb * GB,
                       highlight=tr("recompute") + f"\n{self.recompute.value}",
                       capacity_label=f"{spec.name}: {spec.memory_gb:g} GB", ax=ax, title=self._title())
        plt.close(fig)
        return fig

    def redraw(self) -> None:
        from IPython.display import display

        spec = hardware.get_device(self.device.value)
        total = self.current()["total"]
        room = spec.memory_gb * GB - total
        verdict = (tr("fits, {room:,.1f} GB to spare", room=room / GB) if room >= 0
                   else tr("does NOT fit: {over:,.1f} GB over", over=-room / GB))
        parts = ", ".join(f"{_part(k)} {v / GB:,.2f}" for k, v in self.current().items() if k != "total")
        self.row.value = "<code>" + self._title() + "<br>" + tr(
            "per GPU {total:,.2f} GB ({parts} GB) on {device} ({capacity:g} GB, datasheet): {verdict}",
            total=total / GB, parts=parts, device=spec.name, capacity=spec.memory_gb,
            verdict=verdict) + "</code>"
        self.out.clear_output(wait=True)
        with self.out:
            display(self.figure())

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        total, spec = self.current()["total"], hardware.get_device(self.device.value)
        return with_static_fallback(self.box, self.figure(), tr(
            "Memory explorer ({title}): {total:,.2f} GB per GPU vs {device} {capacity:g} GB",
            title=self._title(), total=total / GB, device=spec.name, capacity=spec.memory_gb), **kwargs)


def max_batch(shape: ModelShape, seq_len: int, capacity_bytes: float, **settings: Any) -> int:
    """Largest micro batch whose :func:`estimate` fits in ``capacity_bytes`` (0 if none does)."""
    seq_len, = _count(seq_len=seq_len)
    if estimate(shape, 1, seq_len, **settings)["total"] > capacity_bytes:
        return 0
    fixed = estimate(shape, 1, seq_len, **settings)["total"]
    per_sample = estimate(shape, 2, seq_len, **settings)["total"] - fixed  # everything else is linear in b
    b = 1 + math.floor((capacity_bytes - fixed) / per_sample) if per_sample else 1
    while b > 1 and estimate(shape, b, seq_len, **settings)["total"] > capacity_bytes:
        b -= 1
    return b
