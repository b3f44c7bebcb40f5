"""The ccltwin dashboard: a Dash app on localhost with one page per question.

    serve(store="tuning.db", port=8050)     # ccltwin dashboard --store tuning.db --port 8050

Pages (``dashboards/pages``): cluster what-if (``/``), collective explorer (``/collectives``),
configuration landscape (``/landscape``), tuning timeline (``/timeline``) and calibration
(``/calibration``). Long computations run as background jobs (``dashboards.jobs``) whose progress
the page polls; sweeps fan out to processes (or Ray, ``engine="ray"``).
"""

from __future__ import annotations

from os import PathLike
from pathlib import Path

import dash
from dash import dcc, html

from dashboards.state import KEY, AppState
from dashboards.twin_api import Store, load_profile

HERE = Path(__file__).parent


def create_app(store: str | PathLike[str] | None = None, profile: str | PathLike[str] | None = None, *,
               engine: str = "local") -> dash.Dash:
    """The app, not yet serving. Raises ``StoreError`` for a store that cannot be opened and a user
    error for a profile that cannot be loaded, before anything starts."""
    if store is not None:
        Store(store, create=False).close()
    state = AppState(store=None if store is None else Path(store), profile=None if profile is None else str(profile),
                     params=load_profile(profile), engine=engine)
    app = dash.Dash(__name__, use_pages=True, pages_folder=str(HERE / "pages"), assets_folder=str(HERE / "assets"),
                    title="ccltwin dashboard", suppress_callback_exceptions=True)
    app.server.config[KEY] = state
    links = [dcc.Link(page["name"], href=page["relative_path"]) for page in dash.page_registry.values()]
    app.layout = html.Div([
        html.Div(className="header", children=[html.Span("ccltwin", className="brand"), *links,
                                               html.Span(_source_line(state), className="note")]),
        html.Div(className="page", children=dash.page_container),
    ])
    return app


def _source_line(state: AppState) -> str:
    store = f"store {state.store.name}" if state.store else "no store"
    return f"{store} · twin: {state.constants}"


def serve(store: str | PathLike[str] | None = None, profile: str | PathLike[str] | None = None, port: int = 8050, *,
          host: str = "127.0.0.1", engine: str = "local", debug: bool = False) -> None:
    """Serve the dashboard on ``host:port`` until interrupted (``ccltwin dashboard``)."""
    create_app(store, profile, engine=engine).run(host=host, port=port, debug=debug)
