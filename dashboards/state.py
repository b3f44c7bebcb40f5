"""What one running dashboard knows: the store and profile it was started with, its background
jobs, and the files users uploaded. It lives in the Flask app's config, so a page's callback
reaches it through ``current()`` and two apps in one process never share it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import flask

from dashboards.jobs import Jobs
from dashboards.twin_api import profile_label
from dashboards.workloads import WorkloadChoice
from tuner.measurement import Measurement

KEY = "CCLTWIN_DASHBOARD"


@dataclass
class AppState:
    store: Path | None = None
    """The tuning store the timeline, explorer and calibration pages read (``None``: none given)."""
    profile: str | None = None
    params: object | None = None
    """The twin parameters of ``profile`` (``None``: the twin's default constants)."""
    engine: str = "local"
    """Where sweeps run: ``dashboards.parallel.ENGINES``."""
    jobs: Jobs = field(default_factory=Jobs)
    uploads: dict[str, WorkloadChoice] = field(default_factory=dict)
    logs: dict[str, list[Measurement]] = field(default_factory=dict)

    @property
    def constants(self) -> str:
        return profile_label(self.params) if self.profile is None else f"profile {Path(self.profile).name}"


def current() -> AppState:
    """The state of the app serving the current request."""
    return flask.current_app.config[KEY]
