"""Exact saved-for-backward bytes of the course model (:mod:`helpers.models`), from shapes.

What each piece of one :class:`helpers.models.Block` keeps, for activations of ``e`` bytes
(fp32: 4), s·b tokens, hidden size h, MLP ratio r, a heads:

* LayerNorm 1 and 2: their inputs (2·e·sbh) and per-row mean and 1/std (2 × 2 × 4·sb, fp32);
* QKV projection: its input (e·sbh); the attention core: Q, K, V (one 3·e·sbh storage);
* the core's output, also the output projection's input (e·sbh);
* MLP: up-projection input (e·sbh), GELU input and down-projection input (2·r·e·sbh);
* fused attention (``"sdpa"``): the log-sum-exp per row and head (4·a·sb, fp32);
  spelled-out attention (``"math"``): the softmax output (e·a·s²·b);
* with dropout, on a CPU: the scaled random mask after each sub-layer (2·e·sbh), and for
  ``"math"`` the probabilities' mask and dropped-out copy (2·e·a·s²·b). A CPU's dropout
  keeps its mask in the activation dtype; CUDA's fused dropout keeps 1 byte per element,
  Korthikanti's count.

So a block keeps (8 + 2r)·e·sbh plus small terms — 16·e·sbh for r = 4, Korthikanti's count
for a layer without dropout and with a fused attention. A checkpointed block keeps only its
input (e·sbh). Outside the blocks: the token ids and positions (int64), the final
LayerNorm's input and statistics, the output layer's input, the log-softmax output
(e·s·b·vocab) and the targets.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._validate import count as _count
from .._validate import unknown

BLOCK_MODES = ("none", "full", "selective")


def _config(config):
    from .. import models

    return models.get_config(config)


def block_saved_bytes(config, batch: int, seq_len: int, mode: str = "none") -> int:
    """Bytes one fp32 block of the course model saves for backward; ``mode`` is ``"none"``,
    ``"full"`` (the block is checkpointed: only its input) or ``"selective"`` (its attention
    core is checkpointed)."""
    cfg = _config(config)
    batch, seq_len = _count(batch=batch, seq_len=seq_len)
    if mode not in BLOCK_MODES:
        raise unknown("mode", mode, BLOCK_MODES)
    e, sb = 4, seq_len * batch
    sbh = sb * cfg.d_model
    if mode == "full":
        return e * sbh
    kept = (8 + 2 * cfg.mlp_ratio) * e * sbh + 2 * 2 * 4 * sb  # activations + LayerNorm statistics
    if cfg.dropout:
        kept += 2 * e * sbh  # the residual dropout masks (CPU: in the activation dtype)
    if mode == "selective":
        return kept
    scores = cfg.n_heads * seq_len * seq_len * batch
    if cfg.attention == "sdpa":
        if cfg.dropout:
            raise NotImplementedError(
                "the fused kernel's saved state with dropout is not modelled; "
                "use attention='math' with dropout"
            )
        return kept + 4 * cfg.n_heads * sb  # log-sum-exp
    return kept + e * scores + (2 * e * scores if cfg.dropout else 0)


def head_saved_bytes(config, batch: int, seq_len: int) -> int:
    """Bytes the course model saves outside its blocks: embeddings' ids, final LayerNorm,
    output layer and loss (fp32 activations, int64 ids; batch >= 2, since for batch 1 the
    ids and targets share one storage)."""
    cfg = _config(config)
    batch, seq_len = _count(batch=batch, seq_len=seq_len)
    e, sb = 4, seq_len * batch
    ids = 8 * sb + 8 * seq_len + 8 * sb  # token ids, positions, targets
    norm = e * sb * cfg.d_model + 2 * 4 * sb  # final LayerNorm input and statistics
    head = e * sb * cfg.d_model + e * sb * cfg.vocab_size  # output-layer input, log-softmax output
    return ids + norm + head + 4  # and the loss's scalar total weight


def course_saved_bytes(config, batch: int, seq_len: int, modes: str | Sequence[str] = "none") -> int:
    """Saved-for-backward bytes of one fp32 forward of the course model with targets.

    ``modes`` is one block mode for every block, or a list with one mode per block. Equals
    :func:`helpers.memory.saved_tensor_bytes` of that forward (tested), for batch >= 2.
    """
    cfg = _config(config)
    per_block = [modes] * cfg.n_layers if isinstance(modes, str) else list(modes)
    if len(per_block) != cfg.n_layers:
        raise ValueError(f"give one mode per block: {cfg.n_layers} blocks, got {len(per_block)} modes")
    blocks = sum(block_saved_bytes(cfg, batch, seq_len, mode) for mode in per_block)
    return blocks + head_saved_bytes(cfg, batch, seq_len)
