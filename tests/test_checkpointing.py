"""helpers.checkpointing: plans applied and undone, saved bytes and recomputed FLOPs against
measurement, gradients with and without (dropout, RNG state), attention's share, choices."""

from __future__ import annotations

import pytest
import torch

from helpers import checkpointing as ck
from helpers import memory, mfu, models


def test_plan_modes():
    assert ck.plan_modes("none", 3) == ["none"] * 3
    assert ck.plan_modes("every", 3) == ["full"] * 3 == ck.plan_modes("every:1", 3)
    assert ck.plan_modes("every:2", 5) == ["full", "none", "full", "none", "full"]
    assert ck.plan_modes("every:4", 5) == ["full", "none", "none", "none", "full"]
    assert ck.plan_modes(" Selective ", 2) == ["selective"] * 2
    for bad in ("every:0", "every:x", "half", "every:-1"):
        with pytest.raises(ValueError, match="unknown plan"):
            ck.plan_modes(bad, 4)


def test_apply_and_remove_change_nothing_but_what_is_kept():
    cfg = models.get_config("tiny")
    model = models.build_model(cfg)
    idx, targets = models.make_batch(cfg, 2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    plain = model(idx, targets)
    for plan in ("every", "every:2", "selective"):
        ck.apply(model, plan)
        assert ck.current_plan(model) == plan
        torch.testing.assert_close(model(idx, targets), plain, rtol=0, atol=0)
    ck.remove(model)
    assert ck.current_plan(model) == "none" and not any("forward" in b.__dict__ for b in model.blocks)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    with ck.applied(model, "every"):
        assert all("forward" in b.__dict__ for b in model.blocks)
    assert ck.current_plan(model) == "none"


def test_apply_needs_blocks():
    with pytest.raises(TypeError, match=r"has no \.blocks"):
        ck.apply(torch.nn.Linear(2, 2), "every")
    with pytest.raises(TypeError, match="attend"):
        ck.apply(torch.nn.Linear(2, 2), "selective", blocks=[torch.nn.Linear(2, 2)])
    layers = [torch.nn.Linear(4, 4) for _ in range(3)]
    ck.apply(torch.nn.Sequential(*layers), "every:2", blocks=layers)
    assert ["forward" in m.__dict__ for m in layers] == [True, False, True]


CONFIGS = [
    ({}, 2, 32),
    ({"attention": "math", "n_layers": 4}, 3, 40),
    ({"attention": "math", "dropout": 0.1, "n_layers": 3}, 2, 16),
]


@pytest.mark.parametrize("overrides,b,s", CONFIGS)
def test_saved_bytes_and_recomputed_flops_match_measurement(overrides, b, s):
    cfg = models.get_config("tiny", **overrides)
    idx, targets = models.make_batch(cfg, b, s)
    base = None
    for plan in ("none", "every", "every:2", "every:3", "selective"):
        model = ck.apply(models.build_model(cfg), plan)
        saved = memory.saved_tensor_bytes(lambda m=model: m(idx, targets)).activations
        assert saved == ck.predicted_saved_bytes(cfg, b, s, plan), plan
        counted = mfu.count_flops(lambda m=model: m(idx, targets).backward())
        base = counted if base is None else base
        assert counted - base == ck.recompute_flops(cfg, b, s, plan), plan


def test_checkpointed_block_keeps_its_input_only():
    cfg = models.get_config("tiny")
    assert memory.block_saved_bytes(cfg, 4, 64, "full") == 4 * 4 * 64 * cfg.d_model
    # without dropout the block's last matmul is not rerun (early stop); with dropout it is
    nodrop = ck.recompute_flops_per_block(cfg, 4, 64, "full")
    assert nodrop == ck.block_forward_flops(cfg, 4, 64) - 2 * 4 * 64 * cfg.d_ff * cfg.d_model
    drop = models.get_config("tiny", dropout=0.1)
    assert ck.recompute_flops_per_block(drop, 4, 64, "full") == ck.block_forward_flops(drop, 4, 64)


def test_tracked_step_with_a_plan_matches_the_prediction():
    cfg = models.get_config("gpt2-small", n_layers=2)
    for plan in ("none", "every"):
        step = memory.track(lambda p=plan: ck.apply(models.TinyGPT(cfg), p), batch_size=4, seq_len=256)
        want = ck.predicted_saved_bytes(cfg, 4, 256, plan) - 16 * 4 * 256 + 4  # ids are inputs; the loss
        assert step.steps[-1].after_forward["activations"] == want


@pytest.mark.parametrize(
    "plan,dropout,preserve,training,same",
    [
        ("every", 0.0, True, True, True),
        ("every", 0.1, True, True, True),
        ("every", 0.1, False, True, False),  # the recomputed forward draws other dropout masks
        ("selective", 0.1, False, True, False),
        ("every:2", 0.1, False, False, True),  # eval mode: no dropout, nothing random
        ("none", 0.1, False, True, True),
    ],
)
def test_gradients_with_and_without_checkpointing(plan, dropout, preserve, training, same):
    result = ck.check_gradients("tiny", plan, dropout=dropout, preserve_rng_state=preserve, training=training)
    assert result.matches is same
    assert (result.max_abs_diff == 0) is same
    assert ("same gradients" if same else "DIFFERENT") in str(result)


def test_attention_share_rule_of_thumb_against_measurement():
    assert ck.attention_share_formula(4096, 4096) == pytest.approx(1 / 3)
    # fp32, no dropout: the core keeps a·s²·b·4 bytes, the block 16·4·s·b·h more (small terms aside)
    for s, h, a in [(512, 512, 8), (1024, 256, 4), (256, 1024, 32)]:
        measured = ck.measured_attention_share(s, h, a)
        assert measured == pytest.approx(a * s / (16 * h + a * s), rel=2e-3)
    assert ck.measured_attention_share(512, 512, 8) == pytest.approx(
        ck.attention_share_formula(512, 512), rel=2e-3
    )  # equal only for 8 heads
    assert ck.korthikanti_attention_share(4096, 4096, 32) == pytest.approx(160 / 194)


def test_choose_plan_fits_the_budget_with_least_recompute():
    cfg = models.get_config("tiny", attention="math", n_layers=6, seq_len=256)
    rows = {p: ck.estimate(cfg, 4, 256, p) for p in ck.MENU}
    for budget in sorted({r["saved_bytes"] for r in rows.values()}):
        plan = ck.choose_plan(cfg, 4, 256, budget)
        fitting = {p: r for p, r in rows.items() if r["saved_bytes"] <= budget}
        assert plan in fitting
        assert rows[plan]["recompute_flops"] == min(r["recompute_flops"] for r in fitting.values())
    assert ck.choose_plan(cfg, 4, 256, min(r["saved_bytes"] for r in rows.values()) - 1) is None
    assert ck.choose_plan(cfg, 4, 256, 10**12) == "none"


def test_utilization_counts_recompute_in_hfu_only():
    cfg = models.get_config("gpt2-small")
    none = ck.utilization(cfg, 8, 1024, "none", 0.5, 312e12)
    every = ck.utilization(cfg, 8, 1024, "every", 0.5, 312e12, num_devices=1)
    assert none["mfu"] == none["hfu"] == every["mfu"]
    model_flops = mfu.model_flops_per_step(cfg, 8, 1024)
    extra = ck.recompute_flops(cfg, 8, 1024, "every") / model_flops
    assert every["hfu"] / every["mfu"] == pytest.approx(1 + extra)


def test_compare_plans_on_the_cpu():
    rows = ck.compare_plans("tiny", 2, 32, ["none", "every"], iters=2, warmup=1)
    assert [r.plan for r in rows] == ["none", "every"]
    assert all(r.saved_bytes == r.predicted_bytes and r.cuda_peak is None for r in rows)
    assert rows[1].saved_bytes < rows[0].saved_bytes and rows[1].executed_flops > rows[0].executed_flops
    assert rows[0].vs_none is None and rows[1].vs_none.names == ("none", "every")
    assert rows[1].step is rows[1].vs_none.tuned and rows[0].step is rows[1].vs_none.baseline
    text = ck.format_plans(rows)
    assert text.count("\n") == 3 and "every" in text and "(the baseline)" in text
    assert f"[{rows[1].vs_none.low:.2f}, {rows[1].vs_none.high:.2f}] {rows[1].vs_none.verdict}" in text


def test_spelled_out_attention_and_dropout_in_eval_mode_change_no_output():
    cfg = models.get_config("tiny")
    idx, _ = models.make_batch(cfg, 2)
    fused = models.build_model(cfg).eval()
    for overrides in ({"attention": "math"}, {"attention": "math", "dropout": 0.3}, {"dropout": 0.3}):
        other = models.build_model(models.get_config("tiny", **overrides)).eval()
        with torch.no_grad():
            torch.testing.assert_close(other(idx), fused(idx), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"unknown GPTConfig\.attention 'flash'; choose one of: sdpa, math"):
        models.get_config("tiny", attention="flash")
    with pytest.raises(ValueError, match="dropout must be a probability"):
        models.get_config("tiny", dropout=1.0)


# --------------------------------------------------------------------------- in practice


def test_checkpointing_every_sub_layer_keeps_more_for_the_same_recomputation():
    none, block, sub = ck.granularity("tiny", batch=2)
    cfg = models.get_config("tiny")
    sbh = 2 * cfg.seq_len * cfg.d_model
    # a block keeps its input; per sub-layer the MLP path's input is kept too: 4·sbh more per block
    assert sub.saved_bytes - block.saved_bytes == cfg.n_layers * 4 * sbh
    assert sub.peak_bytes < block.peak_bytes < none.peak_bytes  # one sub-layer recomputed at a time
    assert none.executed_flops < sub.executed_flops <= block.executed_flops


def test_a_selective_policy_saves_the_matmuls_and_recomputes_no_matmul():
    rows = {r.name: r for r in ck.selective_policy("tiny", batch=2)}
    policy, none, block = rows["policy: save matmuls"], rows["none"], rows["every block"]
    assert block.saved_bytes < policy.saved_bytes < none.saved_bytes
    assert policy.executed_flops == none.executed_flops  # matmul outputs saved, never recomputed


def test_a_lower_activation_memory_budget_saves_less():
    saved = ck.memory_budget("tiny", batch=2, budgets=(1.0, 0.5, 0.0))
    assert saved[1.0] > saved[0.5] > saved[0.0]
    with pytest.raises(ValueError, match="share between 0 and 1"):
        ck.memory_budget("tiny", budgets=(1.5,))


def test_the_selective_policy_saves_fused_attention_of_every_backend():
    """A GPU may dispatch attention to flash, memory-efficient or cuDNN kernels (an H100 can pick
    cuDNN): the policy saves every fused attention op this torch has, not only the CPU's."""
    import torch

    forward = {n for n in dir(torch.ops.aten) if n.startswith("_scaled_dot_product") and "backward" not in n}
    forward -= {n for n in forward if n.startswith("_scaled_dot_product_attention_math")}
    assert {"_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention"} <= forward
    assert forward <= set(ck.MATMULS)
    assert not any("backward" in n for n in ck.MATMULS)
