"""``--profile PROFILE.json``: the twin's constants a command predicts with, and how its output names them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from twin.params import DEFAULT_PARAMS, TwinParams
from twin.profile import load_profile

__all__ = ["ProfileOption", "params_of"]

ProfileOption = Annotated[Path | None, typer.Option(
    "--profile", help="A calibration profile of the twin's constants (JSON; default: the built-in constants).")]


def params_of(profile: Path | None) -> tuple[TwinParams, str]:
    """The parameters of ``profile`` (the defaults when ``None``) and the words output headers use for them."""
    if profile is None:
        return DEFAULT_PARAMS, "default constants"
    return load_profile(profile).params, f"profile {profile}"
