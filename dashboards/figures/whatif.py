"""What-if figures: iteration time, per-op communication, cost, and the summary table, per cluster,
with NCCL's default configuration and tuned side by side."""

from __future__ import annotations

from collections import defaultdict

import plotly.graph_objects as go

from dashboards.figures.common import COLORS, DEFAULT, TUNED, figure, provenance
from dashboards.twin_api import ClusterReport, WhatIfReport, nccl_label


def _on(report: WhatIfReport, constants: str) -> str:
    labels = ", ".join(c.cluster for c in report.clusters) or "no cluster"
    return provenance(on=labels, nccl=nccl_label(), constants=constants) + f" · workload {report.trace_name}"


def _runs(c: ClusterReport) -> list[tuple[str, object]]:
    return [(DEFAULT, c.default)] + ([(TUNED, c.tuned)] if c.tuned is not None else [])


def iteration_figure(report: WhatIfReport, *, constants: str = "default constants") -> go.Figure:
    """Iteration time per cluster and configuration (ms), split into the communication no compute
    hides and the rest; the hover gives the communication share."""
    fig = figure("Iteration time: NCCL default vs tuned", _on(report, constants), barmode="stack",
                 yaxis_title="ms per iteration")
    xs = [[], []]
    exposed, rest, shares = [], [], []
    for c in report.clusters:
        for kind, run in _runs(c):
            xs[0].append(c.cluster)
            xs[1].append(kind)
            exposed.append(run.exposed_comm_us / 1e3)
            rest.append((run.mean_iteration_us - run.exposed_comm_us) / 1e3)
            shares.append(f"comm share {run.comm_share:.1%}, exposed {run.exposed_share:.1%}")
    fig.add_bar(x=xs, y=rest, name="compute and hidden communication", marker_color="#9ecae1",
                customdata=shares, hovertemplate="%{y:,.1f} ms<br>%{customdata}<extra></extra>")
    fig.add_bar(x=xs, y=exposed, name="communication compute does not hide", marker_color="#e6550d",
                customdata=shares, hovertemplate="%{y:,.1f} ms<br>%{customdata}<extra></extra>")
    return fig


SPLIT_PARTS = (("compute_ms", "compute", "#9ecae1"), ("exposed_comm_ms", "exposed communication", "#e6550d"),
               ("host_wait_ms", "GPU waiting for its host", "#fdae6b"),
               ("bubble_ms", "pipeline bubble and waiting for peers", "#bdbdbd"))
"""The parts of ``twin.iteration.IterationBreakdown`` the split figure stacks, bottom up."""


def split_figure(report: WhatIfReport, *, constants: str = "default constants") -> go.Figure:
    """Per cluster and configuration, the iteration (ms) as compute, exposed communication, host
    wait and pipeline bubble (``ccltwin predict``'s breakdown)."""
    fig = figure("Where the iteration goes", _on(report, constants), barmode="stack", yaxis_title="ms per iteration")
    runs = [(c.cluster, kind, split) for c in report.clusters
            for kind, split in ((DEFAULT, c.breakdown), (TUNED, c.tuned_breakdown)) if split is not None]
    xs = [[cluster for cluster, _, _ in runs], [kind for _, kind, _ in runs]]
    for attr, name, color in SPLIT_PARTS:
        fig.add_bar(x=xs, y=[getattr(split, attr) for _, _, split in runs], name=name, marker_color=color,
                    hovertemplate="%{y:,.2f} ms<extra></extra>")
    return fig


def op_times(c: ClusterReport, tuned: bool) -> dict[str, float]:
    """Communication time per iteration (ms) by op: calls per iteration × time per call."""
    out: dict[str, float] = defaultdict(float)
    for t in c.tasks:
        run = t.tuned if tuned and t.tuned is not None else t.default
        out[str(t.task.op)] += run.calls_per_iteration * run.time_us / 1e3
    return dict(sorted(out.items()))


def breakdown_figure(report: WhatIfReport, *, constants: str = "default constants") -> go.Figure:
    """Per cluster and op, the time its calls take per iteration (ms), NCCL default vs tuned."""
    fig = figure("Communication per op and iteration", _on(report, constants), barmode="group",
                 yaxis_title="ms of collective time per iteration")
    for kind in (DEFAULT, TUNED):
        xs, ys = [[], []], []
        for c in report.clusters:
            if kind == TUNED and c.tuned is None:
                continue
            for op, ms in op_times(c, kind == TUNED).items():
                xs[0].append(c.cluster)
                xs[1].append(op)
                ys.append(ms)
        if ys:
            fig.add_bar(x=xs, y=ys, name=kind, marker_color=COLORS[kind],
                        hovertemplate="%{x}: %{y:,.2f} ms<extra>" + kind + "</extra>")
    return fig


def cost_figure(report: WhatIfReport, *, constants: str = "default constants") -> go.Figure:
    """Cost per million tokens (USD) per cluster, or per iteration when the trace does not say how
    many tokens an iteration trains."""
    per_tokens = all(c.tokens_per_iteration for c in report.clusters) and bool(report.clusters)
    what = "USD per million tokens" if per_tokens else "USD per iteration"
    fig = figure(f"Cost: {what}", _on(report, constants) + " · list prices unless given", barmode="group",
                 yaxis_title=what)
    for kind in (DEFAULT, TUNED):
        xs, ys = [], []
        for c in report.clusters:
            run = c.default if kind == DEFAULT else c.tuned
            if run is not None:
                xs.append(c.cluster)
                ys.append(c.cost_per_million_tokens(run) if per_tokens else c.cost_per_iteration(run))
        if ys:
            fig.add_bar(x=xs, y=ys, name=kind, marker_color=COLORS[kind],
                        hovertemplate="%{x}: $%{y:.4g}<extra>" + kind + "</extra>")
    return fig


SUMMARY_COLUMNS = ("cluster", "GPUs", "iteration ms (NCCL)", "iteration ms (tuned)", "gain", "comm share",
                   "exposed comm", "$/GPU-h", "$/iteration", "$/1M tokens")


def summary_rows(report: WhatIfReport) -> list[list[str]]:
    """One row of ``SUMMARY_COLUMNS`` per cluster (shares and costs of the tuned iteration when there is one)."""
    rows = []
    for c in report.clusters:
        best = c.best
        per_m = c.cost_per_million_tokens(best)
        rows.append([c.cluster, f"{c.gpus} x {c.gpu}", f"{c.default.mean_iteration_us / 1e3:,.1f}",
                     "-" if c.tuned is None else f"{c.tuned.mean_iteration_us / 1e3:,.1f}",
                     "-" if c.speedup is None else f"{100 * (1 - 1 / c.speedup):+.1f}%",
                     f"{best.comm_share:.1%}", f"{best.exposed_share:.1%}", f"{c.price_per_gpu_hour:g}",
                     f"{c.cost_per_iteration(best):.4g}", "-" if per_m is None else f"{per_m:.4g}"])
    return rows


def summary_table(report: WhatIfReport, *, constants: str = "default constants") -> go.Figure:
    """The clusters side by side as a table figure."""
    rows = summary_rows(report)
    fig = figure("Candidate clusters side by side", _on(report, constants),
                 height=170 + 48 * len(rows), margin={"t": 80, "l": 10, "r": 10, "b": 10})
    fig.add_trace(go.Table(header={"values": list(SUMMARY_COLUMNS), "fill_color": "#deebf7", "align": "left"},
                           cells={"values": list(zip(*rows, strict=True)) if rows else [[] for _ in SUMMARY_COLUMNS],
                                  "align": "left"}))
    return fig
