"""One string names a cluster on plans, measurements and the store: ``dgx-h100:8x2``.

Two DGX H100 nodes described by the preset ``dgx-h100`` are ``dgx-h100:8x2``: the name of the
description (a preset or a cluster file's ``name``), a colon, and the cluster's shape written as
a task's group shape is (``traces.task.GROUP_SHAPE``): G GPUs on each of N nodes, ``GxN``. The
twin's clusters (``twin.topology.Cluster.identity``) and a live job (which knows its world size
and its ranks per node) build it with ``cluster_identity``, so a live measurement is matched back
to the twin's cluster by it. Where a time came from (twin, live job, nccl-tests log) is a
measurement's ``source``, never part of the identity.

Hardware ids that are not a cluster ccltwin built (the first clause of an nccl-tests log's
``# HARDWARE:`` line, an id given with ``--hardware``) stay as given; ``parse_identity``
returns ``None`` for them. Files written before identities existed named clusters otherwise
(a plan: ``dgx-h100 (2 node(s) x 8 H100-SXM5-80GB)``; the twin executor's measurements:
``twin:dgx-h100``); readers pass what they read through ``normalise_identity``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ClusterIdentity", "cluster_identity", "normalise_identity", "parse_identity"]

_IDENTITY = re.compile(r"(?P<name>.+):(?P<gpus>[1-9]\d*)x(?P<nodes>[1-9]\d*)")
_OLD_PLAN_LABEL = re.compile(r"(?P<name>.+) \((?P<nodes>[1-9]\d*) node\(s\) x (?P<gpus>[1-9]\d*) [^()]+\)")
"""What a plan's ``cluster`` held before identities (``Cluster.label``)."""
_OLD_TWIN_PREFIX = "twin:"
"""What the twin executor put before the cluster's name in a measurement's ``hardware``."""


@dataclass(frozen=True, slots=True)
class ClusterIdentity:
    """A cluster's description name and shape; ``str()`` gives the identity string.

    >>> str(ClusterIdentity("dgx-h100", gpus_per_node=8, nodes=2))
    'dgx-h100:8x2'
    """

    name: str
    """The preset's or cluster file's name (``dgx-h100``)."""
    gpus_per_node: int
    nodes: int

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip() or not self.name.isprintable():
            raise ValueError(f"a cluster name must be one printable line without surrounding spaces, got {self.name!r}")
        for field in ("gpus_per_node", "nodes"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field} must be a positive integer, got {value!r}")

    def __str__(self) -> str:
        return f"{self.name}:{self.gpus_per_node}x{self.nodes}"


def cluster_identity(name: str, *, nodes: int, gpus_per_node: int) -> str:
    """The identity string of ``nodes`` nodes of ``gpus_per_node`` GPUs described by ``name``.

    >>> cluster_identity("a40-pcie", nodes=4, gpus_per_node=1)
    'a40-pcie:1x4'
    """
    return str(ClusterIdentity(name, gpus_per_node=gpus_per_node, nodes=nodes))


def parse_identity(text: str) -> ClusterIdentity | None:
    """The cluster an identity string names; ``None`` for any other hardware id.

    >>> parse_identity("dgx-h100:8x2")
    ClusterIdentity(name='dgx-h100', gpus_per_node=8, nodes=2)
    >>> parse_identity("Azure ND A100 v4 (ND96asr_v4)") is None
    True
    """
    match = _IDENTITY.fullmatch(text)
    if match is None or match["name"] != match["name"].strip() or not match["name"].isprintable():
        return None
    return ClusterIdentity(match["name"], gpus_per_node=int(match["gpus"]), nodes=int(match["nodes"]))


def normalise_identity(text: str) -> str:
    """``text`` as this ccltwin names the cluster, read from a file any version wrote.

    An old plan's label becomes the identity; an old twin measurement's ``twin:NAME`` becomes
    ``NAME`` (it never recorded the node count); anything else is returned as it is.

    >>> normalise_identity("dgx-h100 (2 node(s) x 8 H100-SXM5-80GB)")
    'dgx-h100:8x2'
    >>> normalise_identity("twin:dgx-h100"), normalise_identity("dgx-h100:8x2"), normalise_identity("h100-a")
    ('dgx-h100', 'dgx-h100:8x2', 'h100-a')
    """
    old_label = _OLD_PLAN_LABEL.fullmatch(text)
    if old_label is not None:
        return cluster_identity(old_label["name"], nodes=int(old_label["nodes"]), gpus_per_node=int(old_label["gpus"]))
    if text.startswith(_OLD_TWIN_PREFIX) and len(text) > len(_OLD_TWIN_PREFIX) and parse_identity(text) is None:
        return text[len(_OLD_TWIN_PREFIX):]
    return text
