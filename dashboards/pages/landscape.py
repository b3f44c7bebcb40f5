"""Configuration landscape: for one task, the subspaces ranked, the predicted time over channels ×
chunk (per thread count) of one subspace as a heatmap, and a tuner's trials drawn on it."""

from __future__ import annotations

from functools import partial

import dash
from dash import Input, Output, State, callback, dcc, html, no_update

from dashboards.clusters import CandidateCluster
from dashboards.components import field, job_area, job_result, number, register_job
from dashboards.explore import landscape
from dashboards.figures.common import placeholder
from dashboards.figures.landscape import default_threads, heatmap_figure, ranking_figure
from dashboards.inputs import InputError, optional_int
from dashboards.state import current
from dashboards.twin_api import SEARCHES
from traces.units import parse_size
from twin.topology import list_presets

dash.register_page(__name__, path="/landscape", name="Configuration landscape", order=2)

layout = html.Div([
    html.H2("Configuration landscape of one task"),
    html.P("Every ⟨algorithm, protocol, transport⟩ the search space admits, its best ⟨channels, threads, chunk⟩ "
           "by the twin's fast path; the heatmap is one subspace's whole grid at one thread count, with the trials "
           "of a search run in the twin (2% measurement noise) on it.", className="note"),
    html.Div(className="controls", children=[
        field("cluster", dcc.Dropdown(id="land-preset", options=[n for n, _ in list_presets()], value="dgx-h100",
                                      clearable=False, style={"width": "12em"})),
        field("nodes", number("land-nodes", 1, width="3em")),
        field("collective", dcc.Dropdown(id="land-op", options=["allreduce", "allgather", "reducescatter",
                                                                 "broadcast", "alltoall"], value="allreduce",
                                         clearable=False, style={"width": "10em"})),
        field("size", dcc.Input(id="land-size", type="text", value="64MiB", debounce=True, style={"width": "6em"})),
        field("ranks (empty: all)", number("land-nranks", "", width="3em")),
        field("search", dcc.Dropdown(id="land-search", options=list(SEARCHES), value="autoccl", clearable=False,
                                     style={"width": "9em"})),
        field("seed", number("land-seed", 0, width="3em")),
        field("subspace (empty: fastest)", dcc.Dropdown(id="land-subspace", style={"width": "13em"})),
    ]),
    job_area("land", "Rank and tune"),
    html.Table(id="land-numbers", className="numbers"),
    dcc.Graph(id="land-ranking", figure=placeholder("the ranked subspaces appear here")),
    html.Div(className="controls", children=[
        field("threads", dcc.Dropdown(id="land-threads", clearable=False, style={"width": "7em"}))]),
    dcc.Graph(id="land-heatmap", figure=placeholder("the heatmap appears here")),
])


def _start(preset, nodes, op, size, nranks, search, seed, subspace):
    try:
        nbytes = parse_size(size or "")
    except ValueError as err:
        raise InputError(f"size {size!r}: {err}") from None
    candidate = CandidateCluster(preset=preset, nodes=optional_int(nodes, "nodes"))
    fn = partial(_run, params=current().params)
    return fn, (candidate, op, nbytes, optional_int(nranks, "ranks"), subspace, search,
                optional_int(seed, "seed", minimum=0) or 0)


def _run(candidate, op, nbytes, nranks, subspace, search, seed, *, params, on_progress):
    return landscape(candidate, op, nbytes, nranks, subspace=subspace, search=search, seed=seed, params=params,
                     on_trial=lambda n: on_progress(n, 0))


def _render(ls):
    constants = current().constants
    rows = [html.Tr([html.Th("subspace"), html.Th("best config"), html.Th("µs")])]
    rows += [html.Tr([html.Td(str(r.subspace)), html.Td(str(r.config)), html.Td(f"{r.time_us:,.1f}")])
             for r in ls.entry.ranked]
    rows.append(html.Tr([html.Td("NCCL default"), html.Td(str(ls.entry.default.config)),
                         html.Td(f"{ls.entry.default.time_us:,.1f}")]))
    winner, best_us = min(ls.trials, key=lambda ct: ct[1]) if ls.trials else (None, None)
    if winner is not None:
        rows.append(html.Tr([html.Td(f"{ls.search} winner ({len(ls.trials)} trials)"), html.Td(str(winner)),
                             html.Td(f"{best_us:,.1f}")]))
    threads = list(ls.grid.times)
    best_nt = default_threads(ls)
    return (rows, ranking_figure(ls, constants=constants), [str(r.subspace) for r in ls.entry.ranked],
            threads, best_nt, heatmap_figure(ls, best_nt, constants=constants))


register_job("land", states=[State("land-preset", "value"), State("land-nodes", "value"), State("land-op", "value"),
                             State("land-size", "value"), State("land-nranks", "value"), State("land-search", "value"),
                             State("land-seed", "value"), State("land-subspace", "value")],
             outputs=[Output("land-numbers", "children"), Output("land-ranking", "figure"),
                      Output("land-subspace", "options"), Output("land-threads", "options"),
                      Output("land-threads", "value"), Output("land-heatmap", "figure", allow_duplicate=True)],
             start=_start, render=_render, unit="trials")


@callback(Output("land-heatmap", "figure"), Input("land-threads", "value"), State("land-job", "data"),
          prevent_initial_call=True)
def _threads(nthreads, job):
    result = job_result(job)
    if result is None:
        return no_update
    return heatmap_figure(result, nthreads, constants=current().constants)
