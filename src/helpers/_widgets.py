"""What every course widget shows where no widget front end runs (nbconvert, a static viewer)."""

from __future__ import annotations

import base64
import io
from typing import Any


def with_static_fallback(box: Any, figure: Any, text: str, **kwargs: Any) -> dict:
    """The widget's own mimebundle plus a PNG of ``figure`` and ``text``, so a viewer without
    the widget front end still shows the current plot and one line saying what it is."""
    bundle = box._repr_mimebundle_(**kwargs)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    bundle["image/png"] = base64.b64encode(buffer.getvalue()).decode()
    bundle["text/plain"] = text
    return bundle
