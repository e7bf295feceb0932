"""Chapter 1 — the roofline model of one GEMM, ``A (M×K) · W (K×N) = Y (M×N)``.

Formulas (NVIDIA's *Matrix Multiplication Background User's Guide*; Williams, Waterman and
Patterson, "Roofline: an insightful visual performance model", CACM 2009):

* work             F     = 2·M·K·N              (one FMA = 2 FLOPs)
* minimum traffic  Q_min = b·(M·K + K·N + M·N)  (each operand read or written once)
* intensity        I     = F / Q_min            (FLOP per byte)
* attainable       P    <= min(P_peak, BW · I)
* ideal time       t    >= max(F / P_peak, Q_min / BW)

All units are decimal SI: FLOP/s, B/s, seconds.

The parts: the formulas and the cost-model table (:mod:`._formulas`), GEMMs timed on this device
(:mod:`._measure`), the plot (:mod:`._plot`) and the explorer widget (:mod:`._explorer`).
"""

from __future__ import annotations

from ._explorer import RooflineExplorer, presets  # noqa: F401
from ._formulas import (  # noqa: F401
    ELEMENTWISE_OPS,
    CostRow,
    ElementwiseOp,
    attainable,
    cost_row,
    cost_table,
    critical_m,
    fastest,
    format_table,
    gemm_bytes,
    gemm_flops,
    ideal_time,
    intensity,
    limiter,
    option_time,
    ridge_point,
    training_gemms,
)
from ._measure import (  # noqa: F401
    COMPARABLE_WIDTH,
    GemmPoint,
    ShareOfPrediction,
    against_prediction,
    measure_gemms,
    placement,
)
from ._plot import plot_roofline  # noqa: F401
