"""One curve as an inline SVG: no script, no external asset, colors from the page's CSS.

The plot marks the finding's trigger step (``line.trigger`` with ``data-step``), draws its
threshold (``line.threshold`` with ``data-value``) and the steps whose value was not finite
(``g.nonfinite``, one mark per bucket, at the top). A curve whose positive values span more
than three decades (gradient norms, update ratios, a GradScaler's scale) gets a log axis.
"""

from __future__ import annotations

import math

from traindoc.curves import Curve
from traindoc.report import safe

W, H = 640, 200
LEFT, RIGHT, TOP, BOTTOM = 70, 12, 16, 28  # room for the axis labels


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def plot(curve: Curve, *, label: str, trigger: int | None = None, threshold: float | None = None,
         unit: str = "step") -> str:
    """``curve`` as an ``<svg>`` element (a string)."""
    values = curve.values
    steps = list(curve.steps) + [s for s, _ in curve.nonfinite] + ([trigger] if trigger is not None else [])
    x0, x1 = (min(steps), max(steps)) if steps else (0, 1)
    if x1 == x0:
        x1 = x0 + 1
    ys = list(values) + ([threshold] if threshold is not None and math.isfinite(threshold) else [])
    log = bool(ys) and min(ys) > 0 and max(ys) / min(ys) > 1e3
    t = (lambda v: math.log10(v)) if log else (lambda v: v)
    lo, hi = (min(map(t, ys)), max(map(t, ys))) if ys else (0.0, 1.0)
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    pad = (hi - lo) * 0.05
    lo, hi = lo - pad, hi + pad

    def px(step: float) -> float:
        return LEFT + (step - x0) / (x1 - x0) * (W - LEFT - RIGHT)

    def py(value: float) -> float:
        return TOP + (hi - t(value)) / (hi - lo) * (H - TOP - BOTTOM)

    where = f"; {unit} {trigger} marked" if trigger is not None else ""
    out = [f"<svg class='plot' viewBox='0 0 {W} {H}' role='img' preserveAspectRatio='xMidYMid meet' "
           f"data-series='{safe.html(label.split(':')[0])}' aria-label='{safe.html(label)}{where}'>",
           f"<title>{safe.html(label)}{where}</title>",
           f"<rect class='frame' x='{LEFT}' y='{TOP}' width='{W - LEFT - RIGHT}' height='{H - TOP - BOTTOM}'/>"]
    top_label, bottom_label = (10 ** (hi - pad), 10 ** (lo + pad)) if log else (hi - pad, lo + pad)
    out.append(f"<text class='tick' x='{LEFT - 4}' y='{TOP + 10}' text-anchor='end'>{_fmt(top_label)}</text>")
    out.append(f"<text class='tick' x='{LEFT - 4}' y='{H - BOTTOM}' text-anchor='end'>{_fmt(bottom_label)}</text>")
    if log:
        out.append(f"<text class='tick' x='{LEFT - 4}' y='{(TOP + H - BOTTOM) / 2 + 4}' text-anchor='end'>log</text>")
    out.append(f"<text class='tick' x='{LEFT}' y='{H - 8}'>{unit} {x0}</text>")
    out.append(f"<text class='tick' x='{W - RIGHT}' y='{H - 8}' text-anchor='end'>{unit} {x1}</text>")
    if values:
        pts = " ".join(f"{px(s):.1f},{py(v):.1f}" for s, v in zip(curve.steps, values))
        if len(values) == 1:
            out.append(f"<circle class='series' cx='{px(curve.steps[0]):.1f}' cy='{py(values[0]):.1f}' r='3'/>")
        else:
            out.append(f"<polyline class='series' points='{pts}'/>")
    if curve.nonfinite:
        out.append("<g class='nonfinite'>")
        for s, word in curve.nonfinite:
            x = px(s)
            out.append(f"<path d='M{x - 4:.1f},{TOP} L{x + 4:.1f},{TOP} L{x:.1f},{TOP + 7} Z' data-step='{s}'>"
                       f"<title>{safe.html(word)} at {unit} {s}</title></path>")
        out.append("</g>")
    if threshold is not None and math.isfinite(threshold) and (threshold > 0 or not log):
        y = py(threshold)
        out.append(f"<line class='threshold' x1='{LEFT}' x2='{W - RIGHT}' y1='{y:.1f}' y2='{y:.1f}' "
                   f"data-value='{threshold!r}'/>")
        out.append(f"<text class='threshold-label' x='{W - RIGHT - 4}' y='{y - 4:.1f}' text-anchor='end'>"
                   f"threshold {_fmt(threshold)}</text>")
    if trigger is not None:
        x = px(trigger)
        anchor = "end" if x > W / 2 else "start"
        dx = -4 if anchor == "end" else 4
        out.append(f"<line class='trigger' x1='{x:.1f}' x2='{x:.1f}' y1='{TOP}' y2='{H - BOTTOM}' "
                   f"data-step='{trigger}'/>")
        out.append(f"<text class='trigger-label' x='{x + dx:.1f}' y='{TOP + 22}' text-anchor='{anchor}'>"
                   f"{unit} {trigger}</text>")
    out.append("</svg>")
    return "".join(out)
