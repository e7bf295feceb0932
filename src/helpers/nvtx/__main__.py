"""``python -m helpers.nvtx``: the annotated loop Nsight Systems captures."""

from ._loop import _demo_main

_demo_main()
