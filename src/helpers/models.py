"""The course model: a small decoder-only transformer (GPT-2 style) whose size is a config.

Named configs: ``"tiny"`` runs a training step in milliseconds on a 2-core CPU (CI,
free Colab); ``"gpt2-small"`` is GPT-2 small's shape (12 layers, d_model 768, 12 heads,
context 1024, about 124M parameters) for a GPU; ``"gpt2-xl"`` (1.5B) and ``"gpt3-6.7b"``
(a 7B-class shape) are for memory accounting with fake tensors (chapter 5), never for a
CPU run. Attention uses ``torch.nn.functional.scaled_dot_product_attention`` with a causal
mask, so the model takes the fused attention kernels where the device has them;
``attention="math"`` spells the same attention out (scores, softmax, weighted sum), which
keeps the seq_len × seq_len score matrix for the backward pass as unfused kernels do.
``dropout`` adds dropout on the attention probabilities and after each sub-layer
(GPT-2's places), so checkpointing's RNG handling can be tested (chapter 6).

Parameter conventions (they matter for 6·N·tokens):

* :func:`num_params` counts every parameter once (the token embedding is tied to the
  output layer, so it appears once).
* :func:`flop_params` is the N of the MFU formula: every parameter except the position
  embedding, whose lookup costs no FLOPs. The tied token table stays in, because as the
  output layer it *is* a matmul (``d_model × vocab`` per token). This is nanoGPT's choice.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import flag as _flag
from ._validate import unknown, whole_fields
from .bench import resolve_device


@dataclass(frozen=True)
class GPTConfig:
    """Shape of the course model."""

    vocab_size: int = 256
    seq_len: int = 64  # maximum context (size of the position table)
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    mlp_ratio: int = 4
    name: str = "custom"
    attention: str = "sdpa"  # "sdpa" (fused where the device has it) or "math" (spelled out)
    dropout: float = 0.0  # on attention probabilities and after each sub-layer, in training

    def __post_init__(self) -> None:
        whole_fields(self, "vocab_size", "seq_len", "d_model", "n_layers", "n_heads", "mlp_ratio")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                "pick n_heads that divides d_model."
            )
        if self.attention not in ATTENTION:
            raise unknown("GPTConfig.attention", self.attention, ATTENTION)
        if (
            isinstance(self.dropout, bool)
            or not isinstance(self.dropout, (int, float))
            or not 0 <= self.dropout < 1
        ):
            raise ValueError(f"GPTConfig.dropout must be a probability in [0, 1), got {self.dropout!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def d_ff(self) -> int:
        return self.mlp_ratio * self.d_model

    def linear_shapes(self) -> list[tuple[int, int]]:
        """(in_features, out_features) of every matmul weight, the tied output layer included."""
        d, f = self.d_model, self.d_ff
        per_layer = [(d, 3 * d), (d, d), (d, f), (f, d)]  # qkv, attention out, MLP up, MLP down
        return per_layer * self.n_layers + [(d, self.vocab_size)]

    def num_params(self) -> int:
        """All parameters, counted from the shapes (equals :func:`num_params` of the model)."""
        d = self.d_model
        matmul_with_bias = sum(i * o + o for i, o in self.linear_shapes()[:-1])
        norms = (2 * self.n_layers + 1) * 2 * d  # LayerNorm weight + bias
        embeddings = self.vocab_size * d + self.seq_len * d  # token (tied) + position
        return matmul_with_bias + norms + embeddings

    def flop_params(self) -> int:
        """N for 6·N·tokens: all parameters except the position table."""
        return self.num_params() - self.seq_len * self.d_model


#: Attention implementations of :class:`Block`.
ATTENTION = ("sdpa", "math")

#: Named configurations. ``tiny`` is for CPUs; ``gpt2-small`` is GPT-2 small's shape, with the
#: vocabulary padded from 50257 to 50304 (a multiple of 64, friendlier to GPU GEMM tiles).
#: ``gpt2-xl`` is GPT-2 XL's shape (Radford et al. 2019: 48 layers, d_model 1600, 25 heads) and
#: ``gpt3-6.7b`` GPT-3 6.7B's (Brown et al. 2020, table 2.1: 32 layers, d_model 4096, 32 heads,
#: context 2048): with fake tensors they measure memory at sizes no laptop holds.
CONFIGS: dict[str, GPTConfig] = {
    "tiny": GPTConfig(vocab_size=256, seq_len=64, d_model=64, n_layers=2, n_heads=4, name="tiny"),
    "small-cpu": GPTConfig(vocab_size=512, seq_len=128, d_model=128, n_layers=4, n_heads=4, name="small-cpu"),
    "gpt2-small": GPTConfig(
        vocab_size=50304, seq_len=1024, d_model=768, n_layers=12, n_heads=12, name="gpt2-small"
    ),
    "gpt2-xl": GPTConfig(
        vocab_size=50304, seq_len=1024, d_model=1600, n_layers=48, n_heads=25, name="gpt2-xl"
    ),
    "gpt3-6.7b": GPTConfig(
        vocab_size=50304, seq_len=2048, d_model=4096, n_layers=32, n_heads=32, name="gpt3-6.7b"
    ),
}


def get_config(name: str | GPTConfig, **overrides: Any) -> GPTConfig:
    """A named config (``"tiny"``, ``"small-cpu"``, ``"gpt2-small"``), optionally changed."""
    if isinstance(name, GPTConfig):
        config = name
    elif name in CONFIGS:
        config = CONFIGS[name]
    else:
        raise unknown("model config", name, CONFIGS)
    return replace(config, **overrides) if overrides else config


def course_config(device: str | torch.device = "auto", quick: bool = True) -> GPTConfig:
    """The config a notebook uses on ``device``: tiny on CPU, GPT-2 small on a GPU."""
    _flag(quick=quick)
    dev = resolve_device(device)
    if dev.type == "cuda":
        return CONFIGS["gpt2-small"] if not quick else get_config("gpt2-small", seq_len=512)
    return CONFIGS["tiny"] if quick else CONFIGS["small-cpu"]


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x)).

    ``attend`` is the attention core (scores, causal softmax, weighted sum of V): the part
    selective activation checkpointing recomputes (chapter 6).
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        d = config.d_model
        self.n_heads = config.n_heads
        self.impl, self.p = config.attention, float(config.dropout)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, config.d_ff), nn.Linear(config.d_ff, d)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal attention of (batch, heads, seq, head_dim) tensors."""
        p = self.p if self.training else 0.0
        if self.impl == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        s = q.shape[-2]
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        # an additive mask saves nothing for the backward pass (masked_fill would keep its mask)
        mask = torch.full((s, s), float("-inf"), device=q.device, dtype=scores.dtype).triu(1)
        return self._drop((scores + mask).softmax(dim=-1)) @ v

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        # (b, s, d) -> (b, heads, s, head_dim), the layout scaled_dot_product_attention expects
        q, k, v = (t.view(b, s, self.n_heads, d // self.n_heads).transpose(1, 2) for t in (q, k, v))
        y = self.attend(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))

    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        # no dropout op at all when it is off: nothing saved, nothing counted
        return F.dropout(x, self.p) if self.p and self.training else x

    def attention_path(self, x: torch.Tensor) -> torch.Tensor:
        """The attention sub-layer's branch of the residual stream."""
        return self._drop(self.attention(self.ln1(x)))

    def mlp_path(self, x: torch.Tensor) -> torch.Tensor:
        """The MLP sub-layer's branch of the residual stream."""
        return self._drop(self.down(F.gelu(self.up(self.ln2(x)))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention_path(x)
        return x + self.mlp_path(x)


class TinyGPT(nn.Module):
    """Decoder-only transformer: embeddings, ``n_layers`` blocks, final norm, tied output layer."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.seq_len, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def features(self, idx: torch.Tensor) -> torch.Tensor:
        """The final layer-normed hidden states ``(batch, seq, d_model)``: what the output layer reads."""
        s = idx.shape[1]
        if s > self.config.seq_len:
            raise ValueError(f"sequence length {s} exceeds the model's context {self.config.seq_len}")
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(s, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits ``(batch, seq, vocab)``, or the mean cross-entropy loss when ``targets`` is given."""
        b, s = idx.shape
        logits = F.linear(self.features(idx), self.tok_emb.weight)  # output layer tied to the token table
        if targets is None:
            return logits
        return F.cross_entropy(logits.reshape(b * s, -1), targets.reshape(b * s))


def build_model(
    config: str | GPTConfig = "tiny", device: str | torch.device = "cpu", seed: int = 0
) -> TinyGPT:
    """A freshly initialized course model on ``device`` (same seed -> same weights)."""
    config = get_config(config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TinyGPT(config)
    return model.to(resolve_device(device))


def num_params(model: nn.Module) -> int:
    """Parameters of ``model``, each counted once (tied weights are one parameter)."""
    return sum(p.numel() for p in model.parameters())


def flop_params(model: TinyGPT) -> int:
    """N for 6·N·tokens: all parameters except the position embedding (see the module doc)."""
    return num_params(model) - model.pos_emb.weight.numel()


def make_batch(
    config: str | GPTConfig,
    batch_size: int,
    seq_len: int | None = None,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids and next-token targets, ``(batch_size, seq_len)`` each (synthetic data)."""
    config = get_config(config)
    seq_len = config.seq_len if seq_len is None else seq_len
    if not 1 <= seq_len <= config.seq_len:
        raise ValueError(f"seq_len must be in 1..{config.seq_len} for config {config.name!r}, got {seq_len}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(config.vocab_size, (batch_size, seq_len + 1), generator=gen)
    tokens = tokens.to(resolve_device(device))
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def make_train_step(
    model: TinyGPT,
    batch: tuple[torch.Tensor, torch.Tensor],
    lr: float = 1e-3,
    autocast_dtype: torch.dtype | None = None,
) -> Callable[[], torch.Tensor]:
    """A closure running one full training step (forward, backward, AdamW step) on ``batch``.

    It returns the loss as a device tensor and never calls ``.item()``: reading the value
    back is the caller's choice (and a host-device sync on a GPU).
    """
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    idx, targets = batch
    device_type = idx.device.type

    def step() -> torch.Tensor:
        with (
            contextlib.nullcontext()
            if autocast_dtype is None
            else torch.autocast(device_type, dtype=autocast_dtype)
        ):
            loss = model(idx, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def describe(config: GPTConfig) -> str:
    """One line: the config's shape and parameter counts."""
    return (
        f"{config.name}: layers={config.n_layers}, d_model={config.d_model}, heads={config.n_heads}, "
        f"context={config.seq_len}, vocab={config.vocab_size}; params {config.num_params():,} "
        f"(N for 6·N·T: {config.flop_params():,})"
    )
