"""The EXAMPLE data in nsys's formats shipped in ``helpers/data``: where it is, what each
scenario's synthetic workload is, and the note every table read from it carries.

The files are written by the course's ``scripts/make_nsys_examples.py`` (which imports this
module for the note and the descriptions); the package only reads them.
"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"

EXAMPLE_NOTE = (
    "SYNTHETIC EXAMPLE written by the course's scripts/make_nsys_examples.py in the layout "
    "of Nsight Systems output; it is not a real capture. Durations are invented; see "
    "helpers/data/nsys_example_README.md"
)

#: The synthetic workload of each example scenario (the generator simulates exactly this).
DESCRIPTIONS = {
    "compute": (
        "a 4-layer GPT-style transformer in bf16 on an A100 80GB SXM (d_model 1024, 16 heads, MLP 4096, "
        "vocabulary 32000, flash attention, fused Adam), batch 8 x 1024 tokens; token ids (1 MiB) copied "
        "host-to-device from pinned memory each step; ~100 kernels per step"
    ),
    "memcpy": (
        "the same transformer at batch 2 x 1024 tokens (a quarter of the work per kernel), fed 400 MB of "
        "float32 features per step (copied host-to-device from pinned memory, non_blocking, at 24 GB/s) "
        "and copying 16 MB of outputs back for metrics"
    ),
    "launch": (
        "a deep narrow fp32 MLP on an A100 80GB SXM (24 layers of width 256, batch 32) with a for-loop "
        "Adam: ~430 tiny kernels per step, each shorter than the host takes to launch it"
    ),
}
EXAMPLE_SCENARIOS = tuple(DESCRIPTIONS)


def example_path(scenario: str = "compute", kind: str = "stats") -> Path:
    """Path of a shipped EXAMPLE file: ``kind="stats"`` (nsys stats CSV) or ``"sqlite"``.

    Synthetic data in nsys's formats (see ``data/nsys_example_README.md``), not a capture.
    """
    if scenario not in EXAMPLE_SCENARIOS:
        raise ValueError(f"Unknown example {scenario!r}; choose one of {EXAMPLE_SCENARIOS}.")
    if kind not in ("stats", "sqlite"):
        raise ValueError(f"kind={kind!r}: use 'stats' (the CSV) or 'sqlite' (the export).")
    suffix = "stats.csv" if kind == "stats" else "export.sqlite"
    return DATA / f"nsys_example_{scenario}_{suffix}"


def describe_example(scenario: str) -> str:
    """What the synthetic workload of an example is."""
    if scenario not in DESCRIPTIONS:
        raise ValueError(f"Unknown example {scenario!r}; choose one of {EXAMPLE_SCENARIOS}.")
    return DESCRIPTIONS[scenario]
