"""Pieces every page uses: a run button with a progress bar and a message line, wired to a
background job (``dashboards.jobs``), and small form helpers."""

from __future__ import annotations

from collections.abc import Callable

from dash import Input, Output, State, callback, dcc, html, no_update

from dashboards.inputs import decode_upload
from dashboards.measured import read_log_upload
from dashboards.state import current
from dashboards.twin_api import USER_ERRORS

POLL_MS = 400


def job_area(prefix: str, label: str = "Run") -> html.Div:
    """The run button, progress bar, progress text and message line of job ``prefix``; the text's
    ``title`` is the id of the job it shows (so a script can tell one run from the next)."""
    return html.Div(className="job", children=[
        html.Button(label, id=f"{prefix}-run", className="run"),
        html.Progress(id=f"{prefix}-progress", value="0", max="1"),
        html.Span(id=f"{prefix}-progress-text", className="progress-text"),
        html.Div(id=f"{prefix}-message", className="message", role="alert"),
        dcc.Interval(id=f"{prefix}-poll", interval=POLL_MS, disabled=True),
        dcc.Store(id=f"{prefix}-job"),
    ])


def register_job(prefix: str, *, states: list[State], outputs: list[Output], start: Callable, render: Callable,
                 unit: str = "steps", auto: bool = True, triggers: tuple[Input, ...] = ()) -> None:
    """Wire job ``prefix``: a click (and, with ``auto``, the page's first load) calls ``start(*state values)``, which
    returns ``(fn, args)`` to run in the background or raises a user error (shown as the message);
    when the job ends ``render(result)`` gives the values of ``outputs``. A change of any of
    ``triggers`` starts it too; their values come first in ``start``'s arguments."""
    @callback(Output(f"{prefix}-job", "data"), Output(f"{prefix}-poll", "disabled"),
              Output(f"{prefix}-message", "children", allow_duplicate=True), Input(f"{prefix}-run", "n_clicks"),
              *triggers, *states, prevent_initial_call="initial_duplicate" if auto else True)
    def _start(_clicks, *values):
        try:
            fn, args = start(*values)
        except USER_ERRORS as err:
            return None, True, str(err)
        return current().jobs.start(fn, *args), False, ""

    @callback(Output(f"{prefix}-progress", "value"), Output(f"{prefix}-progress", "max"),
              Output(f"{prefix}-progress-text", "children"), Output(f"{prefix}-progress-text", "title"),
              Output(f"{prefix}-poll", "disabled", allow_duplicate=True),
              Output(f"{prefix}-message", "children", allow_duplicate=True), *outputs,
              Input(f"{prefix}-poll", "n_intervals"), State(f"{prefix}-job", "data"), prevent_initial_call=True)
    def _poll(_n, job):
        if not job:
            return (no_update,) * (6 + len(outputs))
        status = current().jobs.status(job)
        text = f"{status.done} of {status.total} {unit}" if status.total else (
            f"{status.done} {unit}" if status.done else "starting…")
        if not status.finished:
            running = (str(status.done), str(max(status.total, 1)), text, job, False, no_update)
            return running + (no_update,) * len(outputs)
        if status.error is not None:
            return ("0", "1", "", job, True, status.error) + (no_update,) * len(outputs)
        return ("1", "1", f"done: {text}", job, True, "", *render(status.result))


def job_result(job: str | None):
    """The result of a finished job (``None`` while it runs, after an error, or without a job)."""
    status = current().jobs.status(job) if job else None
    return None if status is None or not status.finished else status.result


def field(label: str, control) -> html.Label:
    """A labelled control."""
    return html.Label(className="field", children=[html.Span(label), control])


def number(id_: str, value, *, width: str = "6em") -> dcc.Input:
    """A text box for a number; text, so that a bad value reaches the parser and gets a message."""
    return dcc.Input(id=id_, type="text", value="" if value is None else str(value), debounce=True,
                     style={"width": width}, inputMode="decimal")


def log_upload(prefix: str) -> html.Div:
    """An upload box for nccl-tests logs, the names of those loaded, and where their keys are kept."""
    return html.Div(className="controls", children=[
        dcc.Upload(id=f"{prefix}-log-upload", className="upload", multiple=False,
                   children=html.Span("drop or click: an nccl-tests log to overlay")),
        html.Span(id=f"{prefix}-log-names", className="note"),
        html.Span(id=f"{prefix}-log-message", className="message", role="alert"),
        dcc.Store(id=f"{prefix}-logs", data=[]),
    ])


def register_log_upload(prefix: str) -> None:
    """Read an uploaded log into the app's state; its key joins ``{prefix}-logs``, or its error shows."""

    @callback(Output(f"{prefix}-logs", "data"), Output(f"{prefix}-log-names", "children"),
              Output(f"{prefix}-log-message", "children"), Input(f"{prefix}-log-upload", "contents"),
              State(f"{prefix}-log-upload", "filename"), State(f"{prefix}-logs", "data"), prevent_initial_call=True)
    def _upload(contents, filename, keys):
        try:
            measurements = read_log_upload(filename or "upload.log", decode_upload(filename or "upload.log", contents))
        except USER_ERRORS as err:
            return no_update, no_update, str(err)
        if not measurements:
            return no_update, no_update, f"upload {filename!r}: no timed rows in the log"
        key = f"log{len(current().logs) + 1}: {filename}"
        current().logs[key] = measurements
        keys = [*(keys or []), key]
        return keys, "loaded: " + ", ".join(k.split(": ", 1)[1] for k in keys), ""
