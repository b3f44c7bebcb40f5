"""Calibration: the twin's predictions of measured calls against the measurements (from the store or
an uploaded nccl-tests log), and the error by message size; with a profile, before and after."""

from __future__ import annotations

from functools import partial

import dash
from dash import Input, Output, State, callback, dcc, html

from dashboards.clusters import CandidateCluster, preset_for
from dashboards.components import field, job_area, log_upload, number, register_job, register_log_upload
from dashboards.figures.calibration import error_figure, parity_figure
from dashboards.figures.common import placeholder
from dashboards.inputs import InputError, optional_int, optional_number
from dashboards.measured import calibration_points, measured_hardware_ids, read_store, regime_errors
from dashboards.state import current
from twin.topology import list_presets

dash.register_page(__name__, path="/calibration", name="Calibration", order=4)

layout = html.Div([
    html.H2("Calibration: can the twin be trusted here?"),
    html.P("Every measured call (NCCL's own choice, under the log's NCCL_ALGO/NCCL_PROTO) predicted on the cluster "
           "you say the hardware is, sized to the call's ranks. Fitting a profile is another step; with --profile "
           "the page shows the profile's predictions beside the default constants'.", className="note"),
    html.Div(className="controls", children=[
        field("measured hardware (store)", dcc.Dropdown(id="cal-hardware", style={"minWidth": "22em"})),
        field("is modelled as (empty: by its GPU)",
              dcc.Dropdown(id="cal-preset", options=[n for n, _ in list_presets()], style={"width": "12em"})),
        field("GPUs/node", number("cal-gpn", "", width="3em")),
        field("NICs/node", number("cal-nics", "", width="3em")),
        field("NIC Gb/s", number("cal-nic", "", width="4em")),
    ]),
    log_upload("cal"),
    job_area("cal", "Compare"),
    html.Div(id="cal-notes", className="note"),
    html.Table(id="cal-numbers", className="numbers"),
    dcc.Graph(id="cal-parity", figure=placeholder("predicted vs measured appears here")),
    dcc.Graph(id="cal-error", figure=placeholder("errors by size appear here")),
])


@callback(Output("cal-hardware", "options"), Output("cal-hardware", "value"), Input("cal-hardware", "id"))
def _hardware(_id):
    measured = measured_hardware_ids(current().store) if current().store else []
    named = [h for h in measured if preset_for(h)]  # first one whose id says its GPU
    return measured, (named or measured or [None])[0]


def _start(hardware, preset, gpn, nics, nic, logs):
    measured = read_store(current().store, hardware) if current().store and hardware else []
    measured += [m for key in logs or [] for m in current().logs.get(key, [])]
    if not measured:
        raise InputError("no measurements: choose a hardware id of the store or upload an nccl-tests log")
    preset = preset or preset_for(hardware or "") or preset_for(measured[0].hardware)
    if preset is None:
        raise InputError(f"no preset has the GPU of {measured[0].hardware!r}: choose the preset that models it")
    candidate = CandidateCluster(preset=preset, gpus_per_node=optional_int(gpn, "GPUs per node"),
                                 nics_per_node=optional_int(nics, "NICs per node", minimum=0),
                                 nic_gbps=optional_number(nic, "NIC rate (Gb/s)", positive=True))
    candidate.check()
    return partial(_compare, params=current().params), (measured, candidate)


def _compare(measured, candidate, *, params, on_progress):
    on_progress(0, 1)
    before = calibration_points(measured, candidate)
    after = calibration_points(measured, candidate, params=params) if params is not None else None
    on_progress(1, 1)
    return candidate, before, after


def _render(result):
    candidate, (points, notes), after = result
    cluster = f"{candidate.label} (sized to each call's ranks)"
    constants = "default constants"
    after_points = after[0] if after else None
    rows = [html.Tr([html.Th("size regime"), html.Th("points"), html.Th("mean |error|")])]
    rows += [html.Tr([html.Td(label), html.Td(str(n)), html.Td(f"{100 * e:.1f}%")])
             for label, (n, e) in regime_errors(points).items()]
    return ([html.Div(n) for n in notes], rows,
            parity_figure(points, cluster=cluster, constants=constants, after=after_points),
            error_figure(points, cluster=cluster, constants=constants, after=after_points))


register_job("cal", triggers=(Input("cal-hardware", "value"),),
             states=[State("cal-preset", "value"), State("cal-gpn", "value"), State("cal-nics", "value"),
                     State("cal-nic", "value"),
                     State("cal-logs", "data")],
             outputs=[Output("cal-notes", "children"), Output("cal-numbers", "children"),
                      Output("cal-parity", "figure"), Output("cal-error", "figure")],
             start=_start, render=_render, unit="comparisons", auto=False)
register_log_upload("cal")
