"""The one string that names the cluster a live job's measurements belong to.

Measurements of a live job are matched to the twin's cluster and to other runs by this
identity (``name:GxN``, G GPUs on each of N nodes, as ``tuner.identity`` spells it): given
explicitly (``live.enable(hardware=...)``), else the time source's when it has one (in CI the
twin's cluster, whose predictions the times are), else the warm-start plan's cluster, else the
GPU's name and the job's shape.
"""

from __future__ import annotations

import re

from tuner.identity import cluster_identity
from tuner.plan import Plan

__all__ = ["job_hardware"]


def job_hardware(*, hardware: str | None, source_hardware: str, plan: Plan | None, world: int,
                 local_world: int, device_name: str | None) -> str:
    """The identity of the job's cluster (see the module docstring).

    >>> job_hardware(hardware=None, source_hardware="", plan=None, world=16, local_world=8,
    ...              device_name="NVIDIA H200")
    'nvidia-h200:8x2'
    """
    if hardware:
        return hardware
    if source_hardware:
        return source_hardware
    if plan is not None:
        return plan.cluster
    name = re.sub(r"[^a-z0-9]+", "-", (device_name or "cpu").lower()).strip("-")
    return cluster_identity(name, nodes=max(world // local_world, 1), gpus_per_node=local_world)
