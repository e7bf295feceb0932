"""helpers.mfu against hand calculations (PaLM appendix B for the attention term)."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from helpers import hardware, mfu, models


def test_worked_report_example_by_hand():
    # 6 * 125e6 * (64 * 1024) / 0.42 s / (2 GPUs * 312e12) = 0.18754...
    by_hand = 6 * 125e6 * 65536 / 0.42 / (2 * 312e12)
    got = mfu.dense_transformer_mfu(
        params=125e6,
        global_batch_size=64,
        seq_len=1024,
        step_time_s=0.42,
        num_gpus=2,
        peak_tflops_per_gpu=312,
    )
    assert got["mfu"] == pytest.approx(by_hand, rel=1e-12) and round(got["mfu"], 4) == 0.1875
    assert got["tokens_per_step"] == 65536
    assert got["tokens_per_second"] == pytest.approx(65536 / 0.42, rel=1e-12)
    assert got["achieved_tflops"] == pytest.approx(6 * 125e6 * 65536 / 0.42 / 1e12, rel=1e-12)  # both GPUs
    text = mfu.example_report().format()
    assert "estimated_mfu: 18.8%" in text and "tokens_per_second: 156,038" in text
    assert "312 TFLOP/s" in text and "2x A100" in text


def test_formulas_by_hand():
    assert mfu.dense_model_flops(125e6, 1000) == 6 * 125e6 * 1000
    # GPT-2 small at T=1024: 12 * 12 layers * 12 heads * 64 * 1024 = 113,246,208 attention FLOPs/token
    assert mfu.attention_flops_per_token(12, 12, 64, 1024) == 113_246_208
    assert mfu.transformer_flops_per_token(1e8, 12, 12, 64, 1024) == 6e8 + 113_246_208
    assert mfu.tokens_per_step(8, 1024, grad_accum_steps=4, data_parallel=8) == 262_144
    assert mfu.mfu(1e15, 2.0, 4, 250e12) == pytest.approx(0.5)
    assert mfu.hfu(1.5e15, 2.0, 4, 250e12) == pytest.approx(0.75)
    rates = mfu.throughput(0.5, 8, 1024)
    assert rates == {"steps_per_s": 2.0, "samples_per_s": 16.0, "tokens_per_s": 16384.0}
    cfg = models.get_config("tiny")
    per_token = 6 * cfg.flop_params() + 12 * cfg.n_layers * cfg.d_model * 32
    assert mfu.model_flops_per_step(cfg, 4, 32) == per_token * 4 * 32


@pytest.mark.parametrize(
    "call",
    [
        lambda: mfu.mfu(1e12, 1.0, 0, 1e12),  # zero devices
        lambda: mfu.mfu(1e12, 0.0, 1, 1e12),  # zero time
        lambda: mfu.mfu(1e12, 1.0, 1.5, 1e12),  # fractional devices
        lambda: mfu.hfu(-1.0, 1.0, 1, 1e12),
        lambda: mfu.tokens_per_step(8, 0),
        lambda: mfu.dense_model_flops(float("inf"), 1),
    ],
)
def test_bad_inputs_raise_value_error(call):
    with pytest.raises(ValueError):
        call()


def test_bool_is_not_a_number():
    with pytest.raises(TypeError):
        mfu.mfu(True, 1.0, 1, 1e12)


def _attention_inputs(b=2, h=4, s=16, d=8, requires_grad=True):
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(b, h, s, d, generator=gen, requires_grad=requires_grad) for _ in range(3)]


def test_count_flops_counts_cpu_attention_forward_by_hand():
    q, k, v = _attention_inputs()
    got = mfu.count_flops(F.scaled_dot_product_attention, q, k, v, is_causal=True)
    assert got == 4 * 2 * 4 * 16 * 16 * 8  # QK^T and PV: 2·b·h·s·s·d each


def test_count_flops_attention_matches_the_math_path():
    # Independent check: the unfused (math) attention is plain bmm's, which every torch counts;
    # the fused CPU kernel is what our added formula counts. Each backend is forced, and the
    # operator names say which kernel ran.
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = _attention_inputs(s=24, d=16)
    with sdpa_kernel(SDPBackend.MATH):
        math_path = mfu.flop_breakdown(F.scaled_dot_product_attention, q, k, v)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        fused = mfu.flop_breakdown(F.scaled_dot_product_attention, q, k, v)
    assert set(math_path) == {"bmm"}
    assert set(fused) == {"_scaled_dot_product_flash_attention_for_cpu"}
    assert sum(fused.values()) == sum(math_path.values()) == 4 * 2 * 4 * 24 * 24 * 16


def test_count_flops_attention_backward_recomputes_scores():
    q, k, v = _attention_inputs()
    forward = 4 * 2 * 4 * 16 * 16 * 8
    breakdown = mfu.flop_breakdown(lambda: F.scaled_dot_product_attention(q, k, v).sum().backward())
    backward = {op: n for op, n in breakdown.items() if "backward" in op}
    assert sum(backward.values()) == forward * 10 // 4  # recompute QK^T + 4 products = 2.5 × forward


def test_count_flops_counts_attention_where_plain_counter_may_not():
    q, k, v = _attention_inputs(requires_grad=False)
    with FlopCounterMode(display=False) as plain:
        F.scaled_dot_product_attention(q, k, v)
    ours = mfu.count_flops(F.scaled_dot_product_attention, q, k, v)
    assert ours == 4 * 2 * 4 * 16 * 16 * 8
    assert plain.get_total_flops() in (0, ours)  # 0 on torch versions without the CPU formula


def test_count_flops_linear_forward_and_backward_by_hand():
    layer = torch.nn.Linear(32, 16)
    x = torch.randn(10, 32, requires_grad=True)
    assert mfu.count_flops(layer, x) == 2 * 10 * 32 * 16
    assert mfu.count_flops(lambda: layer(x).sum().backward()) == 6 * 10 * 32 * 16


@pytest.mark.parametrize(
    "overrides,batch,seq",
    [
        ({}, 8, 64),
        ({}, 3, 17),
        ({"n_layers": 3, "d_model": 48, "n_heads": 6, "vocab_size": 100}, 2, 40),
        ({"mlp_ratio": 2, "n_layers": 1}, 1, 64),
    ],
)
def test_counted_flops_formula_matches_the_counter(overrides, batch, seq):
    cfg = models.get_config("tiny", **overrides)
    step = models.make_train_step(models.build_model(cfg), models.make_batch(cfg, batch, seq))
    assert mfu.count_flops(step) == mfu.counted_flops_formula(cfg, batch, seq)


def test_counter_exceeds_formula_only_by_attention_recompute_and_non_matmul_params():
    cfg = models.get_config("tiny")
    b, s = 8, 64
    counted = mfu.counted_flops_formula(cfg, b, s)
    formula = mfu.model_flops_per_step(cfg, b, s)
    weights = sum(i * o for i, o in cfg.linear_shapes())
    non_matmul = cfg.flop_params() - weights  # biases and norms
    recompute = 2 * cfg.n_layers * b * s * s * cfg.d_model
    assert counted - formula == recompute - 6 * non_matmul * b * s


@pytest.mark.parametrize("bug", mfu.MFU_BUGS)
def test_claims_round_trip(bug):
    setup = dict(activation_checkpointing=True, model_parallel=4)
    claim = mfu.make_claim(bug, **setup)
    assert mfu.claim_problem(claim) == bug
    truth = mfu.true_mfu(claim)
    assert truth == pytest.approx(mfu.true_mfu(mfu.make_claim("none", **setup)))
    factor = {
        "none": 1,
        "sparse_peak": 0.5,
        "one_device": 8,
        "max_seq_len": 2,
        "grad_accum": 0.25,
        "mp_tokens": 4,
        "recompute": 8 / 6,
    }[bug]  # defaults: 8 devices, seq 1024 of 2048, accum 4
    assert claim.claimed_mfu == pytest.approx(truth * factor)


def test_only_data_parallel_replicas_multiply_the_tokens():
    # 16 devices, tensor parallel 4 -> 4 replicas see different data; all 16 are in the denominator
    c = mfu.make_claim(
        "none",
        params=1e9,
        micro_batch_size=2,
        seq_len=2048,
        grad_accum_steps=1,
        num_devices=16,
        model_parallel=4,
        step_time_s=1.0,
        gpu="H100 SXM",
    )
    assert c.data_parallel == 4 and c.tokens_per_step == 2 * 2048 * 4
    assert mfu.true_mfu(c) == pytest.approx(6e9 * 2 * 2048 * 4 / (16 * 989.5e12))
    with pytest.raises(ValueError, match="multiple"):
        mfu.make_claim("none", num_devices=6, model_parallel=4)
    with pytest.raises(ValueError, match="same token count"):  # max_seq 2x = model parallel 2x
        mfu.make_claim("mp_tokens", model_parallel=2, max_seq_len=2048, seq_len=1024)


def test_published_mfu_figures():
    by_run = {p.run.split(",")[0]: p for p in mfu.PUBLISHED_MFU}
    assert by_run["PaLM 540B"].mfu_low == 0.462 and "Table 3" in by_run["PaLM 540B"].source
    assert (by_run["Llama 3 405B"].mfu_low, by_run["Llama 3 405B"].mfu_high) == (0.38, 0.43)
    assert "46.2%" in str(by_run["PaLM 540B"]) and "38%–43%" in str(by_run["Llama 3 405B"])


def test_true_mfu_by_hand_and_example_claims():
    c = mfu.make_claim(
        "none",
        params=100_000_000,
        micro_batch_size=2,
        seq_len=512,
        grad_accum_steps=3,
        num_devices=4,
        step_time_s=0.5,
        gpu="H100 SXM",
        dtype="bf16",
    )
    by_hand = 6 * 100e6 * (2 * 512 * 3 * 4) / (0.5 * 4 * 989.5e12)
    assert mfu.true_mfu(c) == pytest.approx(by_hand)
    claims = mfu.example_claims()
    assert [mfu.claim_problem(c) for c in claims] == [
        "sparse_peak",
        "one_device",
        "none",
        "max_seq_len",
        "grad_accum",
        "mp_tokens",
        "recompute",
    ]
    assert all(0.3 < mfu.true_mfu(c) < 0.5 for c in claims)  # plausible runs behind each claim


def test_make_claim_refuses_a_bug_that_leaves_no_trace():
    with pytest.raises(ValueError, match="no trace"):
        mfu.make_claim("grad_accum", grad_accum_steps=1)
    with pytest.raises(ValueError, match="no trace"):
        mfu.make_claim("recompute")
    with pytest.raises(ValueError, match="unknown bug"):
        mfu.make_claim("typo")


def test_device_peak_on_cpu_is_measured_and_says_so():
    peak = mfu.device_peak("cpu", "fp32")
    assert peak.kind == "measured" and peak.flops > 0 and peak.dtype == "fp32"
    assert "MEASURED" in peak.describe() and "GEMM" in peak.source


def test_measure_training_mfu_and_hfu_follow_their_definitions():
    fixed = mfu.Peak(1e12, "fp32", "measured", "fixed figure for the test")
    run = mfu.measure_training("tiny", batch_size=2, seq_len=32, device="cpu", warmup=1, iters=3, peak=fixed)
    cfg = run.config
    assert run.tokens_per_step == 64 and len(run.step.samples) == 3
    assert run.model_flops_per_step == mfu.model_flops_per_step(cfg, 2, 32)
    assert run.executed_flops_per_step == mfu.counted_flops_formula(cfg, 2, 32)
    assert run.mfu == pytest.approx(run.model_flops_per_step / run.step.median / 1e12)
    assert run.hfu == pytest.approx(run.executed_flops_per_step / run.step.median / 1e12)
    text = run.report().format()
    for field in ("step_time_median", "tokens_per_step: 64", "tokens_per_second", "estimated_mfu", "hfu"):
        assert field in text


def test_benchmark_command_prints_tokens_mfu_and_hfu(capsys):
    mfu.main(["--device", "cpu", "--batch", "2", "--seq", "16", "--iters", "2", "--warmup", "1"])
    out = capsys.readouterr().out
    assert "tokens/s" in out and "MFU" in out and "HFU" in out and "MEASURED" in out


def test_peaks_for_gpus_come_from_the_table():
    # on CPU we cannot detect a GPU; the datasheet path is the table's dense figure
    a100 = hardware.get_device("A100 80GB SXM")
    assert a100.peak("bf16") == 312e12
    if torch.cuda.is_available() and hardware.detect_gpu() is not None:
        peak = mfu.device_peak("cuda", "bf16")
        assert peak.kind == "datasheet" and peak.flops == hardware.detect_gpu().peak("bf16")


def test_noisy_runs_say_so_in_the_report():
    from helpers.bench import Measurement

    cfg = models.get_config("tiny")
    quiet = Measurement([0.10, 0.11, 0.12], 0.3, "cpu")
    noisy = Measurement([0.05, 0.10, 0.30], 0.3, "cpu")
    peak = mfu.Peak(1e12, "fp32", "measured", "test", spread=0.9)
    steady = mfu.Peak(1e12, "fp32", "measured", "t", 0.1)
    run = mfu.TrainingRun(cfg, 8, 64, "cpu", None, quiet, 1e9, 10**9, steady, "CPU")
    assert run.warnings() == []
    run = mfu.TrainingRun(cfg, 8, 64, "cpu", None, noisy, 1e9, 10**9, peak, "CPU")
    assert len(run.warnings()) == 2 and "busy machine" in run.report().format()


@pytest.mark.parametrize(
    "argv,message",
    [(["--batch", "0"], "batch_size must be >= 1"), (["--config", "nope"], "unknown model config 'nope'")],
)
def test_benchmark_command_bad_input_is_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as done:
        mfu.main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2 and message in err and "Traceback" not in err


def _sweep_rows(times_by_len):
    from helpers.mfu import throughput

    rows = []
    for seq, times in times_by_len.items():
        batch = 512 // seq
        t = sorted(times)[len(times) // 2]
        rows.append(
            {
                "seq_len": seq,
                "batch_size": batch,
                "step_time_s": t,
                "step_times_s": times,
                "step_time_min_s": min(times),
                "step_time_max_s": max(times),
                **throughput(t, batch, seq),
            }
        )
    return rows


def test_compare_sweep_reads_a_verdict_from_the_rounds():
    from helpers import mfu

    same = _sweep_rows({16: [0.10, 0.13, 0.09, 0.12, 0.11], 64: [0.11, 0.10, 0.12, 0.10, 0.13]})
    assert "beyond the noise" in mfu.compare_sweep(same)
    twice = _sweep_rows({16: [0.20, 0.21, 0.19, 0.22, 0.20, 0.2], 64: [0.10, 0.105, 0.095, 0.11, 0.1, 0.1]})
    line = mfu.compare_sweep(twice)
    assert line.startswith("seq 64 trains faster than seq 16") and "6 rounds" in line
    # every length against the first, a pair fixed before timing (not the best against the worst)
    three = _sweep_rows(
        {16: [0.2] * 6, 32: [0.1, 0.11, 0.09, 0.1, 0.1, 0.1], 64: [0.21, 0.19, 0.2, 0.2, 0.2, 0.2]}
    )
    lines = mfu.compare_sweep(three).splitlines()
    assert lines[0].startswith("seq 32 trains faster than seq 16")
    assert lines[1].startswith("no difference between seq 64 and seq 16")
    low, high = (float(x.rstrip("x")) for x in line.split("interval ")[1].split(")")[0].split(" to "))
    assert low <= 2.0 <= high
    # five rounds, all 2x: too few for a 95 % interval, so no verdict
    five = _sweep_rows({16: [0.2] * 5, 32: [0.1] * 5})
    assert mfu.compare_sweep(five).startswith("no difference between seq 32 and seq 16")
    with pytest.raises(ValueError, match="rows of one sweep_seq_lens run"):
        mfu.compare_sweep(same[:1])
