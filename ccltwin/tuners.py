"""``--tuner NAME`` / ``--tuner-config FILE``: the NCCL tuner a command's clusters run with.

Without either, a cluster runs the tuner its description gives (``fabric.tuner``, ``tuner_config``,
or its fabric kind's: aws-ofi-nccl on EFA, Google's gIB tables on ``gib-a3u``/``gib-a4``).
``--tuner none`` is stock NCCL's own choice; ``--tuner aws-ofi-nccl`` the EFA net plugin's tuner (on
the instance the description names); ``--tuner gib-a3u``/``gib-a4`` Google's gIB tuner with its
bundled table; ``--tuner-config FILE`` Google's gIB tuner with a config of your own, in the text
format Google ships (``twin.nccl_model.gib_txtpb``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from traces.errors import CcltwinError
from twin.hardware import TUNER_PLUGINS
from twin.nccl_model.gib_tuner import TUNER_CONFIGS
from twin.nccl_model.gib_txtpb import read_txtpb

__all__ = ["TUNERS", "TunerConfigOption", "TunerOption", "tuner_overrides"]

TUNERS = (*TUNER_PLUGINS, *TUNER_CONFIGS)
"""What ``--tuner`` names: a tuner plugin, or Google's gIB tuner with a bundled table."""

TunerOption = Annotated[str | None, typer.Option(
    "--tuner", help=f"NCCL's tuner: {', '.join(TUNERS)} (none: stock NCCL's choice; default: the cluster's own).")]
TunerConfigOption = Annotated[Path | None, typer.Option(
    "--tuner-config", help="Google's gIB tuner with this config (its text format, .txtpb) instead of --tuner.")]


def tuner_overrides(tuner: str | None, tuner_config: Path | None) -> dict[str, str | None]:
    """``load_cluster``'s ``tuner``/``tuner_config`` for the options (empty: the clusters' own); a
    config file is read here, so a bad one is refused before anything runs.

    >>> tuner_overrides("gib-a4", None), tuner_overrides("none", None), tuner_overrides(None, None)
    ({'tuner': None, 'tuner_config': 'gib-a4'}, {'tuner': 'none', 'tuner_config': None}, {})
    """
    if tuner is not None and tuner_config is not None:
        raise CcltwinError(f"--tuner {tuner} and --tuner-config {tuner_config}: NCCL loads one tuner; give one")
    if tuner_config is not None:
        read_txtpb(tuner_config)
        return {"tuner": None, "tuner_config": str(tuner_config.resolve())}
    if tuner is None:
        return {}
    if tuner not in TUNERS:
        raise CcltwinError(f"--tuner {tuner}: unknown tuner (known: {', '.join(TUNERS)})")
    return {"tuner": None, "tuner_config": tuner} if tuner in TUNER_CONFIGS else {"tuner": tuner, "tuner_config": None}
