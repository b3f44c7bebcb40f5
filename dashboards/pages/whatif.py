"""Cluster what-if (purchase): a workload on editable candidate clusters side by side, and a
one-parameter sweep of one candidate with its knee marked."""

from __future__ import annotations

import time
from functools import partial

import dash
from dash import Input, Output, State, callback, dash_table, dcc, html, no_update

from dashboards.clusters import INTRA_NODE, CandidateCluster
from dashboards.components import field, job_area, job_result, number, register_job
from dashboards.figures.common import placeholder
from dashboards.figures.sweep import sweep_figure
from dashboards.figures.whatif import SUMMARY_COLUMNS, breakdown_figure, cost_figure, iteration_figure, summary_rows
from dashboards.inputs import InputError, number_list, positive_int
from dashboards.report import html_text
from dashboards.state import current
from dashboards.studies import METRICS, SWEEP_PARAMETERS, compare, metric_of, sweep
from dashboards.twin_api import PRICE_PER_GPU_HOUR
from dashboards.workloads import WorkloadChoice, read_upload
from traces.examples import DEFAULT, names
from traces.generate import list_models
from twin.topology import list_presets

dash.register_page(__name__, path="/", name="Cluster what-if", order=0)

COLUMNS = [("name", "name", "text"), ("preset", "preset", "dropdown"), ("gpu", "GPU model", "dropdown"),
           ("gpus_per_node", "GPUs/node", "text"), ("nodes", "nodes (empty: as needed)", "text"),
           ("nics_per_node", "NICs/node", "text"), ("nic_gbps", "NIC Gb/s", "text"),
           ("intra_node", "intra-node", "dropdown"), ("oversubscription", "fabric oversub.", "text"),
           ("sharp", "SHARP", "dropdown"), ("price_per_gpu_hour", "$/GPU-h", "text")]
DEFAULT_ROWS = [CandidateCluster(preset="dgx-h100").to_row(), CandidateCluster(preset="dgx-a100").to_row()]
SWEEP_DEFAULTS = {"nodes": "1, 2, 4, 8", "nic_gbps": "50, 100, 200, 400, 800", "gpus_per_node": "2, 4, 8",
                  "price_per_gpu_hour": "1, 2, 3, 4, 5"}


def _options(values) -> dict:
    return {"options": [{"label": str(v), "value": v} for v in values], "clearable": True}


def _table() -> dash_table.DataTable:
    return dash_table.DataTable(
        id="whatif-candidates", data=DEFAULT_ROWS, editable=True, row_deletable=True,
        columns=[{"id": k, "name": n, "presentation": p} for k, n, p in COLUMNS],
        dropdown={"preset": _options([n for n, _ in list_presets()]), "gpu": _options(sorted(PRICE_PER_GPU_HOUR)),
                  "intra_node": _options(INTRA_NODE), "sharp": _options(["yes", "no"])},
        style_table={"overflowX": "auto"}, style_cell={"fontSize": "0.85em", "padding": "4px", "minWidth": "70px"})


def _workload_controls() -> html.Div:
    return html.Div(className="controls", children=[
        dcc.RadioItems(id="whatif-kind", value="bundled", inline=True, options=[
            {"label": "bundled trace", "value": "bundled"}, {"label": "model + parallelism plan", "value": "generated"},
            {"label": "uploaded trace", "value": "uploaded"}]),
        field("bundled", dcc.Dropdown(id="whatif-example", options=names(), value=DEFAULT, clearable=False,
                                      style={"width": "14em"})),
        field("model", dcc.Dropdown(id="whatif-model", options=list_models(), value="phi-2", clearable=False,
                                    style={"width": "12em"})),
        field("tp", number("whatif-tp", 8, width="3em")), field("pp", number("whatif-pp", 1, width="3em")),
        field("dp", number("whatif-dp", 2, width="3em")),
        field("micro-batches", number("whatif-mb", 2, width="3em")),
        field("micro-batch size", number("whatif-mbs", 1, width="3em")),
        dcc.Upload(id="whatif-upload", className="upload", children=html.Span("drop or click: a ccltwin trace")),
        html.Span(id="whatif-upload-name", className="note"),
        dcc.Store(id="whatif-upload-id"),
        dcc.Checklist(id="whatif-tuned", options=[{"label": "also tune", "value": "tuned"}], value=["tuned"]),
    ])


layout = html.Div([
    html.H2("Cluster what-if: which cluster to buy"),
    html.P("Replays the workload on each candidate with NCCL's default configuration and with the best one the "
           "twin finds per collective. Edit any cell (empty: the preset's value); add or delete rows.",
           className="note"),
    _workload_controls(),
    _table(),
    html.Button("Add candidate", id="whatif-add", className="secondary"),
    job_area("whatif", "Compare"),
    html.Ul(id="whatif-errors", className="message"),
    html.Table(id="whatif-summary", className="numbers"),
    html.Button("Download HTML report", id="whatif-download-button", className="secondary"),
    dcc.Download(id="whatif-download"),
    dcc.Graph(id="whatif-iteration", figure=placeholder("iteration times appear here")),
    dcc.Graph(id="whatif-breakdown", figure=placeholder("per-op communication appears here")),
    dcc.Graph(id="whatif-cost", figure=placeholder("costs appear here")),
    html.H3("Sweep one parameter"),
    html.Div(className="controls", children=[
        field("candidate", dcc.Dropdown(id="sweep-base", clearable=False, style={"width": "16em"})),
        field("parameter", dcc.Dropdown(id="sweep-parameter", value="nic_gbps", clearable=False,
                                        options=[{"label": v, "value": k} for k, v in SWEEP_PARAMETERS.items()],
                                        style={"width": "14em"})),
        field("values", dcc.Input(id="sweep-values", type="text", value=SWEEP_DEFAULTS["nic_gbps"], debounce=True,
                                  style={"width": "14em"})),
        field("plot", dcc.Dropdown(id="sweep-metric", value="iteration_ms", clearable=False,
                                   options=[{"label": v, "value": k} for k, v in METRICS.items()],
                                   style={"width": "18em"})),
    ]),
    job_area("sweep", "Sweep"),
    html.Ul(id="sweep-errors", className="message"),
    html.Table(id="sweep-points", className="numbers"),
    dcc.Store(id="sweep-done"),
    dcc.Graph(id="sweep-figure", figure=placeholder("choose a candidate and a parameter, then Sweep")),
])


def workload_from(kind, example, model, tp, pp, dp, mb, mbs, upload_id) -> WorkloadChoice:
    """The workload the controls describe (``InputError`` naming the bad control)."""
    if kind == "bundled":
        return WorkloadChoice.example(example)
    if kind == "uploaded":
        if not upload_id or upload_id not in current().uploads:
            raise InputError("no trace uploaded yet: drop a ccltwin trace file on the upload box")
        return current().uploads[upload_id]
    return WorkloadChoice.generated(model, tp=positive_int(tp, "tp"), pp=positive_int(pp, "pp"),
                                    dp=positive_int(dp, "dp"), micro_batches=positive_int(mb, "micro-batches"),
                                    micro_batch_size=positive_int(mbs, "micro-batch size"),
                                    sequence_parallel=positive_int(tp, "tp") > 1)


WORKLOAD_STATES = [State("whatif-kind", "value"), State("whatif-example", "value"), State("whatif-model", "value"),
                   State("whatif-tp", "value"), State("whatif-pp", "value"), State("whatif-dp", "value"),
                   State("whatif-mb", "value"), State("whatif-mbs", "value"), State("whatif-upload-id", "data")]


def _start_compare(*values):
    *workload, rows, tuned = values
    candidates = [CandidateCluster.from_row(r) for r in rows or []]
    fn = partial(compare, tuned=bool(tuned), engine=current().engine, params=current().params)
    return fn, (workload_from(*workload), candidates)


def _render_compare(result):
    report, constants = result.report, current().constants
    header = html.Tr([html.Th(c) for c in SUMMARY_COLUMNS])
    rows = [html.Tr([html.Td(v) for v in row]) for row in summary_rows(report)]
    return ([html.Li(e) for e in result.errors], [header, *rows], iteration_figure(report, constants=constants),
            breakdown_figure(report, constants=constants), cost_figure(report, constants=constants))


register_job("whatif", states=[*WORKLOAD_STATES, State("whatif-candidates", "data"), State("whatif-tuned", "value")],
             outputs=[Output("whatif-errors", "children"), Output("whatif-summary", "children"),
                      Output("whatif-iteration", "figure"), Output("whatif-breakdown", "figure"),
                      Output("whatif-cost", "figure")],
             start=_start_compare, render=_render_compare, unit="clusters replayed")


def _start_sweep(*values):
    *workload, rows, tuned, base, parameter, text = values
    candidates = [CandidateCluster.from_row(r) for r in rows or []]
    if base is None or not 0 <= base < len(candidates):
        raise InputError("choose the candidate to sweep")
    values = number_list(text, SWEEP_PARAMETERS.get(parameter, "values"))
    return (partial(sweep, tuned=bool(tuned), engine=current().engine, params=current().params),
            (workload_from(*workload), candidates[base], parameter, values))


def _render_sweep(result):
    return ([html.Li(f"{p.value:g}: {p.error}") for p in result.points if p.error],
            [html.Tr([html.Th(SWEEP_PARAMETERS[result.parameter]), *(html.Th(v) for v in METRICS.values())])]
            + [html.Tr([html.Td(f"{p.value:g}"), *(html.Td(_cell(p.report, m)) for m in METRICS)])
               for p in result.points if p.report is not None],
            time.time())


def _cell(report, metric: str) -> str:
    value = metric_of(report, metric)
    return "-" if value is None else f"{value:.4g}"


register_job("sweep", states=[*WORKLOAD_STATES, State("whatif-candidates", "data"), State("whatif-tuned", "value"),
                              State("sweep-base", "value"), State("sweep-parameter", "value"),
                              State("sweep-values", "value")],
             outputs=[Output("sweep-errors", "children"), Output("sweep-points", "children"),
                      Output("sweep-done", "data")],
             start=_start_sweep, render=_render_sweep, unit="points replayed", auto=False)


@callback(Output("sweep-figure", "figure"), Input("sweep-done", "data"), Input("sweep-metric", "value"),
          State("sweep-job", "data"), prevent_initial_call=True)
def _draw_sweep(_done, metric, job):
    result = job_result(job)
    if result is None:
        return no_update
    return sweep_figure(result, metric, constants=current().constants)


@callback(Output("sweep-base", "options"), Output("sweep-base", "value"), Input("whatif-candidates", "data"),
          State("sweep-base", "value"))
def _bases(rows, value):
    options = [{"label": str(r.get("name") or r.get("preset")), "value": i} for i, r in enumerate(rows or [])]
    return options, value if value is not None and value < len(options) else (0 if options else None)


@callback(Output("sweep-values", "value"), Input("sweep-parameter", "value"), prevent_initial_call=True)
def _sweep_defaults(parameter):
    return SWEEP_DEFAULTS.get(parameter, "")


@callback(Output("whatif-candidates", "data"), Input("whatif-add", "n_clicks"), State("whatif-candidates", "data"),
          prevent_initial_call=True)
def _add_row(_clicks, rows):
    rows = list(rows or [])
    new = dict(rows[-1]) if rows else CandidateCluster(preset="dgx-h100").to_row()
    new["name"] = f"candidate {len(rows) + 1}"
    return [*rows, new]


@callback(Output("whatif-upload-id", "data"), Output("whatif-upload-name", "children"),
          Output("whatif-message", "children", allow_duplicate=True), Output("whatif-kind", "value"),
          Input("whatif-upload", "contents"), State("whatif-upload", "filename"), prevent_initial_call=True)
def _upload(contents, filename):
    try:
        choice = read_upload(filename or "upload", contents)
    except InputError as err:
        return None, "", str(err), no_update
    key = f"upload{len(current().uploads) + 1}"
    current().uploads[key] = choice
    return key, f"{filename}: {choice.world_size} ranks", "", "uploaded"


@callback(Output("whatif-download", "data"), Input("whatif-download-button", "n_clicks"), State("whatif-job", "data"),
          prevent_initial_call=True)
def _download(_clicks, job):
    result = job_result(job)
    if result is None:
        return no_update
    return dcc.send_string(html_text(result.report, constants=current().constants), "whatif-report.html")
