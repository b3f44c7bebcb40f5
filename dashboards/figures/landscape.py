"""The configuration landscape: subspaces ranked, and one subspace's grid as a heatmap with the
tuner's trials drawn on it."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dashboards.explore import Landscape
from dashboards.figures.common import COLORS, figure, provenance
from dashboards.twin_api import nccl_label
from traces.summary import human_bytes


def _task(ls: Landscape) -> str:
    t = ls.task
    return f"{t.op} {human_bytes(t.nbytes)} {t.dtype} on {t.nranks} ranks"


def ranking_figure(ls: Landscape, *, constants: str = "default constants") -> go.Figure:
    """Each subspace's best predicted time (µs), fastest first, beside NCCL's default."""
    entry = ls.entry
    names = [str(r.subspace) for r in entry.ranked]
    fig = figure(f"Subspaces ranked: {_task(ls)}", provenance(on=ls.cluster, nccl=nccl_label(), constants=constants),
                 xaxis={"title": "best predicted time per call (µs)", "type": "log"}, yaxis={"autorange": "reversed"},
                 height=max(300, 120 + 28 * len(names)))
    fig.add_bar(y=names, x=[r.time_us for r in entry.ranked], orientation="h", name="best point of the subspace",
                marker_color=COLORS["tuned"], customdata=[str(r.config) for r in entry.ranked],
                hovertemplate="%{y}: %{x:,.1f} µs<br>%{customdata}<extra></extra>")
    fig.add_vline(x=entry.default.time_us, line_dash="dash", line_color=COLORS["NCCL default"])
    fig.add_annotation(x=float(np.log10(entry.default.time_us)), y=0, yref="paper", showarrow=False, yanchor="bottom",
                       xanchor="left", bgcolor="white",
                       text=f"NCCL default {entry.default.config.subspace}: {entry.default.time_us:,.1f} µs")
    return fig


def default_threads(ls: Landscape) -> int:
    """The thread count of the ranked best point of the landscape's subspace."""
    return next(r.config.nthreads for r in ls.entry.ranked if r.subspace == ls.subspace)


def heatmap_figure(ls: Landscape, nthreads: int | None = None, *, constants: str = "default constants"
                   ) -> go.Figure:
    """Predicted time (µs) over channels × chunk of ``ls.subspace`` at ``nthreads`` threads (default:
    the thread count of the subspace's best point); the tuner's trials in this subspace at these
    threads are numbered and joined in the order they ran."""
    grid = ls.grid
    nt = nthreads if nthreads in grid.times else default_threads(ls)
    z = grid.times[nt]
    chunks = [int(c) for c in grid.grid.chunks[nt]]
    channels = [int(c) for c in grid.grid.nchannels]
    on = provenance(on=ls.cluster, nccl=nccl_label(), constants=constants)
    # chunk on a log2 axis, colour on log10(µs): both span orders of magnitude
    ticks = list(range(int(np.floor(np.log2(min(chunks)))), int(np.ceil(np.log2(max(chunks)))) + 1))
    finite = np.where(np.isfinite(z), z, np.nan)
    lo, hi = np.nanmin(finite), np.nanmax(finite)
    color_ticks = [v for v in (10.0 ** k * m for k in range(-1, 8) for m in (1, 2, 5)) if lo <= v <= hi]
    fig = figure(f"{ls.subspace} at {nt} threads: {_task(ls)}", f"{on} · trials: {ls.search} in the twin (2% noise)",
                 xaxis={"title": "chunk", "tickvals": ticks, "ticktext": [human_bytes(2 ** t) for t in ticks]},
                 yaxis_title="channels", height=520, showlegend=True)
    fig.add_heatmap(x=np.log2(chunks), y=channels, z=np.log10(finite), colorscale="Viridis_r", customdata=finite,
                    colorbar={"title": "µs", "tickvals": np.log10(color_ticks),
                              "ticktext": [f"{v:g}" for v in color_ticks]},
                    hovertemplate="nc=%{y} chunk=2^%{x:.2f} B: %{customdata:,.1f} µs<extra></extra>")
    here = [(i, c, t) for i, (c, t) in enumerate(ls.trials, 1)
            if c.subspace == ls.subspace and c.nthreads == nt and c.chunk_bytes in chunks]
    if here:
        fig.add_scatter(x=[np.log2(c.chunk_bytes) for _, c, _ in here], y=[c.nchannels for _, c, _ in here],
                        mode="lines+markers+text", text=[str(i) for i, _, _ in here], textposition="top center",
                        name=f"{ls.search} trials ({len(here)} of {len(ls.trials)} here)",
                        line={"color": "white", "width": 1}, marker={"color": "white", "size": 7,
                                                                     "line": {"color": "black", "width": 1}},
                        customdata=[t for _, _, t in here],
                        hovertemplate="trial %{text}: %{customdata:,.1f} µs<extra></extra>")
    if ls.trials:
        winner = min(ls.trials, key=lambda ct: ct[1])[0]
        if winner.subspace == ls.subspace and winner.nthreads == nt and winner.chunk_bytes in chunks:
            fig.add_scatter(x=[np.log2(winner.chunk_bytes)], y=[winner.nchannels], mode="markers",
                            name="tuner's winner", marker={"symbol": "star", "size": 16, "color": COLORS["knee"]})
    return fig
