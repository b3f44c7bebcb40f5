"""Tuning timeline: from the store, per task, the time of every trial and the best so far against
the trial index, NCCL's default beside it, and where each run converged. Without live runs the
page can tune a task in the twin into the store."""

from __future__ import annotations

import json
from functools import partial

import dash
from dash import Input, Output, State, callback, dcc, html

from dashboards.clusters import CandidateCluster
from dashboards.components import field, job_area, number, register_job
from dashboards.figures.common import placeholder
from dashboards.figures.timeline import timeline_figure
from dashboards.inputs import InputError, optional_int
from dashboards.measured import converged_at, default_measurements, read_store, tuned_tasks, tuning_runs
from dashboards.state import current
from dashboards.twin_api import SEARCHES, USER_ERRORS, Communicator, Store, tune_trajectory, twin_default_time
from traces.summary import human_bytes
from traces.task import parse_op
from traces.units import parse_size
from tuner.codec import task_from_dict, task_to_dict
from tuner.identity import parse_identity
from tuner.search.base import fastest_share_mean
from twin.topology import list_presets

dash.register_page(__name__, path="/timeline", name="Tuning timeline", order=3)

layout = html.Div([
    html.H2("Tuning timeline"),
    html.P(id="time-store", className="note"),
    html.Div(className="controls", children=[
        field("task", dcc.Dropdown(id="time-task", style={"minWidth": "40em"})),
        html.Button("Reload the store", id="time-reload", className="secondary")]),
    html.Div(id="time-message", className="message", role="alert"),
    html.Table(id="time-numbers", className="numbers"),
    dcc.Graph(id="time-figure", figure=placeholder("tuning runs appear here")),
    html.H3("Tune a task in the twin, into the store"),
    html.Div(className="controls", children=[
        field("cluster", dcc.Dropdown(id="tune-preset", options=[n for n, _ in list_presets()], value="dgx-h100",
                                      clearable=False, style={"width": "12em"})),
        field("nodes", number("tune-nodes", 1, width="3em")),
        field("collective", dcc.Dropdown(id="tune-op", options=["allreduce", "allgather", "reducescatter"],
                                         value="allreduce", clearable=False, style={"width": "10em"})),
        field("size", dcc.Input(id="tune-size", type="text", value="64MiB", debounce=True, style={"width": "6em"})),
        field("search", dcc.Dropdown(id="tune-search", options=list(SEARCHES), value="autoccl", clearable=False,
                                     style={"width": "9em"})),
        field("seed", number("tune-seed", 0, width="3em")),
    ]),
    job_area("tune", "Tune in the twin"),
])


def _option(hardware: str, task) -> dict:
    label = f"{hardware}: {task.op} {human_bytes(task.nbytes)} {task.dtype} x{task.nranks} ({task.group or '-'})"
    return {"label": label, "value": json.dumps({"hardware": hardware, "task": task_to_dict(task)})}


@callback(Output("time-task", "options"), Output("time-task", "value"), Output("time-store", "children"),
          Input("time-reload", "n_clicks"), Input("tune-progress-text", "children"), State("time-task", "value"))
def _tasks(_clicks, _tuned, value):
    store = current().store
    if store is None:
        return [], None, "no store: start the dashboard with --store tuning.db to see tuning runs"
    options = [_option(h, t) for h, t in tuned_tasks(read_store(store))]
    values = [o["value"] for o in options]
    chosen = value if value in values else (values[-1] if values else None)
    return options, chosen, f"store {store}: {len(options)} task(s) with trials"


@callback(Output("time-figure", "figure"), Output("time-numbers", "children"), Output("time-message", "children"),
          Input("time-task", "value"))
def _draw(value):
    if not value or current().store is None:
        return timeline_figure([]), [], ""
    chosen = json.loads(value)
    hardware, task = chosen["hardware"], task_from_dict(chosen["task"])
    every = read_store(current().store)
    runs = tuning_runs(every, hardware, task)
    default_us, label, note = _default(every, hardware, task)
    rows = [html.Tr([html.Th("run"), html.Th("trials"), html.Th("best µs"), html.Th("converged at trial"),
                     html.Th("vs default")])]
    for k, run in enumerate(runs, 1):
        times = [m.time_us for m in run]
        gain = f"{default_us / min(times):.3f}x" if default_us else "-"
        rows.append(html.Tr([html.Td(str(k)), html.Td(str(len(run))), html.Td(f"{min(times):,.1f}"),
                             html.Td(str(converged_at(times))), html.Td(gain)]))
    return timeline_figure(runs, default_us=default_us, default_label=label), rows, note


def _default(every, hardware: str, task) -> tuple[float | None, str, str]:
    """NCCL's default time of ``task``: measured if the store has it, else the twin's for a twin run."""
    measured = [m.time_us for m in default_measurements(every, hardware, task)]
    if measured:
        return fastest_share_mean(measured), "NCCL default (measured)", ""
    identity = parse_identity(hardware)
    if identity is None or identity.name not in [n for n, _ in list_presets()]:
        return None, "", "no measured NCCL default for this task in the store"
    try:
        cluster = CandidateCluster(preset=identity.name).build(identity.nodes)
        _, time_us = twin_default_time(cluster, task, params=current().params)
    except USER_ERRORS as err:
        return None, "", f"NCCL default not predicted: {err}"
    return time_us, "NCCL default (predicted)", ""


def _start(preset, nodes, op, size, search, seed):
    if current().store is None:
        raise InputError("no store to record into: start the dashboard with --store tuning.db")
    try:
        nbytes = parse_size(size or "")
    except ValueError as err:
        raise InputError(f"size {size!r}: {err}") from None
    if nbytes < 1:
        raise InputError("the message size must be at least 1 byte")
    cluster = CandidateCluster(preset=preset, nodes=optional_int(nodes, "nodes")).build()
    task = Communicator.first(cluster).task(parse_op(op), nbytes)
    return partial(_tune, store=current().store, params=current().params), (
        cluster, task, search, optional_int(seed, "seed", minimum=0) or 0)


def _tune(cluster, task, search, seed, *, store, params, on_progress):
    with Store(store) as db:
        trials, _ = tune_trajectory(cluster, task, search, seed=seed, store=db, params=params,
                                    on_trial=lambda n: on_progress(n, 0))
    return len(trials)


register_job("tune", states=[State("tune-preset", "value"), State("tune-nodes", "value"), State("tune-op", "value"),
                             State("tune-size", "value"), State("tune-search", "value"), State("tune-seed", "value")],
             outputs=[], start=_start, render=lambda n: (), unit="trials", auto=False)
