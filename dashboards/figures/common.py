"""What every figure shares: the provenance line, the layout, size axes in binary units."""

from __future__ import annotations

import plotly.graph_objects as go

from traces.summary import human_bytes

DEFAULT = "NCCL default"
TUNED = "tuned"
COLORS = {DEFAULT: "#7f7f7f", TUNED: "#1f77b4", "measured": "#d62728", "knee": "#ff7f0e"}


def provenance(*, on: str, nccl: str | None = None, constants: str | None = None, kind: str = "predicted") -> str:
    """``"predicted on dgx-h100 x4 · NCCL 2.28.9 · default constants"``: what a figure was computed on.

    >>> provenance(on="dgx-a100 x2", nccl="NCCL 2.28.9", constants="default constants")
    'predicted on dgx-a100 x2 · NCCL 2.28.9 · default constants'
    """
    return " · ".join(p for p in (f"{kind} on {on}", nccl, constants) if p)


def figure(title: str, subtitle: str, **layout) -> go.Figure:
    """An empty figure with the house layout, a title and its provenance subtitle."""
    fig = go.Figure()
    house = {"template": "plotly_white", "height": 460, "margin": {"t": 95, "l": 70, "r": 30, "b": 60},
             "legend": {"orientation": "h", "y": -0.2}}
    fig.update_layout(title={"text": title, "subtitle": {"text": subtitle}, "x": 0.01, "xanchor": "left"},
                      **{**house, **layout})
    return fig


def size_ticks(nbytes: list[int]) -> dict:
    """Log-axis ticks at powers of 4 across ``nbytes``, labelled in binary units."""
    if not nbytes:
        return {}
    lo, hi = max(1, min(nbytes)), max(nbytes)
    ticks, t = [], 1
    while t <= hi * 4:
        if t >= lo / 4:
            ticks.append(t)
        t *= 4
    return {"tickvals": ticks, "ticktext": [human_bytes(t) for t in ticks]}


def placeholder(text: str) -> go.Figure:
    """A blank figure that says what will appear (before a run), with no axes."""
    fig = go.Figure()
    fig.update_layout(template="plotly_white", height=220, xaxis={"visible": False}, yaxis={"visible": False},
                      annotations=[{"text": text, "showarrow": False, "font": {"size": 15, "color": "#777"}}])
    return fig
