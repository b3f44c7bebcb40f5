"""The what-if report as a terminal table and as a self-contained Markdown file.

One summary row per cluster (iteration time with NCCL's default and tuned, communication
share, exposed communication, cost), then per cluster one row per task: the configuration
NCCL would pick and the tuned one, with the predicted time and bus bandwidth of each as the
replay saw them (sharing links with the rest of the iteration).
"""

from __future__ import annotations

from traces.summary import human_bytes
from tuner.config import Config
from twin.replay import TaskTimes
from twin.whatif import ClusterReport, WhatIfReport


def _config(c: Config) -> str:
    return f"{c.algo}/{c.proto}/{c.transport} nc={c.nchannels} nt={c.nthreads} chunk={human_bytes(c.chunk_bytes)}"


def _ms(us: float) -> str:
    return f"{us / 1e3:,.1f}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _gain(c: ClusterReport) -> str:
    return "-" if c.speedup is None else f"{100 * (1 - 1 / c.speedup):+.1f}%"


def _usd(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def headline(report: WhatIfReport) -> str:
    t = report.trace
    events = sum(len(r.events) for r in t.ranks)
    iterations = "iteration" if t.iterations == 1 else "iterations"
    return (f"{report.trace_name} ({t.source or 'unknown source'}): {t.world_size} ranks, {len(t.ranks)} in the "
            f"trace, {events:,} events, {t.iterations} {iterations}")


def _summary_cells(c: ClusterReport) -> list[str]:
    best = c.best
    return [c.cluster, f"{c.gpus} x {c.gpu}", _ms(c.default.mean_iteration_us),
            "-" if c.tuned is None else _ms(c.tuned.mean_iteration_us), _gain(c),
            _pct(best.comm_share), _pct(best.exposed_share), f"{c.price_per_gpu_hour:g}",
            _usd(c.cost_per_iteration(best)), _usd(c.cost_per_million_tokens(best))]


SUMMARY_HEADER = ["cluster", "GPUs", "iteration ms (NCCL)", "iteration ms (tuned)", "gain", "comm share",
                  "exposed comm", "$/GPU-h", "$/iteration", "$/1M tokens"]
TASK_HEADER = ["op", "size", "dtype", "ranks", "group", "calls/it", "NCCL default", "us", "busbw GB/s", "tuned",
               "us", "busbw GB/s"]


def _task_cells(default: TaskTimes, tuned: TaskTimes | None) -> list[str]:
    t = default.task
    cells = [str(t.op), human_bytes(t.nbytes), t.dtype, str(t.nranks), t.group, f"{default.calls_per_iteration:g}",
             _config(default.config), f"{default.time_us:,.1f}", f"{default.busbw_gbps:.1f}"]
    if tuned is None:
        return [*cells, "-", "-", "-"]
    same = tuned.config == default.config
    return [*cells, "(same)" if same else _config(tuned.config), f"{tuned.time_us:,.1f}", f"{tuned.busbw_gbps:.1f}"]


def _table(header: list[str], rows: list[list[str]], markdown: bool) -> list[str]:
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        return lines + ["| " + " | ".join(r) + " |" for r in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" if i in (0, 1) else f"{{:>{w}}}" for i, w in enumerate(widths))
    return [fmt.format(*header), *(fmt.format(*r) for r in rows)]


def _task_table(c: ClusterReport, markdown: bool) -> list[str]:
    rows = [_task_cells(t.default, t.tuned) for t in c.tasks]
    return _table(TASK_HEADER, rows, markdown)


def _footnotes(report: WhatIfReport) -> list[str]:
    lines = []
    tokens = report.clusters[0].tokens_per_iteration if report.clusters else None
    if tokens is None:
        lines.append("the trace does not say how many tokens an iteration trains: no cost per token")
    if any(not c.price_given for c in report.clusters):
        lines.append("prices are rounded on-demand list prices (2025), for comparison only: "
                     "give --price-per-gpu-hour for a quote")
    for c in report.clusters:
        lines += [f"{c.cluster}: {note}" for note in c.default.notes]
    return lines


def _split(c) -> str:
    """The iteration as ``ccltwin predict`` splits it (``twin.iteration``), best configuration."""
    b = c.tuned_breakdown or c.breakdown
    if b is None:
        return ""
    return (f"iteration {b.iteration_ms:,.2f} ms = compute {b.compute_ms:,.2f} + exposed communication "
            f"{b.exposed_comm_ms:,.2f} + host wait {b.host_wait_ms:,.2f} + pipeline bubble {b.bubble_ms:,.2f} ms")


def format_text(report: WhatIfReport, *, constants: str = "default constants") -> str:
    """The report as the terminal shows it; ``constants`` names the twin parameters it was predicted with."""
    lines = [f"# ccltwin whatif: {headline(report)}; {constants}; predicted, not measured", ""]
    lines += _table(SUMMARY_HEADER, [_summary_cells(c) for c in report.clusters], markdown=False)
    for c in report.clusters:
        lines += ["", f"## {c.cluster}: {_split(c)}", "per task (time per call and busbw as replayed, links shared)"]
        lines += _task_table(c, markdown=False)
    lines += [""] + [f"# note: {n}" for n in _footnotes(report)]
    return "\n".join(lines) + "\n"


def format_markdown(report: WhatIfReport, *, constants: str = "default constants") -> str:
    """The report as a Markdown document; ``constants`` as in ``format_text``."""
    lines = [f"# What-if report: {report.trace_name}", "",
             f"Predicted by the ccltwin twin (SimPy replay of the whole trace, {constants}), not measured: "
             f"{headline(report)}.",
             "", "## Clusters", ""]
    lines += _table(SUMMARY_HEADER, [_summary_cells(c) for c in report.clusters], markdown=True)
    lines += ["", "*comm share*: share of the iteration during which NCCL kernels run; *exposed comm*: share that "
              "no compute hides (both with the tuned configurations when there are some). *gain*: iteration time "
              "saved by the tuned configurations over NCCL's default choice."]
    for c in report.clusters:
        lines += ["", f"## {c.cluster}", "",
                  f"{c.gpus} x {c.gpu}; {_split(c)}. Per task, the time of one call and its bus bandwidth as "
                  "replayed (sharing links and GPUs with the rest of the iteration).", ""]
        lines += _task_table(c, markdown=True)
    notes = _footnotes(report)
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"
