"""A one-parameter sweep as a curve, the knee marked."""

from __future__ import annotations

import plotly.graph_objects as go

from dashboards.figures.common import COLORS, figure, provenance
from dashboards.studies import METRICS, SWEEP_PARAMETERS, Sweep, knee
from dashboards.twin_api import nccl_label


def sweep_figure(sweep: Sweep, metric: str = "iteration_ms", *, constants: str = "default constants") -> go.Figure:
    """``metric`` against the swept parameter; the knee (``studies.knee``) is a marked, annotated point."""
    xs, ys = sweep.series(metric)
    on = provenance(on=f"{sweep.base.label} with {SWEEP_PARAMETERS[sweep.parameter]} varied", nccl=nccl_label(),
                    constants=constants)
    fig = figure(f"{METRICS[metric]} vs {SWEEP_PARAMETERS[sweep.parameter]}", f"{on} · workload {sweep.workload}",
                 xaxis_title=SWEEP_PARAMETERS[sweep.parameter], yaxis_title=METRICS[metric])
    fig.add_scatter(x=xs, y=ys, mode="lines+markers", name=METRICS[metric], marker_color=COLORS["tuned"],
                    hovertemplate="%{x:g}: %{y:.4g}<extra></extra>")
    i = knee(xs, ys)
    if i is not None:
        fig.add_scatter(x=[xs[i]], y=[ys[i]], mode="markers", name="knee", marker={"size": 16, "symbol": "star",
                                                                                    "color": COLORS["knee"]})
        fig.add_annotation(x=xs[i], y=ys[i], text=f"knee at {xs[i]:g}", showarrow=True, arrowhead=2, ay=-40)
    failed = [p for p in sweep.points if p.report is None]
    if failed:
        fig.add_annotation(text=f"{len(failed)} value(s) could not run: see the messages", xref="paper",
                           yref="paper", x=1, y=1.02, showarrow=False, xanchor="right", font={"color": "#b30000"})
    return fig
