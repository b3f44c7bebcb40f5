"""Collective explorer: bus bandwidth against size for chosen ops, clusters and configurations,
with measured curves from the store or an uploaded nccl-tests log overlaid."""

from __future__ import annotations

from functools import partial

import dash
from dash import Input, Output, State, callback, dcc, html

from dashboards.clusters import CandidateCluster
from dashboards.components import field, job_area, log_upload, number, register_job, register_log_upload
from dashboards.explore import parse_sizes, predict_curves
from dashboards.figures.collectives import busbw_figure
from dashboards.figures.common import placeholder
from dashboards.inputs import optional_int
from dashboards.measured import measured_curves, measured_hardware_ids, read_store
from dashboards.state import current
from traces.summary import human_bytes
from tuner.config import Algo, Proto
from twin.topology import list_presets

dash.register_page(__name__, path="/collectives", name="Collective explorer", order=1)

OPS = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall")

layout = html.Div([
    html.H2("Collective explorer: busbw vs message size"),
    html.P("nccl-tests style: bus bandwidth against the size column, log axes. Predicted by the twin's fast path; "
           "measured points from the store and from uploaded logs.", className="note"),
    html.Div(className="controls", children=[
        field("clusters", dcc.Dropdown(id="coll-presets", options=[n for n, _ in list_presets()], multi=True,
                                       value=["dgx-h100", "dgx-a100"], style={"minWidth": "18em"})),
        field("nodes", number("coll-nodes", 1, width="3em")),
        field("ranks (empty: all GPUs)", number("coll-nranks", "", width="3em")),
        field("collectives", dcc.Dropdown(id="coll-ops", options=list(OPS), value=["allreduce"], multi=True,
                                          style={"minWidth": "14em"})),
        field("sizes", dcc.Input(id="coll-sizes", type="text", value="1KiB:4GiB:4", debounce=True,
                                 style={"width": "9em"})),
    ]),
    html.Div(className="controls", children=[
        html.Span("configuration (empty: NCCL's choice):", className="note"),
        field("algorithm", dcc.Dropdown(id="coll-algo", options=[a.value for a in Algo], style={"width": "10em"})),
        field("protocol", dcc.Dropdown(id="coll-proto", options=[p.value for p in Proto], style={"width": "8em"})),
        field("channels", number("coll-nchannels", "", width="3em")),
        field("measured (store)", dcc.Dropdown(id="coll-hardware", multi=True, style={"minWidth": "18em"})),
    ]),
    log_upload("coll"),
    job_area("coll", "Predict"),
    html.Table(id="coll-numbers", className="numbers"),
    dcc.Graph(id="coll-figure", figure=placeholder("busbw curves appear here")),
])


def _start(hardware, presets, nodes, nranks, ops, sizes, algo, proto, nchannels, logs):
    candidates = [CandidateCluster(preset=p, nodes=optional_int(nodes, "nodes")) for p in presets or []]
    measured = [m for h in hardware or [] for m in read_store(current().store, h)] if current().store else []
    measured += [m for key in logs or [] for m in current().logs.get(key, [])]
    fn = partial(_compute, measured=measured, ops=list(ops or []), params=current().params)
    return fn, (candidates, parse_sizes(sizes or ""), optional_int(nranks, "ranks"), algo, proto,
                optional_int(nchannels, "channels"))


def _compute(candidates, sizes, nranks, algo, proto, nchannels, *, measured, ops, params, on_progress):
    predicted = predict_curves(candidates, ops, sizes, nranks=nranks, algo=algo, proto=proto, nchannels=nchannels,
                               params=params, on_progress=on_progress)
    return predicted, [c for op in ops for c in measured_curves(measured, op)]


def _render(result):
    predicted, measured = result
    rows = [html.Tr([html.Th("curve"), html.Th("largest size"), html.Th("busbw GB/s")])]
    rows += [html.Tr([html.Td(c.label), html.Td(human_bytes(c.nbytes[-1])), html.Td(f"{c.busbw_gbps[-1]:.1f}")])
             for c in [*predicted, *measured] if c.nbytes]
    return rows, busbw_figure(predicted, measured, constants=current().constants)


CONTROLS = ("presets", "nodes", "nranks", "ops", "sizes", "algo", "proto", "nchannels")
register_job("coll", triggers=(Input("coll-hardware", "value"),),
             states=[*(State(f"coll-{c}", "value") for c in CONTROLS), State("coll-logs", "data")],
             outputs=[Output("coll-numbers", "children"), Output("coll-figure", "figure")],
             start=_start, render=_render, unit="curves", auto=False)
register_log_upload("coll")


@callback(Output("coll-hardware", "options"), Output("coll-hardware", "value"), Input("coll-hardware", "id"))
def _hardware(_id):
    ids = measured_hardware_ids(current().store) if current().store else []
    return ids, ids
