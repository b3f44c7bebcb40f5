"""``ccltwin dashboard``: the what-if, explorer, tuning and calibration pages on localhost.

    ccltwin dashboard --store tuning.db --profile h200.json --port 8050
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ccltwin.profiles import ProfileOption
from traces.errors import CcltwinError


def dashboard(
    store: Annotated[Path | None, typer.Option(help="A tuning store (SQLite) for the timeline, measured curves and "
                                                    "calibration pages.")] = None,
    profile: ProfileOption = None,
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port.")] = 8050,
    host: Annotated[str, typer.Option(help="Address to listen on (localhost only by default).")] = "127.0.0.1",
    engine: Annotated[str, typer.Option(help="Where sweeps run: local (processes) or ray.")] = "local",
) -> None:
    """Serve the dashboard until Ctrl-C (docs/dashboards.md)."""
    if engine not in ("local", "ray"):
        raise CcltwinError(f"--engine {engine}: expected local or ray")
    from dashboards.app import serve  # dash loads only for this command (it prints where it listens)

    serve(store=store, profile=profile, port=port, host=host, engine=engine)
