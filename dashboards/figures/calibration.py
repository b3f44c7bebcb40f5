"""Calibration figures: predicted against measured, and the error by message size and regime."""

from __future__ import annotations

import plotly.graph_objects as go

from dashboards.figures.common import COLORS, figure, provenance, size_ticks
from dashboards.measured import SIZE_REGIMES, CalibrationPoint, regime, regime_errors
from dashboards.twin_api import nccl_label


def _subtitle(points: list[CalibrationPoint], cluster: str, constants: str) -> str:
    measured = sorted({f"{p.measurement.hardware} (NCCL {p.measurement.nccl_version or 'unknown'})" for p in points})
    return (f"{provenance(on=cluster, nccl=nccl_label(), constants=constants)}<br>measured on "
            f"{', '.join(measured) or 'nothing'}")


def _series(points: list[CalibrationPoint], after: list[CalibrationPoint] | None, constants: str):
    return [(constants, points, "circle")] + ([("with the profile", after, "diamond")] if after else [])


def _describe(p: CalibrationPoint) -> str:
    t = p.measurement.task
    return f"{t.op} {t.nbytes} B x{t.nranks} ({regime(t.nbytes)})"


def parity_figure(points: list[CalibrationPoint], *, cluster: str, constants: str = "default constants",
                  after: list[CalibrationPoint] | None = None) -> go.Figure:
    """Predicted against measured time per call (µs, log-log) with the line of perfect agreement;
    ``after``: the same calls predicted with a calibration profile."""
    fig = figure("Predicted vs measured time per call", _subtitle(points, cluster, constants),
                 xaxis={"type": "log", "title": "measured (µs)"}, yaxis={"type": "log", "title": "predicted (µs)"})
    times = [v for p in points for v in (p.measurement.time_us, p.predicted_us)]
    if times:
        lo, hi = min(times), max(times)
        fig.add_scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="predicted = measured",
                        line={"dash": "dash", "color": "#444"})
    for name, series, symbol in _series(points, after, constants):
        fig.add_scatter(x=[p.measurement.time_us for p in series], y=[p.predicted_us for p in series],
                        mode="markers", name=name, marker={"symbol": symbol, "size": 7},
                        customdata=[_describe(p) for p in series],
                        hovertemplate="%{customdata}<br>measured %{x:,.1f} µs, predicted %{y:,.1f} µs<extra></extra>")
    return fig


def error_figure(points: list[CalibrationPoint], *, cluster: str, constants: str = "default constants",
                 after: list[CalibrationPoint] | None = None) -> go.Figure:
    """Relative error (predicted − measured) / measured, in %, against size, with the size regimes
    shaded and each regime's mean absolute error written on it."""
    sizes = [p.measurement.task.nbytes for p in points]
    fig = figure("Prediction error by message size", _subtitle(points, cluster, constants),
                 xaxis={"type": "log", "title": "size", **size_ticks(sizes)},
                 yaxis={"title": "error (%)", "zeroline": True})
    lower = 1
    errors = regime_errors(points)
    for (top, label), shade in zip(SIZE_REGIMES, ("#f7fbff", "#deebf7", "#c6dbef"), strict=True):
        upper = min(top, max(sizes, default=1) * 2)
        if upper > lower and label in errors:
            fig.add_vrect(x0=lower, x1=upper, fillcolor=shade, opacity=0.6, line_width=0, layer="below")
        lower = top
    summary = "<br>".join(f"{label}: {100 * mean:.1f}% mean |error| ({n} points)"
                          for label, (n, mean) in errors.items())
    fig.add_annotation(text=summary, xref="paper", yref="paper", x=0.01, y=0.02, xanchor="left", yanchor="bottom",
                       showarrow=False, align="left", bgcolor="rgba(255,255,255,0.85)", bordercolor="#999")
    for name, series, symbol in _series(points, after, constants):
        fig.add_scatter(x=[p.measurement.task.nbytes for p in series], y=[100 * p.error for p in series],
                        mode="markers", name=name, marker={"symbol": symbol, "size": 7, "color": COLORS["tuned"]
                                                           if symbol == "circle" else COLORS["measured"]},
                        hovertemplate="%{x} B: %{y:+.1f}%<extra></extra>")
    return fig
