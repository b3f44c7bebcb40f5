"""The collective explorer's figure: bus bandwidth against size, nccl-tests style, log axes."""

from __future__ import annotations

import plotly.graph_objects as go

from dashboards.explore import PredictedCurve
from dashboards.figures.common import figure, size_ticks
from dashboards.measured import MeasuredCurve


def busbw_figure(predicted: list[PredictedCurve], measured: list[MeasuredCurve] = (), *,
                 constants: str = "default constants") -> go.Figure:
    """Predicted curves as lines, measured ones as markers, on log-log axes (busbw in GB/s as
    nccl-tests defines it). The subtitle names the clusters, NCCL versions and the constants."""
    parts = [f"predicted on {', '.join(sorted({c.cluster for c in predicted}))} · "
             f"{', '.join(sorted({c.nccl for c in predicted}))} · {constants}"] if predicted else []
    if measured:
        parts.append("measured on " + ", ".join(sorted({f"{m.hardware} (NCCL {m.nccl_version})" for m in measured})))
    sizes = sorted({n for c in [*predicted, *measured] for n in c.nbytes})
    fig = figure("Bus bandwidth vs message size", "<br>".join(parts) or "nothing to show yet",
                 xaxis={"type": "log", "title": "size (nccl-tests' size column)", **size_ticks(sizes)},
                 yaxis={"type": "log", "title": "busbw (GB/s)"}, hovermode="closest", height=560)
    for c in predicted:
        fig.add_scatter(x=list(c.nbytes), y=list(c.busbw_gbps), mode="lines+markers", name=c.label,
                        customdata=list(c.configs), marker={"size": 5},
                        hovertemplate="%{x} B: %{y:.2f} GB/s<br>%{customdata}<extra></extra>")
    for m in measured:
        fig.add_scatter(x=list(m.nbytes), y=list(m.busbw_gbps), mode="markers", name=m.label,
                        marker={"size": 8, "symbol": "x"}, hovertemplate="%{x} B: %{y:.2f} GB/s<extra>measured</extra>")
    return fig
