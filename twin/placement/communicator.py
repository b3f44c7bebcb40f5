"""A communicator on a cluster: the GPUs its calls run on and what NCCL's init finds there.

Sixteen ranks of an all-reduce on two DGX H100 nodes are ``Communicator.first(cluster, 16)``:
its ``nccl`` is what NCCL's init would find on those GPUs (channels, NVLS, tree shape), its
``geometry`` how a call's flows use the links, and ``schedule(task, config)`` how one call with a
given configuration runs (``twin.model``).  A call of a trace's group among part of the group (a
SendRecv pair) runs on the part's GPUs with NCCL's view of the whole communicator:
``comm.among(pair)``.  Facts are worked out once, when first asked.

A task given without a trace is placed by its group shape (``GxN``: the first G GPUs of each of
N nodes): ``task_shape`` reads the shape and ``TaskPlacement`` keeps one communicator per shape.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from traces.errors import CcltwinError
from traces.task import Op, Task
from tuner.config import Config, Transport
from tuner.knobs import DEFAULT_NCCL_VERSION
from twin.model.geometry import CommGeometry
from twin.model.schedule import Schedule, build_schedule
from twin.nccl_model import NcclCommInfo, nccl_choice
from twin.nccl_model.search import comm_info
from twin.params import DEFAULT_PARAMS, TwinParams
from twin.topology import Cluster, TopologyError

__all__ = ["Communicator", "PlacementError", "TaskPlacement", "describe", "first_gpus", "task_shape"]

_GRID_SHAPE = re.compile(r"(\d+)x(\d+)")


class PlacementError(CcltwinError):
    """Ranks that cannot be placed on the cluster (too few GPUs, a group NCCL could not form)."""


def first_gpus(cluster: Cluster, nranks: int | None) -> list[str]:
    """The GPUs of an ``nranks`` communicator: whole nodes in order, or the first GPUs of one node
    (every GPU when ``nranks`` is ``None``); ``TopologyError`` when that is not possible.

    >>> from twin.topology import load_cluster
    >>> first_gpus(load_cluster("dgx-h100", nodes=2), 2)
    ['n0/gpu0', 'n0/gpu1']
    """
    gpus = cluster.gpus()
    if nranks is None:
        return gpus
    if not 1 <= nranks <= len(gpus):
        raise TopologyError(f"--nranks {nranks}: the cluster has {len(gpus)} GPUs")
    per_node = cluster.gpus_per_node
    if nranks > per_node and nranks % per_node:
        raise TopologyError(f"--nranks {nranks} does not fill whole nodes of {per_node} GPUs; "
                            f"use a multiple of {per_node} or --gpus-per-node")
    return gpus[:nranks]


class Communicator:
    """One NCCL communicator's calls on ``cluster``: among ``gpus`` (in rank order), with what NCCL's
    init finds on the whole communicator (these GPUs, unless made by ``among``).

    ``params`` are the twin's physical constants every geometry and schedule of the
    communicator is computed with.
    """

    def __init__(self, cluster: Cluster, gpus: Sequence[str], *, gpus_per_process: int = 1,
                 nccl_version: tuple[int, int, int] = DEFAULT_NCCL_VERSION,
                 params: TwinParams = DEFAULT_PARAMS) -> None:
        self.cluster = cluster
        self.gpus = tuple(gpus)
        self.gpus_per_process = gpus_per_process
        """GPUs one host thread drives (nccl-tests' ``-g``)."""
        self.nccl_version = nccl_version
        self.params = params
        self._whole: Communicator | None = None
        self._nccl: NcclCommInfo | None = None
        self._geoms: dict[Transport, CommGeometry] = {}

    @classmethod
    def first(cls, cluster: Cluster, nranks: int | None = None, **options) -> Communicator:
        """The communicator of ``first_gpus(cluster, nranks)``; ``options`` as ``Communicator`` takes them."""
        return cls(cluster, first_gpus(cluster, nranks), **options)

    def among(self, gpus: Sequence[str]) -> Communicator:
        """Calls of this communicator among some of its GPUs (a SendRecv pair): their geometry,
        this communicator's NCCL facts."""
        part = Communicator(self.cluster, gpus, gpus_per_process=self.gpus_per_process,
                            nccl_version=self.nccl_version, params=self.params)
        part._whole = self
        return part

    def with_params(self, params: TwinParams) -> Communicator:
        """This communicator with other physical constants; NCCL's facts and the parameter-free
        part of its geometries are shared (``CommGeometry.with_params``)."""
        other = Communicator(self.cluster, self.gpus, gpus_per_process=self.gpus_per_process,
                             nccl_version=self.nccl_version, params=params)
        other._whole = self._whole
        other._nccl = self._nccl
        other._geoms = {t: g.with_params(params) for t, g in self._geoms.items()}
        return other

    def __repr__(self) -> str:
        of = f" of a communicator of {len(self._whole.gpus)}" if self._whole is not None else ""
        return f"Communicator({self.cluster.name!r}: {len(self.gpus)} GPUs{of}, {self.gpus[0]}…)"

    @property
    def nranks(self) -> int:
        return len(self.gpus)

    @property
    def nccl(self) -> NcclCommInfo:
        """What NCCL's init finds on the whole communicator."""
        if self._whole is not None:
            return self._whole.nccl
        if self._nccl is None:
            self._nccl = comm_info(self.cluster, list(self.gpus), nccl_version=self.nccl_version)
        return self._nccl

    def geometry(self, transport: Transport = Transport.P2P) -> CommGeometry:
        """The geometry of the GPUs a call runs on; ``PlacementError`` when NCCL could not form it."""
        if transport not in self._geoms:
            try:
                self._geoms[transport] = CommGeometry(self.cluster, list(self.gpus), transport, params=self.params,
                                                      nccl_version=self.nccl_version)
            except CcltwinError as err:
                raise PlacementError(f"a communicator on GPUs {', '.join(self.gpus)} cannot be placed: {err}") from None
        return self._geoms[transport]

    def task(self, op: Op, nbytes: int, dtype: str = "float32") -> Task:
        """The task of ``op`` on ``nbytes`` here, its group written as the ``GxN`` shape of the GPUs."""
        nodes = self.geometry().nnodes
        return Task(op=op, nbytes=nbytes, nranks=self.nranks, dtype=dtype, group=f"{self.nranks // nodes}x{nodes}")

    def default_config(self, task: Task) -> Config:
        """What stock NCCL picks for ``task`` here."""
        choice = nccl_choice(self.nccl, task.op, task.nbytes, task.dtype)
        return Config(choice.algo, choice.proto, Transport.P2P, choice.nchannels, choice.nthreads, choice.chunk_bytes)

    def schedule(self, task: Task, config: Config) -> Schedule:
        """How one call of ``task`` with ``config`` runs here (raises ``Unsupported``)."""
        return build_schedule(self.geometry(config.transport), task.op, task.nbytes, config,
                              gpus_per_process=self.gpus_per_process)


def task_shape(task: Task, gpus_per_node: int) -> tuple[tuple[int, int], str | None]:
    """``((gpus per node, nodes), note)`` of a task given without a trace, on nodes of ``gpus_per_node``.

    A ``"GxN"`` group shape is taken as it is; otherwise the group fills whole nodes, and the
    note says so. (Tasks of a trace are placed by their ranks instead: ``Placement``.)

    >>> task_shape(Task(Op.ALLREDUCE, 1 << 20, 16, group="1x16"), 8)
    ((1, 16), None)
    >>> task_shape(Task(Op.ALLREDUCE, 1 << 20, 4, group="tp"), 8)[0]
    (4, 1)
    """
    match = _GRID_SHAPE.fullmatch(task.group)
    if match and int(match[1]) * int(match[2]) == task.nranks:
        return (int(match[1]), int(match[2])), None
    n = task.nranks
    if n <= gpus_per_node:
        shape = (n, 1)
    elif n % gpus_per_node == 0:
        shape = (gpus_per_node, n // gpus_per_node)
    else:
        raise PlacementError(f"{describe(task)}: {n} ranks do not fill whole nodes of {gpus_per_node} GPUs, and the "
                        "task does not say where they run")
    return shape, f"group {task.group!r} of {n} ranks: nodes unknown; modelled as {shape[0]}x{shape[1]}"


class TaskPlacement:
    """Communicators of tasks given without a trace on ``cluster``: each on the first G GPUs of N
    nodes its shape names (``task_shape``), one communicator per shape."""

    def __init__(self, cluster: Cluster, *, nccl_version: tuple[int, int, int] = DEFAULT_NCCL_VERSION,
                 params: TwinParams = DEFAULT_PARAMS) -> None:
        self.cluster = cluster
        self.nccl_version = nccl_version
        self.params = params
        self._comms: dict[tuple[int, int], Communicator] = {}

    def place(self, task: Task) -> tuple[Communicator, str | None]:
        """The communicator ``task`` runs on, and the note of ``task_shape``; ``PlacementError``
        when its shape does not fit on the cluster."""
        (gpus, nodes), note = task_shape(task, self.cluster.gpus_per_node)
        c = self.cluster
        if nodes > c.nodes or gpus > c.gpus_per_node:
            raise PlacementError(f"{describe(task)}: needs {nodes} node(s) of {gpus} GPUs; cluster {c.name!r} has "
                                 f"{c.nodes} node(s) of {c.gpus_per_node} (try --nodes)")
        if (gpus, nodes) not in self._comms:
            sub = c.subset(nodes=nodes, gpus_per_node=gpus)
            self._comms[(gpus, nodes)] = Communicator.first(sub, nccl_version=self.nccl_version, params=self.params)
        return self._comms[(gpus, nodes)], note


def describe(task: Task) -> str:
    """``allreduce 1048576 B float32 on 8 ranks group tp:0``: a task in a message."""
    group = f" group {task.group}" if task.group else ""
    return f"{task.op} {task.nbytes} B {task.dtype} on {task.nranks} ranks{group}"
