"""helpers.mfu's counting conventions: MoE active parameters, causal attention, fp8 peaks,
padding vs packing, each against an independent computation written here."""

import math

import pytest
import torch
from torch import nn

from helpers import hardware, mfu

# --------------------------------------------------------------------------- mixture of experts


def _meta_moe(cfg):
    """The model's weights as real modules on the meta device (no memory): count them by numel."""
    with torch.device("meta"):
        d, hd = cfg.d_model, cfg.head_dim
        layers = []
        for _ in range(cfg.n_layers):
            experts = [
                nn.ModuleList(
                    [nn.Linear(d, cfg.ffn_hidden, bias=False) for _ in range(2)]
                    + [nn.Linear(cfg.ffn_hidden, d, bias=False)]
                )
                for _ in range(cfg.n_experts + cfg.n_shared_experts)
            ]
            layers.append(
                nn.ModuleDict(
                    {
                        "q": nn.Linear(d, cfg.n_heads * hd, bias=False),
                        "k": nn.Linear(d, cfg.n_kv_heads * hd, bias=False),
                        "v": nn.Linear(d, cfg.n_kv_heads * hd, bias=False),
                        "o": nn.Linear(cfg.n_heads * hd, d, bias=False),
                        "router": nn.Linear(d, cfg.n_experts, bias=False),
                        "experts": nn.ModuleList(experts),
                        "norm1": nn.RMSNorm(d),
                        "norm2": nn.RMSNorm(d),
                    }
                )
            )
        model = nn.ModuleDict(
            {
                "embed": nn.Embedding(cfg.vocab_size, d),
                "layers": nn.ModuleList(layers),
                "norm": nn.RMSNorm(d),
                "head": nn.Linear(d, cfg.vocab_size, bias=False),
            }
        )
    total = sum(p.numel() for p in model.parameters())
    one_expert = sum(p.numel() for p in model["layers"][0]["experts"][0].parameters())
    unused = cfg.n_layers * (cfg.n_experts - cfg.top_k) * one_expert
    router = sum(layer["router"].weight.numel() for layer in model["layers"])
    return total, total - unused, router


def test_mixtral_counts_match_modules_and_the_paper():
    total, active, router = _meta_moe(mfu.MIXTRAL_8X7B)
    got = mfu.moe_params(mfu.MIXTRAL_8X7B)
    assert got == {"total": total, "active": active, "router": router}
    # the paper's rounded figures: 47B total, 13B active (Jiang et al. 2024)
    assert abs(got["total"] / 47e9 - 1) < 0.02
    assert abs(got["active"] / 13e9 - 1) < 0.02


def test_shared_experts_count_as_active():
    small = mfu.MoEConfig("s", 64, 2, 4, 2, 16, 128, 1000, n_experts=8, top_k=2, n_shared_experts=1)
    total, active, _ = _meta_moe(small)
    got = mfu.moe_params(small)
    assert (got["total"], got["active"]) == (total, active)


def test_moe_flops_use_active_parameters():
    cfg, seq = mfu.MIXTRAL_8X7B, 4096
    attn = 12 * cfg.n_layers * cfg.n_heads * cfg.head_dim * seq
    counts = mfu.moe_params(cfg)
    assert mfu.moe_flops_per_token(cfg, seq) == 6 * counts["active"] + attn
    assert mfu.moe_flops_per_token(cfg, seq, "total") == 6 * counts["total"] + attn
    with pytest.raises(ValueError, match="params"):
        mfu.moe_flops_per_token(cfg, seq, "all")


def test_moe_config_rejects_top_k_above_experts():
    with pytest.raises(ValueError, match="top_k"):
        mfu.MoEConfig("bad", 64, 2, 4, 2, 16, 128, 1000, n_experts=2, top_k=3)


# --------------------------------------------------------------------------- causal attention


@pytest.mark.parametrize("seq", [8, 64, 1024])
def test_causal_half_is_the_lower_triangle_within_one_over_t(seq):
    layers, heads, hd = 3, 4, 16
    full = mfu.attention_flops_per_token(layers, heads, hd, seq)
    # one query row attends to row+1 keys: count the lower triangle with its diagonal
    pairs = int(torch.tril(torch.ones(seq, seq)).sum())
    exact = full * pairs / (seq * seq)
    half = mfu.causal_attention_flops_per_token(layers, heads, hd, seq)
    assert half == pytest.approx(full / 2)
    assert abs(exact / half - 1) == pytest.approx(1 / seq)


# --------------------------------------------------------------------------- fp8 peak


def test_fp8_run_against_both_peaks():
    spec = hardware.get_device("H100 SXM")
    flops, t, n = 3.0e18, 12.0, 64
    got = mfu.fp8_run_mfu(flops, t, n, "H100 SXM")
    assert got["mfu_fp8_peak"] == pytest.approx(flops / (t * n * spec.peak_flops["fp8"]))
    assert got["mfu_bf16_peak"] == pytest.approx(flops / (t * n * spec.peak_flops["bf16"]))
    with pytest.raises(ValueError, match="fp8"):
        mfu.fp8_run_mfu(flops, t, n, "A100 80GB SXM")


# --------------------------------------------------------------------------- padding vs packing


def _simulate(lengths, seq_len):
    """Build both batches as tensors (0 = padding, 1 = a real token) and count."""
    padded = torch.zeros(len(lengths), seq_len, dtype=torch.int8)
    for row, n in enumerate(lengths):
        padded[row, :n] = 1
    stream = torch.ones(sum(lengths), dtype=torch.int8)
    rows = math.ceil(len(stream) / seq_len)
    packed = torch.zeros(rows * seq_len, dtype=torch.int8)
    packed[: len(stream)] = stream
    packed = packed.view(rows, seq_len)
    return padded, packed


def test_batch_layouts_match_built_batches():
    lengths, seq_len = mfu.example_lengths(40, 256, seed=3), 256
    padded, packed = _simulate(lengths, seq_len)
    got = mfu.batch_layouts(lengths, seq_len)
    for name, batch in (("padded", padded), ("packed", packed)):
        assert got[name]["rows"] == batch.shape[0]
        assert got[name]["tokens"] == batch.numel()
        assert got[name]["real"] == int(batch.sum())
        assert got[name]["useful"] == pytest.approx(int(batch.sum()) / batch.numel())


def test_example_lengths_are_seeded_and_in_range():
    a, b = mfu.example_lengths(50, 512, seed=1), mfu.example_lengths(50, 512, seed=1)
    assert a == b and all(1 <= x <= 512 for x in a)


def test_batch_layouts_reject_long_documents():
    with pytest.raises(ValueError, match="longer than seq_len"):
        mfu.batch_layouts([10, 2000], 1024)
    with pytest.raises(ValueError):
        mfu.batch_layouts([], 1024)


def test_useful_flops_count_each_document_at_its_own_length():
    lengths, n, layers, heads, hd = [5, 17, 300], 1e6, 2, 3, 8
    want = 6 * n * sum(lengths) + 12 * layers * heads * hd * sum(x * x for x in lengths)
    assert mfu.useful_model_flops(lengths, n, layers, heads, hd) == pytest.approx(want)
