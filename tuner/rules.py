"""Which ⟨algo, proto, transport⟩ subspaces NCCL can run for an op on a communicator, and why not.

An AllGather on 8 GPUs of one NVSwitch node can run Ring (LL, LL128, Simple) and NVLS
(Simple only), but not Tree (NCCL has no Tree AllGather) nor PAT (one GPU per node only).
:func:`subspace_problem` answers such questions from plain facts, with the reason.  The table
of kernels NCCL has (:func:`implementation_problem`) and the rules of a communicator's shape
(:func:`layout_problem`) are the ones the twin's model and its emulation of NCCL's cost model
read too.

Facts carried over from NCCL (research/nccl-mechanisms.md; ``src/enqueue.cc``, ``src/graph``):
the algorithms each op implements, NVLS/CollNet/PAT running the Simple protocol only, NVLS
needing NVSwitch multicast (NVLS Tree more than one node, multi-node NVLS AllReduce only), PAT
(NCCL ≥ 2.23) needing one GPU per node, CollNet needing in-network reduction, AllToAll and
SendRecv being point-to-point with Simple.
"""

from __future__ import annotations

from dataclasses import dataclass

from traces.task import Op
from tuner.config import Algo, Proto, Subspace, Transport
from tuner.knobs import DEFAULT_NCCL_VERSION

ALGORITHMS_FOR_OP = {
    Op.ALLREDUCE: (Algo.RING, Algo.TREE, Algo.NVLS, Algo.NVLS_TREE, Algo.COLLNET_DIRECT, Algo.COLLNET_CHAIN),
    Op.ALLGATHER: (Algo.RING, Algo.PAT, Algo.NVLS, Algo.COLLNET_DIRECT),
    Op.REDUCESCATTER: (Algo.RING, Algo.PAT, Algo.NVLS, Algo.COLLNET_DIRECT),
    Op.BROADCAST: (Algo.RING,),
    Op.REDUCE: (Algo.RING,),
    Op.ALLTOALL: (Algo.RING,),
    Op.SENDRECV: (Algo.RING,),
}
"""Algorithms NCCL implements for each op; AllToAll and SendRecv are point-to-point, named RING."""

SIMPLE_ONLY = frozenset({Algo.NVLS, Algo.NVLS_TREE, Algo.COLLNET_DIRECT, Algo.COLLNET_CHAIN, Algo.PAT})
"""Algorithms NCCL runs with the Simple protocol only."""

POINT_TO_POINT = (Op.ALLTOALL, Op.SENDRECV)
"""Ops NCCL runs as point-to-point sends and receives (Simple protocol only), not as collectives."""

SINGLE_RANK = "a 1-rank communicator copies locally; nothing to tune"
"""Why no subspace applies on a communicator of one rank (except SendRecv, a copy to oneself)."""

TRANSPORT_AWARE = frozenset({Algo.RING, Algo.TREE})
"""Algorithms whose intra-node hops go over the chosen transport (NVLS uses NVSwitch multicast,
CollNet the network, PAT one GPU per node), so only these have P2P/SHM/NET variants."""

PAT_SINCE = (2, 23, 4)
"""The first NCCL release with the PAT algorithm."""


@dataclass(frozen=True, kw_only=True)
class CommFacts:
    """What decides the config space of a communicator, as plain facts the caller knows.

    A DGX H100 node is ``CommFacts(nranks=8, nnodes=1, sm_count=132, sm_version=90, nvls=True)``.
    """

    nranks: int
    nnodes: int
    sm_count: int
    """Streaming multiprocessors per GPU (each channel is one CTA on one SM)."""
    sm_version: int
    """Compute capability × 10 (90 for H100)."""
    nccl_version: tuple[int, int, int] = DEFAULT_NCCL_VERSION
    nvls: bool = False
    """NVLink SHARP (NVSwitch multicast) is available and enabled."""
    collnet: bool = False
    """In-network reduction (SHARP on the fabric) is available and enabled."""
    pat: bool = True
    """PAT is not disabled (it still needs NCCL ≥ 2.23 and one GPU per node)."""
    ll128: bool = True
    """The LL128 protocol can be used (stock NCCL enables it only on NVLink platforms; forcing it
    elsewhere takes ``NCCL_PROTO`` at communicator init)."""
    max_channels: int | None = None
    """The build's ``MAXCHANNELS`` (``None``: the release's, 32 before 2.25 and 64 after)."""
    channel_cap: int | None = None
    """``comm->nChannels`` of the live communicator: a per-call tuner cannot go above it; raising
    it takes a new communicator (``minCTAs``/``maxCTAs`` at init).  ``None``: not bounded."""
    transports: tuple[Transport, ...] = (Transport.P2P,)
    """Intra-node transports the executor can select."""

    def __post_init__(self) -> None:
        if self.nranks < 1:
            raise ValueError(f"nranks must be ≥ 1, got {self.nranks}")
        if not 1 <= self.nnodes <= self.nranks or self.nranks % self.nnodes:
            raise ValueError(f"nnodes {self.nnodes} must divide nranks {self.nranks}")
        if self.sm_count < 1:
            raise ValueError(f"sm_count must be ≥ 1, got {self.sm_count}")
        for name in ("max_channels", "channel_cap"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be ≥ 1, got {value}")
        if not self.transports:
            raise ValueError("transports must name at least one transport")

    @property
    def ppn(self) -> int:
        """Ranks per node."""
        return self.nranks // self.nnodes

    def as_dict(self) -> dict:
        return {
            "nranks": self.nranks, "nnodes": self.nnodes, "sm_count": self.sm_count,
            "sm_version": self.sm_version, "nccl_version": list(self.nccl_version), "nvls": self.nvls,
            "collnet": self.collnet, "pat": self.pat, "ll128": self.ll128, "max_channels": self.max_channels,
            "channel_cap": self.channel_cap,
            "transports": [str(t) for t in self.transports],
        }


def implementation_problem(op: Op, algo: Algo, proto: Proto) -> str | None:
    """Why NCCL has no kernel for ``op`` with ``algo`` and ``proto``, or ``None`` if it has one.

    >>> implementation_problem(Op.ALLREDUCE, Algo.NVLS, Proto.LL)
    'nvls runs only with the simple protocol'
    >>> implementation_problem(Op.REDUCESCATTER, Algo.PAT, Proto.SIMPLE) is None
    True
    """
    if algo not in ALGORITHMS_FOR_OP[op]:
        names = ", ".join(a.value for a in ALGORITHMS_FOR_OP[op])
        return f"{op} has no {algo} algorithm (NCCL offers {names})"
    if algo in SIMPLE_ONLY and proto is not Proto.SIMPLE:
        return f"{algo} runs only with the simple protocol"
    if op in POINT_TO_POINT and proto is not Proto.SIMPLE:
        return f"{op} is point-to-point and uses the simple protocol"
    return None


def layout_problem(op: Op, algo: Algo, nnodes: int, ppn: int) -> str | None:
    """Why ``algo`` cannot run ``op`` on ``nnodes`` nodes of ``ppn`` ranks each, or ``None``.

    >>> layout_problem(Op.ALLGATHER, Algo.PAT, nnodes=1, ppn=8)
    'pat needs exactly one GPU per node'
    """
    if algo is Algo.NVLS_TREE and nnodes == 1:
        return "nvls_tree needs more than one node"
    if algo is Algo.NVLS and nnodes > 1 and op is not Op.ALLREDUCE:
        return f"nvls {op} runs within one node only"
    if algo is Algo.PAT and ppn != 1:
        return "pat needs exactly one GPU per node"
    return None


def subspace_problem(op: Op, subspace: Subspace, facts: CommFacts) -> str | None:
    """Why NCCL cannot run ``subspace`` for ``op`` on this communicator, or ``None`` if it can.

    >>> facts = CommFacts(nranks=8, nnodes=1, sm_count=132, sm_version=90, nvls=True)
    >>> subspace_problem(Op.ALLGATHER, Subspace(Algo.TREE, Proto.SIMPLE), facts)
    'allgather has no tree algorithm (NCCL offers ring, pat, nvls, collnet_direct)'
    >>> subspace_problem(Op.ALLGATHER, Subspace(Algo.NVLS, Proto.SIMPLE), facts) is None
    True
    """
    algo, proto = subspace.algo, subspace.proto
    if facts.nranks == 1 and op is not Op.SENDRECV:
        return SINGLE_RANK
    if problem := implementation_problem(op, algo, proto):
        return problem
    if proto is Proto.LL128 and not facts.ll128:
        return "LL128 is disabled here (NCCL enables it only over NVLink; NCCL_PROTO can force it per communicator)"
    if algo in (Algo.NVLS, Algo.NVLS_TREE) and not facts.nvls:
        return f"{algo} needs NVLink SHARP (NVSwitch multicast), not available here"
    if algo is Algo.PAT and tuple(facts.nccl_version) < PAT_SINCE:
        return f"pat needs NCCL ≥ {'.'.join(map(str, PAT_SINCE))}"
    if problem := layout_problem(op, algo, facts.nnodes, facts.ppn):
        return problem
    if algo is Algo.PAT and not facts.pat:
        return "pat is disabled"
    if algo in (Algo.COLLNET_DIRECT, Algo.COLLNET_CHAIN) and not facts.collnet:
        return f"{algo} needs in-network reduction (SHARP) switches, not available here"
    return transport_problem(subspace, facts)


def transport_problem(subspace: Subspace, facts: CommFacts) -> str | None:
    """Why ``subspace.transport`` does not apply: only Ring/Tree hops inside a node use it, so
    every other case is spelled with the placeholder ``p2p``."""
    transport = subspace.transport
    if facts.ppn == 1 or subspace.algo not in TRANSPORT_AWARE:
        if transport is Transport.P2P:
            return None
        why = "every peer is on another node" if facts.ppn == 1 else f"{subspace.algo} does not use it"
        return f"the intra-node transport does not apply ({why}); spell it p2p"
    if transport not in facts.transports:
        return f"transport {transport} is not available (available: {', '.join(map(str, facts.transports))})"
    return None
