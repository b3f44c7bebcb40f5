"""The what-if as one self-contained HTML file: plotly.js inside, no server, opens offline.

``write_html(report, "report.html")`` writes the purchase page's figures (the same figure
functions) and the per-task tables of every cluster into one file a reader can mail around; the
first figure embeds plotly.js (``include_plotlyjs=True``, about 4.6 MB), the others share it.
"""

from __future__ import annotations

import html
from os import PathLike

from dashboards.figures.whatif import breakdown_figure, cost_figure, iteration_figure, split_figure, summary_table
from dashboards.twin_api import ClusterReport, WhatIfReport, nccl_label
from traces.summary import human_bytes
from traces.trace_file import check_writable, write_atomic

TASK_COLUMNS = ("op", "size", "dtype", "ranks", "group", "calls/it", "NCCL default", "µs", "busbw GB/s", "tuned",
                "µs", "busbw GB/s")

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; margin-bottom: 2em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; }
th { background: #deebf7; } td:nth-child(-n+5) { text-align: left; }
.note { color: #555; font-size: 0.9em; }
"""


def _task_rows(c: ClusterReport) -> list[list[str]]:
    rows = []
    for t in c.tasks:
        d, task = t.default, t.task
        row = [str(task.op), human_bytes(task.nbytes), task.dtype, str(task.nranks), task.group or "-",
               f"{d.calls_per_iteration:g}", str(d.config), f"{d.time_us:,.1f}", f"{d.busbw_gbps:.1f}"]
        if t.tuned is None:
            row += ["-", "-", "-"]
        else:
            same = "(same)" if t.tuned.config == d.config else str(t.tuned.config)
            row += [same, f"{t.tuned.time_us:,.1f}", f"{t.tuned.busbw_gbps:.1f}"]
        rows.append(row)
    return rows


def _table(header: tuple[str, ...], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_text(report: WhatIfReport, *, constants: str = "default constants") -> str:
    """The whole document as a string."""
    figures = [summary_table(report, constants=constants), iteration_figure(report, constants=constants),
               split_figure(report, constants=constants), breakdown_figure(report, constants=constants),
               cost_figure(report, constants=constants)]
    parts = [fig.to_html(full_html=False, include_plotlyjs=(i == 0), config={"displaylogo": False})
             for i, fig in enumerate(figures)]
    t = report.trace
    title = f"ccltwin what-if: {report.trace_name}"
    sections = "".join(
        f"<h2>{html.escape(c.cluster)}: per task</h2><p class='note'>{c.gpus} x {html.escape(c.gpu)}; time of one call "
        f"and its bus bandwidth as replayed (sharing links with the rest of the iteration).</p>"
        + _table(TASK_COLUMNS, _task_rows(c)) for c in report.clusters)
    notes = "".join(f"<li>{html.escape(c.cluster)}: {html.escape(n)}</li>" for c in report.clusters
                    for n in c.default.notes)
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<p class='note'>Predicted by the ccltwin twin ({nccl_label()}, {html.escape(constants)}), not measured: "
            f"{html.escape(t.source or 'unknown source')}, {t.world_size} ranks, {t.iterations} iteration(s) replayed "
            f"on {len(report.clusters)} candidate cluster(s).</p>"
            + "".join(f"<div class='figure'>{p}</div>" for p in parts) + sections
            + (f"<h2>Notes</h2><ul>{notes}</ul>" if notes else "") + "</body></html>\n")


def write_html(report: WhatIfReport, path: str | PathLike[str], *, constants: str = "default constants") -> None:
    """Write ``html_text(report)`` to ``path`` atomically (``TraceError`` naming the path when it
    cannot be written; checked before the figures are built)."""
    check_writable(path, "HTML report")
    write_atomic(path, [html_text(report, constants=constants)])
