"""Chapter 10: FSDP2 on real gloo ranks (bytes held, shards, losses), FSDP read on a timeline,
and the shipped example traces; each against numbers worked out here."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from conftest import ROOT

from helpers.distributed._fsdp import fsdp_bytes_per_step, record_fsdp
from helpers.distributed._fsdp_compare import compare_fsdp
from helpers.distributed._fsdp_trace import (
    EXAMPLE_SETTINGS,
    EXAMPLE_SLOW_S,
    collectives_by_step,
    compare_prefetch,
    example_traces,
    exposed_by_rank,
    first_gather_exposed,
    fsdp_intervals,
    gather_exposure,
    plot_fsdp,
    waiting_rank,
)
from helpers.distributed._launch import run_ranks
from helpers.distributed._shards import ledger_share, rank_state_bytes, shard_rows

# ---------------------------------------------------------------- shard arithmetic


def test_shard_rows_is_torch_chunk_padded_with_empty_shards():
    for rows in range(0, 41):
        for n in range(1, 9):
            chunks = torch.chunk(torch.empty(rows), n) if rows else ()
            for r in range(n):
                want = chunks[r].shape[0] if r < len(chunks) else 0
                assert shard_rows(rows, n, r) == want, (rows, n, r)
    assert [shard_rows(5, 4, r) for r in range(4)] == [2, 2, 1, 0]  # torch.chunk gives 3 chunks
    assert [shard_rows(6, 4, r) for r in range(4)] == [2, 2, 2, 0]
    assert [shard_rows(1, 3, r) for r in range(3)] == [1, 0, 0]
    with pytest.raises(ValueError, match=r"rank must be in 0\.\.1"):
        shard_rows(4, 2, 2)


def test_rank_state_bytes_and_the_ledger_by_hand():
    shapes = [(5, 7), (5,), (3, 5), (3,)]  # 35 + 5 + 15 + 3 = 58 parameters
    # rank 0 holds rows 3, 3, 2, 2: 21 + 3 + 10 + 2 = 36 elements; rank 1 rows 2, 2, 1, 1: 22
    assert rank_state_bytes(shapes, 2, 0) == {
        "parameters": 144,
        "gradients": 144,
        "optimizer_state": 288,  # exp_avg and exp_avg_sq, fp32
        "total": 576,
    }
    assert rank_state_bytes(shapes, 2, 1) == {
        "parameters": 88,
        "gradients": 88,
        "optimizer_state": 176,
        "total": 352,
    }
    # padded as FSDP2 stores them: every rank a full chunk of 3, 3, 2, 2 rows
    assert rank_state_bytes(shapes, 2, 1, padded=True)["parameters"] == 144
    assert rank_state_bytes(shapes, 2, 1, padded=True)["optimizer_state"] == 176
    assert rank_state_bytes(shapes, 2, 0, optimizer="sgd")["optimizer_state"] == 0
    assert rank_state_bytes([(4, 2)], 2, 0, dtype_bytes=2)["total"] == 2 * 4 * 4  # 4 elements x 2 B x 4
    # chapter 5's ledger splits the whole model evenly: 58 x 4 B = 232 B -> 116 per rank
    assert ledger_share(58, 2) == {"parameters": 116, "gradients": 116, "optimizer_state": 232, "total": 464}
    with pytest.raises(ValueError, match="0-dim"):
        rank_state_bytes([()], 2, 0)


def _local_rows(rank, world_size, device, shapes):
    """Rank target: the dim-0 size of each parameter's local shard under fully_shard."""
    from torch.distributed.fsdp import fully_shard

    module = torch.nn.Module()
    for i, shape in enumerate(shapes):
        module.register_parameter(f"p{i}", torch.nn.Parameter(torch.ones(shape)))
    fully_shard(module)
    return {"rows": [p.to_local().shape[0] for p in module.parameters()]}


@pytest.mark.parametrize("world_size", [2, 3])
def test_shard_rows_against_real_fully_shard(world_size):
    shapes = [[7, 3], [5], [1, 4], [2], [9, 2], [4]]  # uneven, fewer rows than ranks, even
    ranks = run_ranks(f"{__name__}:_local_rows", world_size, shapes=shapes, timeout_s=120)
    for r, got in enumerate(ranks):
        assert got["rows"] == [shard_rows(s[0], world_size, r) for s in shapes]
    if world_size == 3:  # written out: chunk = ceil(rows / 3)
        assert [g["rows"] for g in ranks] == [[3, 2, 1, 1, 3, 2], [3, 2, 0, 1, 3, 2], [1, 1, 0, 0, 3, 0]]


# ---------------------------------------------------------------- real ranks


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    """2 blocks of Linear(7, 7): 7 rows split 4 / 3 over 2 ranks."""
    return record_fsdp(tmp_path_factory.mktemp("uneven"), layers=2, width=7, batch=4, steps=2)


def test_bytes_held_per_rank_are_the_shard_sizes(uneven):
    # per block: weight 7 x 7 and bias 7; rank 0 holds 4 rows (28 + 4 = 32 elements), rank 1
    # 3 rows (21 + 3 = 24); FSDP2 stores both ranks' parameters and gradients padded to 4 rows
    elements = [2 * 32, 2 * 24]
    padded = 2 * 32
    for r, held in enumerate(uneven.held):
        assert held["parameters"] == 4 * padded
        assert held["gradients"] == 4 * padded
        assert held["parameters_unpadded"] == 4 * elements[r]
        assert held["optimizer_state"] == 2 * 4 * elements[r]  # exp_avg + exp_avg_sq, fp32
        assert held["step_scalars"] == 4 * 4  # one 4-byte step tensor per parameter, not sharded
        assert held["total"] == 2 * 4 * padded + 2 * 4 * elements[r]
        assert held["unsharded_after_forward"] == 0  # resharded after the forward
    assert uneven.full["n_params"] == 2 * (49 + 7)
    assert uneven.held[0]["parameters_unpadded"] + uneven.held[1]["parameters_unpadded"] == 4 * 112
    text = str(uneven)
    assert "ledger/n" in text and "padded r1" in text


def test_losses_match_one_process_on_the_whole_batch(uneven):
    # the same model and data, written out: 2 ranks x batch 4 rows per step, 4 steps
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        *[torch.nn.Sequential(torch.nn.Linear(7, 7), torch.nn.ReLU()) for _ in range(2)]
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 8, 7, generator=g)
    y = torch.randn(4, 8, 7, generator=g)
    want = []
    for i in range(4):
        loss = torch.nn.functional.mse_loss(model(x[i]), y[i])
        loss.backward()
        opt.step()
        opt.zero_grad()
        want.append(loss.item())
    got = [(a + b) / 2 for a, b in zip(*uneven.losses, strict=True)]
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert uneven.losses[0] != uneven.losses[1]  # each rank saw its own rows


def test_kept_parameters_and_bf16_show_in_the_bytes(tmp_path):
    run = record_fsdp(
        tmp_path, layers=2, width=7, batch=4, steps=1, reshard_after_forward=False, mixed_precision=True
    )
    for held in run.held:
        # after the forward each block keeps its gathered bf16 parameters, padded: (8 x 7 + 8) x 2 B
        assert held["unsharded_after_forward"] == 2 * (8 * 7 + 8) * 2
        assert held["parameters"] == 2 * 32 * 4  # the shards stay fp32
    steps = run.collectives[0]
    assert len(steps) == 1
    # no re-gather in the backward: one all-gather per block, of bf16 (2 bytes) shards
    assert steps[0]["c10d"]["all_gather"] == {
        "count": 2,
        "output_bytes": 2 * 64 * 2,
        "input_bytes": 2 * 32 * 2,
    }
    assert steps[0]["c10d"]["reduce_scatter"]["count"] == 2


def test_compare_fsdp_puts_memory_beside_speed():
    result = compare_fsdp(
        {"resharded": {}, "kept": {"reshard_after_forward": False}},
        "resharded",
        rounds=3,
        layers=2,
        width=8,
        batch=4,
    )
    assert set(result.comparisons) == {"kept"}
    assert result.comparisons["kept"].verdict in ("faster", "slower", "within noise")
    assert len(result.samples["resharded"]) == len(result.samples["kept"]) == 3
    # 2 blocks of 8 x 8 + 8 = 144 parameters, 72 per rank: 288 B of parameters, 288 of
    # gradients, 576 of AdamW states; the kept setting holds all 144 gathered fp32 parameters
    for name in ("resharded", "kept"):
        assert [h["total"] for h in result.held[name]] == [288 + 288 + 576] * 2
    assert [h["unsharded_after_forward"] for h in result.held["kept"]] == [144 * 4] * 2
    assert [h["unsharded_after_forward"] for h in result.held["resharded"]] == [0, 0]
    assert "unsharded KiB: in fwd" in str(result) and "after fwd" in str(result)


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ValueError, match="did you mean 'block'"):
        record_fsdp(wrap="blocks")
    with pytest.raises(ValueError, match="prefetch=True needs wrap='block'"):
        record_fsdp(wrap="model", prefetch=True)
    with pytest.raises(TypeError, match="reshard_after_forward must be True or False"):
        record_fsdp(reshard_after_forward="no")
    with pytest.raises(ValueError, match=r"slow_rank must be a rank in 0\.\.1"):
        record_fsdp(slow_rank=2)
    with pytest.raises(ValueError, match="setting option"):
        compare_fsdp({"a": {"bucket": 1}, "b": {}}, "a")
    with pytest.raises(ValueError, match="unknown baseline"):
        compare_fsdp({"a": {}, "b": {}}, "c")


# ---------------------------------------------------------------- bytes on the wire


def test_bytes_per_step_written_out():
    # a ring of 4: each rank sends 3/4 of the full size in an all-gather or a reduce-scatter
    assert fsdp_bytes_per_step(1000, 4) == {
        "forward_all_gather": 750,
        "backward_all_gather": 750,
        "reduce_scatter": 750,
        "total": 2250,
    }
    kept = fsdp_bytes_per_step(1000, 4, reshard_after_forward=False, grad_bytes=2000)
    assert kept == {
        "forward_all_gather": 750,
        "backward_all_gather": 0,
        "reduce_scatter": 1500,
        "total": 2250,
    }
    assert fsdp_bytes_per_step(1000, 1)["total"] == 0


# ---------------------------------------------------------------- the shipped traces

PARAM_BYTES = 4 * 4 * (256 * 256 + 256)  # 4 blocks of Linear(256, 256), fp32: 1,052,672 bytes


def test_shipped_traces_have_two_gathers_per_block_per_step():
    layers = EXAMPLE_SETTINGS["layers"]
    for name in ("fsdp_prefetch", "fsdp_no_prefetch", "fsdp_one_slow"):
        paths = example_traces(name)
        assert len(paths) == 2 and all(p.stat().st_size < 150_000 for p in paths)
        for path in paths:
            iv = fsdp_intervals(path)
            assert len(iv["steps"]) == EXAMPLE_SETTINGS["steps"]
            for step in iv["steps"]:
                # the root owns no parameters: no unit of its own; each block gathers in the forward
                # and again in the backward (resharded after the forward)
                assert len(step["all_gather"]) == 2 * layers
                assert len(step["fsdp_all_gather"]) == 2 * layers
                assert sorted(r["unit"] for r in step["fsdp_all_gather"]) == sorted(["0", "1", "2", "3"] * 2)
                assert len(step["reduce_scatter"]) == layers  # gloo:all_reduce events
                assert (
                    step["start_us"] < step["forward_start_us"] < step["backward_start_us"] < step["end_us"]
                )
            for step in collectives_by_step(path):
                gathers, reduces = step["c10d"]["all_gather"], step["c10d"]["reduce_scatter"]
                assert gathers == {"count": 8, "output_bytes": 2 * PARAM_BYTES, "input_bytes": PARAM_BYTES}
                assert reduces == {"count": 4, "output_bytes": PARAM_BYTES // 2, "input_bytes": PARAM_BYTES}
    # what the ring formula says each rank sends for those gathers: (2 - 1) / 2 of the output
    sent = fsdp_bytes_per_step(PARAM_BYTES, 2)
    assert sent["forward_all_gather"] + sent["backward_all_gather"] == PARAM_BYTES


def test_shipped_traces_pass_the_recording_checks():
    spec = importlib.util.spec_from_file_location(
        "record_fsdp", ROOT / "scripts" / "record_distributed_traces.py"
    )
    record = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(record)
    for name in record.RUNS:
        assert record.problems(name, example_traces(name), EXAMPLE_SETTINGS["layers"]) == []


def test_the_slow_rank_is_found_by_who_waits():
    ivs = [fsdp_intervals(p) for p in example_traces("fsdp_one_slow")]
    waits = exposed_by_rank(ivs)
    fast = waiting_rank(ivs)
    assert waits[fast] - waits[1 - fast] >= 0.7 * EXAMPLE_SLOW_S * 1e3


def test_prefetch_comparison_and_first_gather_are_consistent():
    effect = compare_prefetch(example_traces("fsdp_prefetch"), example_traces("fsdp_no_prefetch"))
    for key in ("prefetch", "no_prefetch"):
        part = effect[key]
        assert (
            part["first"] >= 0 and part["total"] <= part["first"] + part["forward"] + part["backward"] + 1e-9
        )
    assert effect["saved"]["total"] == pytest.approx(
        effect["no_prefetch"]["total"] - effect["prefetch"]["total"]
    )
    path = example_traces("fsdp_no_prefetch")[0]
    assert first_gather_exposed(path) == gather_exposure(path)["first"] > 0


def test_plot_adds_an_fsdp_lane_per_rank():
    import matplotlib.pyplot as plt

    from helpers.timeline import load_trace

    traces = load_trace(example_traces("fsdp_prefetch"))
    ax = plot_fsdp(traces)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[-2:] == ["rank 0 · FSDP ranges", "rank 1 · FSDP ranges"]
    plt.close(ax.figure)


# ---------------------------------------------------------------- a timeline built by hand


def test_exposed_communication_of_two_constructed_ranks():
    def step(all_gather, reduce_scatter, compute, backward_start_us=None):
        return {
            "all_gather": all_gather,
            "reduce_scatter": reduce_scatter,
            "compute": compute,
            "backward_start_us": backward_start_us,
        }

    ranks = {
        # comm 0-10 and 30-40 under compute 5-35: exposed 0-5 and 35-40 = 10 µs
        0: {"rank": 0, "steps": [step([(0, 10)], [(30, 40)], [(5, 35)])]},
        # comm 0-20 and 20-25 (one stretch of 25 µs), compute 10-15 under it: exposed 20 µs;
        # a second step with nothing hidden: 6 µs; mean (20 + 6) / 2 = 13 µs
        1: {"rank": 1, "steps": [step([(0, 20)], [(20, 25)], [(10, 15)]), step([(0, 4), (2, 6)], [], [])]},
    }
    assert exposed_by_rank(ranks) == pytest.approx({0: 0.010, 1: 0.013})
    assert waiting_rank(ranks) == 1
    assert exposed_by_rank(list(ranks.values())) == pytest.approx({0: 0.010, 1: 0.013})
    # gathers: 0-4 (first, bare), 6-10 half under compute 8-20, 30-34 in the backward, bare
    one = {"rank": 0, "steps": [step([(6, 10), (0, 4), (30, 34)], [], [(8, 20)], backward_start_us=25)]}
    assert gather_exposure(one) == pytest.approx(
        {"first": 0.004, "forward": 0.002, "backward": 0.004, "total": 0.010}
    )


def test_example_traces_names():
    with pytest.raises(ValueError, match="did you mean 'fsdp_prefetch'"):
        example_traces("fsdp_prefech")
