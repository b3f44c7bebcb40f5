"""The tuning timeline: time per trial and best so far against the trial index, per run of a task."""

from __future__ import annotations

import plotly.graph_objects as go

from dashboards.figures.common import COLORS, figure, provenance
from dashboards.measured import best_so_far, converged_at
from traces.summary import human_bytes
from tuner.measurement import Measurement

PALETTE = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def timeline_figure(runs: list[list[Measurement]], *, default_us: float | None = None,
                    default_label: str = "NCCL default") -> go.Figure:
    """Each run's trials (markers) and best so far (a line), NCCL's default as a dashed line, and
    where each run converged (``measured.converged_at``). Twin trials are predictions; live trials
    measurements: the subtitle says which, and on what hardware and NCCL version."""
    first = runs[0][0] if runs and runs[0] else None
    if first is None:
        return figure("Tuning timeline", "no trials for this task in the store")
    t = first.task
    kind = "predicted (twin executor)" if first.source == "twin" else f"measured ({first.source})"
    on = provenance(on=first.hardware, nccl=f"NCCL {first.nccl_version or 'unknown'}", kind=kind)
    fig = figure(f"Tuning timeline: {t.op} {human_bytes(t.nbytes)} {t.dtype} on {t.nranks} ranks ({t.group or '-'})",
                 f"{on} · {len(runs)} run(s) from the store", xaxis_title="trial", height=520,
                 yaxis={"title": "µs per call", "type": "log"})
    for k, run in enumerate(runs):
        color = PALETTE[k % len(PALETTE)]
        times = [m.time_us for m in run]
        trials = list(range(1, len(run) + 1))
        fig.add_scatter(x=trials, y=times, mode="markers", name=f"run {k + 1}: trial", marker={"color": color,
                        "size": 5, "opacity": 0.6}, customdata=[str(m.config) for m in run],
                        hovertemplate="trial %{x}: %{y:,.1f} µs<br>%{customdata}<extra></extra>")
        fig.add_scatter(x=trials, y=best_so_far(times), mode="lines", name=f"run {k + 1}: best so far",
                        line={"color": color, "width": 2, "shape": "hv"})
        at = converged_at(times)
        fig.add_vline(x=at, line_dash="dot", line_color=color)
        fig.add_annotation(x=at, y=1.0, yref="paper", yanchor="bottom", showarrow=False,
                           text=f"run {k + 1} converged at trial {at}", font={"color": color})
    if default_us is not None:
        fig.add_hline(y=default_us, line_dash="dash", line_color=COLORS["NCCL default"])
        fig.add_scatter(x=[1], y=[default_us], mode="markers", marker={"color": COLORS["NCCL default"], "size": 1},
                        name=f"{default_label}: {default_us:,.1f} µs")
    return fig
