"""The course model (helpers.models): sizes against hand counts, causality, determinism."""

import math

import pytest
import torch

from helpers import models


def test_gpt2_small_parameter_count_by_hand():
    d, L, V, T = 768, 12, 50304, 1024
    per_layer = (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d) + 2 * 2 * d
    by_hand = L * per_layer + 2 * d + V * d + T * d
    assert by_hand == 124_475_904
    cfg = models.get_config("gpt2-small")
    assert cfg.num_params() == by_hand
    assert cfg.flop_params() == by_hand - T * d
    assert cfg.head_dim == 64 and cfg.d_ff == 3072


@pytest.mark.parametrize("name", ["tiny", "small-cpu"])
def test_config_counts_match_the_built_model(name):
    cfg = models.get_config(name)
    model = models.build_model(cfg)
    assert models.num_params(model) == cfg.num_params()
    assert models.flop_params(model) == cfg.flop_params()
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    shapes = [(m.in_features, m.out_features) for m in linears] + [(cfg.d_model, cfg.vocab_size)]
    assert sorted(shapes) == sorted(cfg.linear_shapes())


def test_initial_loss_is_near_uniform_and_shapes():
    cfg = models.get_config("tiny")
    model = models.build_model(cfg)
    idx, targets = models.make_batch(cfg, 4)
    assert model(idx).shape == (4, cfg.seq_len, cfg.vocab_size)
    loss = model(idx, targets)
    assert loss.shape == () and abs(loss.item() - math.log(cfg.vocab_size)) < 0.2


def test_attention_is_causal():
    cfg = models.get_config("tiny")
    model = models.build_model(cfg).eval()
    idx, _ = models.make_batch(cfg, 1, seq_len=16)
    changed = idx.clone()
    changed[0, 10] = (changed[0, 10] + 1) % cfg.vocab_size
    with torch.no_grad():
        a, b = model(idx), model(changed)
    assert torch.equal(a[0, :10], b[0, :10])
    assert not torch.allclose(a[0, 10:], b[0, 10:])


def test_batch_is_deterministic_and_shifted():
    x1, y1 = models.make_batch("tiny", 3, seq_len=20, seed=5)
    x2, y2 = models.make_batch("tiny", 3, seq_len=20, seed=5)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert x1.shape == y1.shape == (3, 20)
    assert torch.equal(x1[:, 1:], y1[:, :-1])


def test_build_model_is_seeded_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = models.build_model("tiny", seed=1)
    after = torch.rand(1)
    b = models.build_model("tiny", seed=1)
    assert torch.equal(before, after)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_training_steps_reduce_loss_on_a_fixed_batch():
    cfg = models.get_config("tiny")
    step = models.make_train_step(models.build_model(cfg), models.make_batch(cfg, 4), lr=3e-3)
    losses = [step() for _ in range(8)]
    assert all(loss.requires_grad is False for loss in losses)
    assert losses[-1].item() < losses[0].item() - 0.1


def test_bf16_autocast_step_runs_on_cpu():
    cfg = models.get_config("tiny")
    step = models.make_train_step(
        models.build_model(cfg), models.make_batch(cfg, 2), autocast_dtype=torch.bfloat16
    )
    assert torch.isfinite(step())


def test_bad_configs_and_inputs():
    with pytest.raises(ValueError, match="divisible"):
        models.GPTConfig(d_model=10, n_heads=4)
    with pytest.raises(ValueError, match="positive whole number"):
        models.GPTConfig(n_layers=0)
    with pytest.raises(KeyError, match="known"):
        models.get_config("gpt-5")
    with pytest.raises(ValueError, match="seq_len"):
        models.make_batch("tiny", 2, seq_len=65)
    model = models.build_model("tiny")
    with pytest.raises(ValueError, match="exceeds"):
        model(torch.zeros(1, 65, dtype=torch.long))


def test_course_config_on_cpu_is_small():
    assert models.course_config("cpu", quick=True).name == "tiny"
    assert models.course_config("cpu", quick=False).num_params() < 2_000_000
    assert models.get_config("tiny", n_layers=3).n_layers == 3
