"""An NCCL algorithm as a schedule of steps for one channel, read by both engines.

Two shapes cover NCCL's algorithms:

* **rounds** (Ring AllReduce/AllGather/ReduceScatter, PAT, AllToAll): a loop of ``steps``
  dependent steps in which every rank sends one chunk to its neighbour at the same time;
  loops run one after another.  A step waits for the previous step's data, so it costs the
  larger of its transfer time and the hop latency plus one cut-through unit.
* **pipeline** (Broadcast, Reduce, Tree, CollNet, NVLS, SendRecv): ``loops`` chunks stream
  down a chain of ``steps`` hops; the last chunk leaves the chain ``steps + loops - 1`` step
  times after the first one entered it.

Per step, ``unit_bytes`` is the cut-through grain: a receiver forwards a Simple slice once it
has all of it (a ring step is cut into two slices of what it really carries), but LL and LL128
data line by line, so their steps overlap almost entirely.  Ring and Tree Simple CTAs also pay
a fixed hand-over per slice (``sync_us``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from traces.errors import CcltwinError
from traces.task import Op
from tuner.config import Algo, Config, Proto
from tuner.rules import ALGORITHMS_FOR_OP
from twin.model.geometry import CommGeometry, LinkUse
from twin.model.protocols import EXTRA_GPU_LAUNCH_US, LAUNCH_US, cta_copy_gbps
from twin.nccl_model.constants import MAXCHANNELS

LL_UNIT_BYTES = {Proto.LL: 8 * 32 * 8, Proto.LL128: 120 * 32}
"""LL/LL128 cut-through grain: what one warp writes before the receiver can act on it (LL: eight
8-byte lines per lane, NCCL_LL_LINES_PER_THREAD)."""

MIN_SIMPLE_SLICE_BYTES = 32 << 10
"""Smallest slice of a Simple ring step: ``prims_simple.h`` cuts a step of ``nelem`` into
``SlicePerChunk`` (2) slices of ``max(nelem / 2, sliceSize / 32)``, where ``sliceSize`` is two FIFO
steps of the default 4 MiB buffer (2 × 512 KiB): 32 KiB."""


def simple_slice_bytes(step_bytes):
    """What a Simple ring rank receives before it can forward: half the bytes its step really
    carries (not the nominal chunk), but never less than ``MIN_SIMPLE_SLICE_BYTES`` of them."""
    return np.maximum(step_bytes / 2, np.minimum(step_bytes, MIN_SIMPLE_SLICE_BYTES))


SIMPLE_SLICE_SYNC_US = 3.0
"""What handing over one Simple slice costs a Ring or Tree CTA, with nothing moving meanwhile: its
threads meet at a barrier, fence the slice's stores, post the step counter to the peer, and
the next primitive polls for its own (``prims_simple.h``).  The same threads wait, copy and
post, so nothing hides it; NVLS and point-to-point kernels give those roles to separate warps.
Measured, not taken from NCCL's tables (whose Simple NVLink step latency is 3.4 µs): the best
fit to our 2×H200 AllReduce sweep between 2 and 32 MiB, where a step carries less than a
chunk (``benchmarks/accuracy.py``: Ring Simple 12% → 6% error, Tree Simple 16% → 11%, and
Azure A100 2-, 16- and 64-GPU files closer; vTrain's A100 LUT 5% → 8%)."""


def slice_sync_us(algo: Algo, proto: Proto, slices_per_step):
    """Per step, the CTA's hand-over of each Simple slice (LL and LL128 flag every line inline)."""
    if proto is not Proto.SIMPLE or algo not in (Algo.RING, Algo.TREE):
        return 0.0
    return SIMPLE_SLICE_SYNC_US * np.ceil(slices_per_step - 1e-9)


SIMPLE_ONLY = (Algo.NVLS, Algo.NVLS_TREE, Algo.COLLNET_DIRECT, Algo.COLLNET_CHAIN, Algo.PAT)


class Unsupported(CcltwinError):
    """The configuration is one NCCL cannot run here (wrong algorithm for the op or fabric)."""


@dataclass(frozen=True)
class Schedule:
    """One channel's share of a collective, in the units both engines use (bytes, GB/s, µs)."""

    shape: str  # "rounds" | "pipeline"
    steps: int
    loops: int
    step_bytes: float
    unit_bytes: float
    gbps: float
    step_us: float
    launch_us: float
    cap_gbps: float = np.inf
    """What the channel moves at most, whatever else shares its links: its CTA's copy rate; for
    ring rounds, its primitives one after another at the links' uncontended share
    (``phased_gbps``), so under contention the engines take the smaller of this and their share."""
    links: tuple = ()
    """``LinkUse`` of every directed link the collective's channels load."""
    one_way: bool = False
    """The data flows one way down a chain (Broadcast, Reduce): back-to-back calls overlap."""
    sync_us: float = 0.0
    """Per step, what the channel's CTA spends handing its slices over (``slice_sync_us``):
    nothing moves meanwhile, so it comes on top of the step's transfer."""

    @property
    def n_steps(self):
        """Step times from the first send to the last receive."""
        return self.loops * self.steps if self.shape == "rounds" else self.steps + self.loops - 1

    def latency_us(self, gbps):
        """The part of a step that does not overlap the transfer: hop latency plus one grain."""
        return self.step_us + self.unit_bytes / (gbps * 1e3)

    def back_to_back_us(self):
        """Time between calls issued back to back (as nccl-tests times them), uncontended.

        A pipeline's data flows one way (Broadcast, Reduce down a chain), so the next call's first
        chunk enters while the last chunks of this one are still travelling: the calls overlap and
        follow each other at the pace of the busiest rank, its launch plus one step per chunk.
        Rounds (Ring AllReduce/AllGather/ReduceScatter) and the tree's up-then-down pass end where
        the next call starts, so there nothing overlaps.
        """
        if not self.one_way:
            return self.time_us()
        return self.launch_us + self.loops * self.step_time_us(self.gbps)

    def time_us(self):
        """Closed form: the time the engines agree on for an uncontended run.

        Every field may be a numpy array (the fast path sweeps threads and chunk sizes at once).
        """
        return self.launch_us + self.n_steps * self.step_time_us(self.gbps)

    def step_time_us(self, gbps):
        """One step at ``gbps``: its transfer or its latency, whichever is longer, then its sync."""
        return np.maximum(self.step_bytes / (gbps * 1e3), self.latency_us(gbps)) + self.sync_us


def check_supported(geom: CommGeometry, op: Op, algo: Algo, proto: Proto) -> None:
    """Raise ``Unsupported`` with the reason if NCCL cannot run ``algo``/``proto`` for ``op`` here."""
    if algo not in ALGORITHMS_FOR_OP[op]:
        names = ", ".join(a.value for a in ALGORITHMS_FOR_OP[op])
        raise Unsupported(f"{op} has no {algo} algorithm (NCCL offers {names})")
    if algo in SIMPLE_ONLY and proto is not Proto.SIMPLE:
        raise Unsupported(f"{algo} runs only with the simple protocol")
    if op in (Op.ALLTOALL, Op.SENDRECV) and proto is not Proto.SIMPLE:
        raise Unsupported(f"{op} is point-to-point and uses the simple protocol")
    if algo in (Algo.NVLS, Algo.NVLS_TREE) and not geom.cluster.has_nvswitch():
        raise Unsupported(f"{algo} needs NVSwitch (NVLink SHARP); this cluster has none")
    if algo in (Algo.NVLS, Algo.NVLS_TREE) and geom.cluster.gpu.sm_version < 90:
        raise Unsupported(f"{algo} needs Hopper or newer (sm_90); {geom.cluster.gpu.model} is "
                          f"sm_{geom.cluster.gpu.sm_version}")
    if algo is Algo.NVLS_TREE and geom.nnodes == 1:
        raise Unsupported("nvls_tree needs more than one node")
    if algo is Algo.NVLS and geom.nnodes > 1 and op is not Op.ALLREDUCE:
        raise Unsupported(f"nvls {op} runs within one node only")
    if algo is Algo.PAT and geom.ppn != 1:
        raise Unsupported("pat needs exactly one GPU per node")
    if algo in (Algo.COLLNET_DIRECT, Algo.COLLNET_CHAIN) and not geom.collnet:
        raise Unsupported(f"{algo} needs in-network reduction (SHARP) switches; this fabric has none")
    if geom.nranks == 1 and op is not Op.SENDRECV:
        raise Unsupported("a 1-rank communicator copies locally; nothing to tune")


def build_schedule(geom: CommGeometry, op: Op, nbytes: int, config: Config, *, gpus_per_process: int = 1
                   ) -> Schedule:
    """The per-channel schedule of ``op`` on ``nbytes`` with ``config`` (raises ``Unsupported``)."""
    check_supported(geom, op, config.algo, config.proto)
    return schedule_for(geom, op, nbytes, config.algo, config.proto, config.nchannels, config.nthreads,
                        config.chunk_bytes, gpus_per_process=gpus_per_process)


def schedule_for(geom: CommGeometry, op: Op, nbytes: int, algo: Algo, proto: Proto, nch: int, nthreads, chunk,
                 *, gpus_per_process: int = 1) -> Schedule:
    """``build_schedule`` without the support check, with ``nthreads``/``chunk`` scalars or arrays."""
    n = geom.nranks
    # One process driving every GPU of the node lets NCCL write straight into peers' buffers
    # (Simple and LL128; LL always goes through its flagged lines).
    direct = geom.nnodes == 1 and gpus_per_process >= geom.ppn and proto is not Proto.LL
    copy = cta_copy_gbps(geom.cluster.gpu.hbm_gbps, proto, nthreads, memory_ops_per_byte(op, algo, n, direct))
    launch = LAUNCH_US[proto] + EXTRA_GPU_LAUNCH_US * (gpus_per_process - 1)
    per_channel = nbytes / nch
    unit = LL_UNIT_BYTES.get(proto, chunk / 2)

    def shaped(shape: str, pattern: str, steps: int, loop_bytes_per_chunk: int, rate_scale: float = 1.0,
               extra_launch: float = 0.0, cap=copy, phases: tuple[Phase, ...] = ()) -> Schedule:
        share = geom.share(pattern, nch, proto)
        if phases:
            # The channel's primitives run one after another, each at its own pace (below).
            cap = phased_gbps(phases, share.gbps * rate_scale, cta_copy_gbps(geom.cluster.gpu.hbm_gbps, proto,
                                                                           nthreads, 1.0))
        gbps = np.minimum(share.gbps * rate_scale, cap)
        grain = chunk
        if shape == "pipeline":
            # A rank forwards a chunk's first grain while the rest still arrives, so the pipeline
            # fills in steps of one grain plus the hop latency, not of whole chunks.
            grain = np.minimum(chunk, unit + gbps * 1e3 * share.step_us)
        loops = np.maximum(1, np.ceil(per_channel / (loop_bytes_per_chunk * grain)))
        step_bytes = per_channel / (loops * loop_bytes_per_chunk)
        grain_bytes = np.minimum(simple_slice_bytes(step_bytes) if shape == "rounds" and proto is Proto.SIMPLE
                                 else unit, step_bytes)
        return Schedule(shape, steps, loops, step_bytes, grain_bytes, gbps, share.step_us, launch + extra_launch,
                        cap, scaled_links(share.links, rate_scale), pattern == "chain",
                        slice_sync_us(algo, proto, step_bytes / grain_bytes))

    if op in (Op.SENDRECV, Op.ALLTOALL):
        pattern = "sendrecv" if op is Op.SENDRECV else "pairs"
        flows = geom.channel_flows(pattern, 0)
        share = geom.share(pattern, nch, proto)
        # AllToAll: a rank's n-1 sends run side by side, each on its own CTAs (NCCL spreads the
        # peers over its p2p channels, ``nch`` each), each step moving one chunk to every peer.
        # Every flow gets the busiest link's share.
        peers = n - 1 if op is Op.ALLTOALL else 1
        lanes = min(peers, max(1, MAXCHANNELS // nch))
        cap = copy * lanes
        gbps = np.minimum(share.gbps * len(flows) / (1 if op is Op.SENDRECV else n), cap)
        per_peer = nbytes / (n if op is Op.ALLTOALL else 1) / nch
        loops = np.maximum(1, np.ceil(per_peer / chunk))
        step_bytes = per_peer * peers / loops
        per_flow = len(flows) / (1 if op is Op.SENDRECV else n)
        return Schedule("pipeline", 1, loops, step_bytes, step_bytes, gbps, share.step_us, launch, cap,
                        scaled_links(share.links, per_flow))
    if algo is Algo.RING:
        if op is Op.ALLREDUCE:
            return shaped("rounds", "ring", 2 * (n - 1), n, phases=ring_phases(op, n, direct))
        if op in (Op.ALLGATHER, Op.REDUCESCATTER):
            return shaped("rounds", "ring", n - 1, n, phases=ring_phases(op, n, direct))
        return shaped("pipeline", "chain", n - 1, 1)  # Broadcast, Reduce
    if algo is Algo.TREE:
        depth = (geom.ppn - 1) + math.ceil(math.log2(geom.nnodes)) if geom.nnodes > 1 else geom.ppn - 1
        cap = tree_cta_gbps(geom.cluster.gpu.hbm_gbps, proto, nthreads, n, direct) if op is Op.ALLREDUCE else copy
        return shaped("pipeline", "tree", 2 * max(depth, 1), 1, cap=cap)
    if algo is Algo.PAT:
        return shaped("rounds", "ring", max(1, math.ceil(math.log2(n))), n,
                      rate_scale=math.ceil(math.log2(n)) / (n - 1) if n > 1 else 1.0)
    if algo in (Algo.NVLS, Algo.NVLS_TREE):
        # In-switch reduction: each GPU sends its data once and receives the result once.
        inter = 2 * math.ceil(math.log2(geom.nnodes)) if geom.nnodes > 1 else 0
        return shaped("pipeline", "nvls", 2 + inter, 1, rate_scale=NVLS_EFFICIENCY)
    # CollNet: reduce inside the node, one trip through the in-network reducer, broadcast back.
    steps = 2 * max(geom.ppn - 1, 1) + 2 if algo is Algo.COLLNET_CHAIN else 4
    return shaped("pipeline", "tree", steps, 1)


def tree_split(proto: Proto, nthreads):
    """Threads of a tree AllReduce CTA that reduce on the way up and that broadcast on the way
    down (``runTreeSplit``, ``all_reduce.h``): Simple halves them (64 more for the reduce from
    256 each), LL and LL128 give the reduce 70%, in whole warps."""
    if proto is Proto.SIMPLE:
        up = nthreads // 2
        up = np.where(up >= 256, up + 64, up)
    else:
        up = (nthreads * 7 // (10 * 32)) * 32
    return up, nthreads - up


def tree_cta_gbps(hbm_gbps: float, proto: Proto, nthreads, nranks: int, direct: bool):
    """Payload rate of a tree AllReduce channel: the slowest thread group on the chain.

    A middle rank's reduce group receives, reduces and sends up (3 operations per byte) while its
    broadcast group receives and sends down (3, or 2 direct); a leaf's groups send (2) and
    receive (2, or nothing direct); with two ranks the root's whole CTA receives, reduces, keeps
    and sends back (4).
    """
    up, down = tree_split(proto, nthreads)
    if nranks <= 2:
        rate = np.minimum(cta_copy_gbps(hbm_gbps, proto, nthreads, 4.0), cta_copy_gbps(hbm_gbps, proto, up, 2.0))
        return rate if direct else np.minimum(rate, cta_copy_gbps(hbm_gbps, proto, down, 2.0))
    return np.minimum(cta_copy_gbps(hbm_gbps, proto, up, 3.0),
                      cta_copy_gbps(hbm_gbps, proto, down, 2.0 if direct else 3.0))


@dataclass(frozen=True)
class Phase:
    """One primitive of a ring loop: ``count`` times per loop, ``ops`` bytes loaded and stored per
    payload byte, over the link to the next rank or (``sends=False``) local only."""

    count: int
    ops: float
    sends: bool = True


def ring_phases(op: Op, nranks: int, direct: bool = False) -> tuple[Phase, ...]:
    """The primitives one channel of a ring runs per loop, in order (``runRing`` of NCCL's
    ``all_reduce.h``, ``all_gather.h``, ``reduce_scatter.h``), with their memory operations.

    AllReduce: send (2), ``n-2`` receive-reduce-sends (3), a receive-reduce-copy-send (4),
    ``n-2`` receive-copy-sends (3, 2 direct) and a final receive that copies the result out of the
    receive buffer (2, nothing direct) without sending.  AllGather: copy-send (3), ``n-2``
    receive-copy-sends (3, 2 direct), final receive (2, nothing direct).  ReduceScatter: send (2),
    ``n-2`` receive-reduce-sends (3), a final receive-reduce-copy (3) that sends nothing.
    """
    n = max(nranks, 2)
    if op is Op.ALLREDUCE:
        phases = (Phase(1, 2), Phase(n - 2, 3), Phase(1, 4), Phase(n - 2, 2 if direct else 3),
                  Phase(1, 0 if direct else 2, sends=False))
    elif op is Op.ALLGATHER:
        phases = (Phase(1, 3), Phase(n - 2, 2 if direct else 3), Phase(1, 0 if direct else 2, sends=False))
    elif op is Op.REDUCESCATTER:
        phases = (Phase(1, 2), Phase(n - 2, 3), Phase(1, 3, sends=False))
    else:
        raise ValueError(f"{op} has no ring rounds")
    return tuple(p for p in phases if p.count and p.ops)


def phased_gbps(phases: tuple[Phase, ...], link_gbps, ops_gbps):
    """Payload rate of a ring channel whose CTA runs ``phases`` one after another.

    A CTA executes each primitive to the end of its slice before it starts the next, and every
    channel of the collective does the same work in the same order, so the channels keep in step:
    a primitive that sends goes at the slower of the link share (``link_gbps``) and the CTA's
    memory operations (``ops_gbps`` bytes loaded plus stored per second), and the final receive,
    which only copies locally, leaves the link idle meanwhile.  When every phase is bound by the
    CTA this is its rate at the loop's mean operations per byte; when the link binds the sends,
    the local phase comes on top (a 2-rank AllReduce: one local copy per two sends).
    """
    seconds = sum(p.count * (np.maximum(1.0 / link_gbps, p.ops / ops_gbps) if p.sends else p.ops / ops_gbps)
                  for p in phases)
    return sum(p.count for p in phases if p.sends) / seconds


def memory_ops_per_byte(op: Op, algo: Algo, nranks: int, direct: bool = False) -> float:
    """Bytes the busiest CTA loads and stores per payload byte it sends, from NCCL's primitives.

    Each primitive (``all_reduce.h``, ``all_gather.h``, ``reduce_scatter.h``) loads its inputs
    and stores its outputs: a send loads and stores once; a receive-reduce-send loads the
    received data and the own input and stores once; a receive-reduce-copy-send also stores the
    result locally; a receive-copy-send loads the received data and stores it locally and to the
    next rank; a final receive copies the data out of the receive buffer.  With ``direct``
    (peers in one process: NCCL's direct pointers) the sender writes straight into the
    receiver's output, so a receive-copy-send saves its local store and the final receive is
    free.  Ring AllReduce then costs ``(6n-4)/(2n-2)`` per byte sent, ``(5n-4)/(2n-2)`` direct:
    a 2-rank ring pays 4 (3), a large one 3 (2.5).  AllGather ``(3n-1)/(n-1)`` (``(2n-1)/(n-1)``
    direct), ReduceScatter ``(3n-1)/(n-1)``.  Tree AllReduce: a middle rank reduces (3) and
    forwards (3, 2 direct) every byte; with two ranks the root's receive-reduce-copy-send (4) is
    the busiest.  Broadcast and Reduce: 3 at their busiest rank; NVLS and
    point-to-point: a load and a store.
    """
    n = max(nranks, 2)
    if algo in (Algo.RING, Algo.PAT) and op in (Op.ALLREDUCE, Op.ALLGATHER, Op.REDUCESCATTER):
        phases = ring_phases(op, n, direct)
        return sum(p.count * p.ops for p in phases) / sum(p.count for p in phases if p.sends)
    if algo in (Algo.TREE, Algo.COLLNET_CHAIN) and op is Op.ALLREDUCE:
        # Two ranks have no middle: the root receives, reduces, keeps and sends back (4).  (A tree
        # channel's rate comes from ``tree_cta_gbps``; this is its whole CTA's count.)
        return 4.0 if n == 2 else (5.0 if direct else 6.0)
    if op in (Op.BROADCAST, Op.REDUCE):
        return 3.0
    return 2.0


def scaled_links(links: tuple, rate_scale: float) -> tuple:
    """Link uses for a channel whose payload rate is ``rate_scale`` times its flows' rate."""
    if rate_scale == 1.0:
        return links
    return tuple(LinkUse(u.link, u.raw_per_payload / rate_scale, u.capacity) for u in links)


NVLS_EFFICIENCY = 0.85
"""NVSwitch multimem reductions run at this share of NVLink rate (NCCL's Hopper nvlsEfficiency)."""
