"""An NCCL algorithm as a schedule of steps for one channel, read by both engines.

Two shapes cover NCCL's algorithms:

* **rounds** (Ring AllReduce/AllGather/ReduceScatter, PAT, AllToAll): a loop of ``steps``
  dependent steps in which every rank sends one chunk to its neighbour at the same time;
  loops run one after another.  A step waits for the previous step's data, so it costs the
  larger of its transfer time and the hop latency plus one cut-through unit (the ring's mean hop;
  across the network, the whole step its proxy posts); across nodes the busiest proxy thread's
  posts pace the rounds on their own (``Schedule.proxy_bound_us``).
* **pipeline** (Broadcast, Reduce, Tree, CollNet, NVLS, SendRecv): ``loops`` chunks stream
  down a chain of ``steps`` hops; the last chunk leaves the chain ``steps + loops - 1`` step
  times after the first one entered it.  A tree whose CTA runs its reduce up before its
  broadcast down (NCCL < 2.10's LL and Simple, ``ReleaseFacts.tree_up_down``) is two such
  pipelines one after the other (``passes``).

Per step, ``unit_bytes`` is the cut-through grain: a receiver forwards a Simple slice once it
has all of it (a ring step is cut into two slices of what it really carries), but LL and LL128
data line by line, so their steps overlap almost entirely.  Ring and Tree Simple CTAs also pay
a fixed hand-over per slice (``sync_us``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from traces.errors import CcltwinError
from traces.task import Op
from tuner.config import Algo, Config, Proto
from tuner.rules import POINT_TO_POINT, SINGLE_RANK, implementation_problem, layout_problem
from twin.model import dtree
from twin.model.geometry import CommGeometry, LinkUse, LinkUses
from twin.model.host import NCCL_TESTS_ITERS, HostLaunch
from twin.model.netpath import ll_host_recv_gbps
from twin.model.protocols import LL_LINE_DATA_BYTES, cta_copy_gbps
from twin.model.shm import copy_threads, receive_gbps
from twin.model.workfifo import work_fetch_us
from twin.nccl_model.constants import MAXCHANNELS, NCCL_STEPS, tuner_constants
from twin.nccl_model.select import ring_quantum_bytes
from twin.params import DEFAULT_PARAMS, TwinParams

LL128_UNIT_BYTES = 120 * 32
"""LL128 cut-through grain: what one warp writes before the receiver can act on it (32 lines of
120 data bytes)."""

MIN_SIMPLE_SLICE_BYTES = 32 << 10
"""Smallest slice of a Simple ring step: ``prims_simple.h`` cuts a step of ``nelem`` into
``SlicePerChunk`` (2) slices of ``max(nelem / 2, sliceSize / 32)``, where ``sliceSize`` is two FIFO
steps of the default 4 MiB buffer (2 × 512 KiB): 32 KiB."""


def simple_slice_bytes(step_bytes):
    """What a Simple ring rank receives before it can forward: half the bytes its step really
    carries (not the nominal chunk), but never less than ``MIN_SIMPLE_SLICE_BYTES`` of them."""
    return np.maximum(step_bytes / 2, np.minimum(step_bytes, MIN_SIMPLE_SLICE_BYTES))


def held_step_bytes(shape: str, proto: Proto, step_bytes, grain_bytes, first_chunk):
    """What a step's data waits for at a network hop beyond its cut-through grain
    (``Schedule.hold_bytes``, before the share of the hops that cross the network).

    NCCL's send proxy hands the network a FIFO step only once the kernel has written it whole:
    Simple and LL128 once the GPU's tail has passed it (``*recvTail > tail``; LL128 posts its tail
    after each step, ``postSend`` in ``prims_ll128.h``), LL once every line's flags are valid
    (``sendProxyProgress``, ``src/transport/net.cc`` @ v2.8.4-1 and v2.28.9-1).  A ring round's
    step is what it holds (a Simple round's slices are its grain already, each posted on its
    own).  A pipeline moves one chunk per FIFO step (``PIPELINE_IN_FLIGHT``), its first one
    ``first_chunk``: ``min(chunkSize, per-channel bytes)`` (``realChunkSize`` in
    ``broadcast.h``, the LL128 chunk rounded to whole ``minChunkSize`` groups, @ v2.8.4-1).

    >>> from tuner.config import Proto
    >>> float(held_step_bytes("pipeline", Proto.LL128, 24e3, 3840.0, 576000.0))
    572160.0
    >>> float(held_step_bytes("rounds", Proto.SIMPLE, 1e6, 5e5, 1e6))
    0.0
    """
    if shape == "rounds":
        return 0.0 if proto is Proto.SIMPLE else step_bytes - grain_bytes
    return np.maximum(first_chunk - grain_bytes, 0.0)


def slice_sync_us(algo: Algo, proto: Proto, slices_per_step, params: TwinParams = DEFAULT_PARAMS):
    """Per step, the Ring or Tree CTA's hand-over of each Simple slice
    (``protocol.simple_slice_sync_us``; LL and LL128 flag every line inline, NVLS and
    point-to-point kernels hand over in separate warps).  A ring round cuts its step into
    slices (``ALLREDUCE_SLICESTEPS``); a pipeline's step is one slice (Tree, Broadcast and Reduce
    run ``ProtoSimple<1, 1>``: ``src/device/all_reduce.h``, ``broadcast.h`` @ v2.28.9-1, the same
    ``ncclPrimitives<UNROLL, 1, 1, …>`` in ``src/collectives/device/*.h`` @ v2.8.4-1)."""
    if proto is not Proto.SIMPLE or algo not in (Algo.RING, Algo.TREE):
        return 0.0
    return params.protocol.simple_slice_sync_us * np.ceil(slices_per_step - 1e-9)


PIPELINE_IN_FLIGHT = NCCL_STEPS
"""Chunks a pipeline keeps in flight per connection: each connection's FIFO has ``NCCL_STEPS``
(8) slots, and every algorithm but Ring Simple moves one step per chunk (``chunkSteps = 1`` in
``calcCollChunking``, ``src/enqueue.cc``; ``ProtoSimple<1, 1>`` for Tree, NVLS, CollNet,
Broadcast, Reduce in ``src/device/*.h``; NCCL 2.28.9), so a sender runs up to 8 chunks ahead of
its receiver.  Ring Simple's chunk is 4 steps (``ALLREDUCE_CHUNKSTEPS``), but a ring's rounds
wait for each other anyway."""


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
    links: Sequence[LinkUse] = ()
    """``LinkUse`` of every directed link the collective's channels load."""
    one_way: bool = False
    """The data flows one way down a chain (Broadcast, Reduce): back-to-back calls overlap."""
    sync_us: float = 0.0
    """Per step, what the channel's CTA spends handing its slices over (``slice_sync_us``):
    nothing moves meanwhile, so it comes on top of the step's transfer."""
    in_flight: int = 1
    """Chunks a pipeline keeps in flight on each connection (``PIPELINE_IN_FLIGHT``): once the
    pipeline is full, a chunk follows the one before it after its transfer, or after a share
    ``1/in_flight`` of a step's latency, whichever is longer.  Rounds wait for every step."""
    proxy_us: float = 0.0
    """The busiest proxy thread's CPU time per step (``ChannelShare.proxy_us``): one thread posts
    every network step of its GPU, so a full pipeline's chunks follow each other no faster."""
    fill_scale: float = 1.0
    """A pipeline's fill steps move the first chunk over one hop each, at that hop's own rate
    (its links', bounded by its receives through host memory if it takes them so, and by the CTA):
    their transfer takes this share of a step at ``gbps`` (the mean over the hops of
    ``gbps`` / the hop's rate, ``fill_gbps_scale``); 1 where every hop is as fast as the slowest."""
    host: HostLaunch = field(default_factory=HostLaunch)
    """The host thread that launches the call (``twin.model.host``); ``launch_us`` already holds
    its ``skew_us``, the wait for the last GPU's launch."""
    proxy_lag_us: float = 0.0
    """Rounds across nodes: what the network hop of the busiest proxy thread takes beyond that
    thread's post (``ChannelShare.proxy_lag_us``), after its last step's post."""
    hold_bytes: float = 0.0
    """Across nodes, what a step waits for at the network hops beyond its grain, as a share of
    the hops: a proxy posts what the kernel has written whole (an LL or LL128 step, a Simple
    slice, ``sendProxyProgress``), so over the network the data does not cut through
    (``held_step_bytes``).  Every ring round pays it; a pipeline's fill steps only, its first
    chunk held once at each network hop (the chunks behind it follow their FIFO's 8 posted steps,
    whose credits the hold does not delay)."""
    coupling: float = 0.0
    """Down a one-way chain, the share of its fill that a call issued back to back still waits
    for (``CommGeometry.repeat_coupling``): 0 where the calls overlap down to the interval (one
    channel; channels that visit the ranks in one order), up to 1 where none overlaps."""
    passes: int = 1
    """A pipeline's passes over its chain one after another, each of ``steps / passes`` hops and
    every chunk: 2 for a tree that reduces all its data up before it broadcasts any down
    (``ReleaseFacts.tree_up_down``), 1 where both run at once (``tree_split``)."""
    paced_grain: bool = False
    """The grain is one CTA pass in time (an LL chain's: ``LLGenericOp`` forwards line t by thread t
    as it lands): a fill step's grain takes that pass over every hop, however fast the hop, and
    ``fill_scale`` shortens its transfer only."""
    write_share: float = 1.0
    """The share of a step's time at ``gbps`` its sender takes to write it: 1, but where LL receivers
    poll their lines in host memory (``netpath.ll_host_recv_gbps``), which bounds the receiving
    primitives and so ``gbps``, not the sender's stores that a network hop's proxy waits for
    (``hold_bytes``; ``proxy_bound_us``'s first post is written at ``write_gbps``)."""
    post_bytes: float = 0.0
    """Rounds across nodes: what one network post of the proxy carries (``proxy_bound_us``): a Simple
    ring's slice (``sendProxyProgress`` sends ``sliceSteps`` FIFO steps at a time, once the kernel's
    tail has passed them, and ``prims_simple.h`` posts its tail after every slice), an LL or LL128
    step (``sliceSteps = 1`` outside Ring Simple, ``calcCollChunking``, ``src/enqueue.cc``
    @ v2.26.6-1)."""
    write_gbps: float = 0.0
    """Rounds across nodes: the rate the kernel writes the call's first post at (``proxy_bound_us``),
    its CTA's in the loop's first primitive alone (a ring's ``ring_phases``; PAT, whose primitives
    are not walked one by one, its CTA's copy rate): the FIFO is empty, so nothing makes it wait
    for the network; never below the loop's rate."""
    wire_gbps: float = np.inf
    """Rounds across nodes: the channel's share of its links alone, without its CTA's bound
    (``proxy_bound_us``: what the network carries of every step one after another)."""
    drain_gbps: float = np.inf
    """Rounds across nodes: the CTA's rate in the loop's last primitive alone (a ring's final
    receive; PAT: its copy rate), at which the last post's last grain leaves the receive buffer."""

    @cached_property
    def lumped_caps(self) -> dict[float, float]:
        """``twin.des.engine.lumped_cap_gbps`` of this schedule by copy scale, as the replay asks
        for them (a frozen schedule's cap at one scale never changes; a replay asks tens of
        thousands of times for a few hundred)."""
        return {}

    @property
    def n_steps(self):
        """Step times from the first send to the last receive."""
        if self.shape == "rounds":
            return self.loops * self.steps
        return self.steps + self.passes * (self.loops - 1)

    @property
    def fill_steps(self):
        """The steps that wait for their full latency: every round; a pipeline's first chunk
        down its chain in each pass (the rest follow it ``in_flight`` at a time)."""
        return self.n_steps if self.shape == "rounds" else self.steps

    def is_fill_step(self, i: int) -> bool:
        """Whether step ``i`` of the engines' walk is one of the ``fill_steps``: the first
        ``steps / passes`` of each pass."""
        if self.shape == "rounds":
            return True
        return i % (int(self.n_steps) // self.passes) < self.steps // self.passes

    def pace_us(self, gbps):
        """Once a pipeline is full, the time between two chunks at ``gbps`` (no network hold:
        ``hold_bytes``)."""
        return np.maximum(np.maximum(self.step_bytes / (gbps * 1e3) + self.sync_us,
                                     self.step_time_us(gbps, held=False) / self.in_flight), self.proxy_us)

    def steps_time_us(self, gbps):
        """All the steps at ``gbps``: the full-latency ones (a pipeline's first chunk crossing each
        hop at that hop's rate, ``fill_scale``), then the paced ones; rounds no sooner than their
        busiest proxy thread posts them (``proxy_bound_us``)."""
        fill = self.step_time_us(gbps, self.fill_scale)
        steps = self.fill_steps * fill + (self.n_steps - self.fill_steps) * self.pace_us(gbps)
        return np.maximum(steps, self.proxy_bound_us(gbps)) if self.shape == "rounds" else steps

    def proxy_bound_us(self, gbps):
        """Rounds across nodes, as the busiest proxy thread and its network send queue pace them:
        a ring's steps depend on each other round the ring, whose mean hop latency the steps pay
        (``step_us``), but one thread posts every network step of its GPU's channels in order,
        ``proxy_us`` of work a step that no other step overlaps, and each connection's sends leave
        one after another (``sendProxyProgress``: ``isend`` in FIFO order).  So the rounds take the
        kernel's first post written before the thread can post it (``post_bytes``: a Simple step
        goes out slice by slice; written at the CTA's own rate, ``write_gbps``), then the longer of
        the thread's posts of every step with the last post's data crossing after them at
        ``gbps``, and one post with every step's data on the wire after it (``wire_gbps``, as
        contended as ``gbps``) and the last grain copied out (``drain_gbps``), then the rest of the
        last post's network hop (``proxy_lag_us``); 0 on one node (no proxy)."""
        proxy = self.proxy_us
        # ``np.any`` of a float costs microseconds; the replay asks this of every lumped call.
        if not (proxy.any() if isinstance(proxy, np.ndarray) else proxy):
            return 0.0
        write = self.post_bytes / (np.maximum(self.write_gbps, gbps) * 1e3)
        posts = self.n_steps * proxy + self.post_bytes / (gbps * 1e3)
        wire = self.wire_gbps * gbps / self.gbps
        sends = (proxy * self.post_bytes / self.step_bytes + self.n_steps * self.step_bytes / (wire * 1e3)
                 + self.unit_bytes / (np.maximum(self.drain_gbps, gbps) * 1e3))
        return write + np.maximum(posts, sends) + self.proxy_lag_us

    def latency_us(self, gbps, scale=1.0, held=True):
        """The part of a step that does not overlap the transfer: hop latency plus one grain, and
        where ``held`` the network hops' hold (``hold_bytes``), its transfer taking ``scale`` of its
        time at ``gbps`` (a fill step's: ``fill_scale``; a grain one CTA pass long, ``paced_grain``, keeps it)."""
        grain = self.unit_bytes if self.paced_grain else scale * self.unit_bytes
        return self.step_us + (grain + scale * self.hold_bytes * self.write_share * held) / (gbps * 1e3)

    def interval_us(self):
        """A call's time at its busiest rank: its launch plus one paced step per chunk (the host's
        skew left out: queued kernels wait for no launch), in every pass."""
        return self.launch_us - self.host.skew_us + self.passes * self.loops * self.pace_us(self.gbps)

    def gpu_period_us(self):
        """Time between two calls already queued on the GPUs, uncontended.

        A pipeline's data flows one way (Broadcast, Reduce down a chain), so the next call's first
        chunk enters while the last chunks of this one are still travelling: the calls overlap and
        follow each other at the pace of the busiest rank (``interval_us``), plus the share of the
        chain's fill (``coupling``) that a rank's kernel, ending with its last channel, makes the
        next call wait for (``twin.model.repeat``).  Rounds (Ring AllReduce/AllGather/
        ReduceScatter) and the tree's up-then-down pass end where the next call starts, so there
        nothing overlaps.  Never more than one call's time (``time_us`` less the host's skew).
        """
        call = self.time_us() - self.host.skew_us
        if not self.one_way:
            return call
        interval = self.interval_us()
        return np.minimum(interval + self.coupling * np.maximum(call - interval, 0.0), call)

    def back_to_back_us(self, iters: int = NCCL_TESTS_ITERS):
        """Time per call of ``iters`` calls issued back to back, as nccl-tests times them: the
        GPUs' period or the host thread's launches, whichever is slower, with the last call's
        drain and the final poll shared over the timed calls (``HostLaunch.timed_loop_us``).

        Down a one-way chain rank ``r``'s last call ends ``r/(n−1)`` of the chain's drain after
        the root's, and nccl-tests reports the ranks' mean time (``Allreduce(args, &deltaSec,
        average)`` in ``src/common.cu``): half the drain counts.
        """
        period = self.gpu_period_us()
        call = self.time_us() - self.host.skew_us
        if self.one_way:
            call = period + (call - period) / 2
        return self.host.timed_loop_us(call, period, iters)

    def time_us(self):
        """Closed form: the time the engines agree on for an uncontended run.

        Every field may be a numpy array (the fast path sweeps threads and chunk sizes at once).
        """
        return self.launch_us + self.steps_time_us(self.gbps)

    def step_time_us(self, gbps, scale=1.0, held=True):
        """One step at ``gbps``: its transfer or its latency (``held``: with the network hold),
        whichever is longer, then its sync; both transfers take ``scale`` of their time at
        ``gbps`` (a fill step's: ``fill_scale``)."""
        return (np.maximum(scale * self.step_bytes / (gbps * 1e3), self.latency_us(gbps, scale, held))
                + self.sync_us)


def check_supported(geom: CommGeometry, op: Op, algo: Algo, proto: Proto) -> None:
    """Raise ``Unsupported`` with the reason if NCCL cannot run ``algo``/``proto`` for ``op`` here
    (the rules of ``tuner.rules``, checked against the cluster itself)."""
    if problem := implementation_problem(op, algo, proto):
        raise Unsupported(problem)
    if algo in (Algo.NVLS, Algo.NVLS_TREE) and not geom.cluster.has_nvswitch():
        raise Unsupported(f"{algo} needs NVSwitch (NVLink SHARP); this cluster has none")
    if algo in (Algo.NVLS, Algo.NVLS_TREE) and geom.cluster.gpu.sm_version < 90:
        raise Unsupported(f"{algo} needs Hopper or newer (sm_90); {geom.cluster.gpu.model} is "
                          f"sm_{geom.cluster.gpu.sm_version}")
    if problem := layout_problem(op, algo, geom.nnodes, geom.ppn):
        raise Unsupported(problem)
    if algo in (Algo.COLLNET_DIRECT, Algo.COLLNET_CHAIN) and not geom.collnet:
        raise Unsupported(f"{algo} needs in-network reduction (SHARP) switches; this fabric has none")
    if geom.nranks == 1 and op is not Op.SENDRECV:
        raise Unsupported(SINGLE_RANK)


def build_schedule(geom: CommGeometry, op: Op, nbytes: int, config: Config, *, gpus_per_process: int = 1
                   ) -> Schedule:
    """The per-channel schedule of ``op`` on ``nbytes`` with ``config`` (raises ``Unsupported``)."""
    check_supported(geom, op, config.algo, config.proto)
    return schedule_for(geom, op, nbytes, config.algo, config.proto, config.nchannels, config.nthreads,
                        config.chunk_bytes, gpus_per_process=gpus_per_process)


def rounded_piece_cap(op: Op, nbytes: int, nranks: int) -> float:
    """The most one rank's piece of a ring step carries once NCCL 2.8 – 2.19 round it up to their
    quantum (``select.ring_quantum_bytes``): the data there is, for a call smaller than a quantum.

    Each piece is ``nelem = min(chunkSize, size - offset)`` elements, so the first one holds what
    the buffer has and the ones past its end nothing: AllReduce splits its whole buffer into the
    ranks' pieces (``chunkOffset = gridOffset + bid*nranks*chunkSize``), AllGather and
    ReduceScatter a rank's share (``size`` is the per-rank count, ``chunkOffset = gridOffset +
    bid*chunkSize``); ``src/collectives/device/all_reduce.h``, ``all_gather.h``,
    ``reduce_scatter.h`` @ v2.8.4-1 and ``src/device/all_reduce.h`` @ v2.19.3-1.

    >>> rounded_piece_cap(Op.ALLREDUCE, 64, 8), rounded_piece_cap(Op.ALLGATHER, 64, 8)
    (64, 8.0)
    """
    return nbytes if op is Op.ALLREDUCE else nbytes / nranks


def schedule_for(geom: CommGeometry, op: Op, nbytes: int, algo: Algo, proto: Proto, nch: int, nthreads, chunk,
                 *, gpus_per_process: int = 1) -> Schedule:
    """``build_schedule`` without the support check, with ``nthreads``/``chunk`` scalars or arrays;
    the physical constants are the geometry's (``CommGeometry.params``)."""
    n = geom.nranks
    params = geom.params
    # One process driving every GPU of the node lets NCCL's Simple primitives write straight into
    # peers' buffers.  LL and LL128 always go through their flagged lines in the peer's FIFO:
    # 2.8 – 2.9's ``ncclLL128Primitives`` have no direct operations, and from 2.10 the LL and LL128
    # ``Primitives`` derive from ``PrimitivesWithoutDirect``, which maps every ``direct*`` call to
    # the plain one (``prims_ll128.h`` @ v2.8.4-1, v2.9.9-1; ``primitives.h`` @ v2.10.3-1 – v2.28.9-1).
    direct = geom.nnodes == 1 and gpus_per_process >= geom.ppn and proto is Proto.SIMPLE
    copy = cta_copy_gbps(geom.cluster.gpu.hbm_gbps, proto, nthreads, memory_ops_per_byte(op, algo, n, direct),
                         params=params)
    host = HostLaunch(gpus_per_process, params.protocol.host_launch_us, params.protocol.stream_query_us)
    start = params.protocol.launch_us.of(proto) + host.skew_us
    # Its CTAs' work comes out of host memory first on releases before 2.22 (``twin.model.workfifo``).
    launch = start + work_fetch_us(geom, nch)
    per_channel = nbytes / nch
    # Cut-through grain: LL's receiving thread takes a line as soon as its flag is valid, so a
    # ring step's data follows one CTA pass behind (``nthreads`` lines of 8 bytes: ``LLGenericOp``
    # walks a step in trips of ``nthreads`` lines, ``prims_ll.h``), whatever the thread count;
    # LL128 one warp's lines; Simple half a chunk.
    unit = {Proto.LL: nthreads * LL_LINE_DATA_BYTES, Proto.LL128: LL128_UNIT_BYTES}.get(proto, chunk / 2)

    def shaped(shape: str, pattern: str, steps: int, loop_bytes_per_chunk: int, rate_scale: float = 1.0,
               extra_launch: float = 0.0, cap=copy, phases: tuple[Phase, ...] = (), fence_us: float = 0.0,
               recv_threads=nthreads, net_hops: float | None = None, passes: int = 1,
               pass_threads=nthreads) -> Schedule:
        share = geom.share(pattern, nch, proto)
        # The share of the hops whose sender's proxy holds a step until it is written whole.
        held_share = geom.network_share(pattern) if net_hops is None or geom.nnodes == 1 else net_hops / steps
        if phases:
            # The channel's primitives run one after another, each at its own pace (below).
            ops_gbps = cta_copy_gbps(geom.cluster.gpu.hbm_gbps, proto, nthreads, 1.0, params=params)
            cap = phased_gbps(phases, share.gbps * rate_scale, ops_gbps)
        # LL lines received from the network into host memory (no GPUDirect RDMA) are polled there:
        # the receiving primitives slow down, the sender writes a step at its own pace (``write_share``).
        polls = proto is Proto.LL and geom.polls_host_memory(pattern, nch)
        write_share, sender_cap = 1.0, cap
        if polls:
            free_gbps = np.minimum(share.gbps * rate_scale, cap)
            recv_gbps = ll_host_recv_gbps(recv_threads, params)
            cap = (phased_gbps(phases, share.gbps * rate_scale, ops_gbps, recv_gbps) if phases
                   else np.minimum(cap, recv_gbps))
            write_share = np.minimum(share.gbps * rate_scale, cap) / free_gbps
        host_gbps = host_memory_gbps(geom, pattern, proto, nch, recv_threads)
        cta_cap, cap = cap, np.minimum(cap, host_gbps)
        gbps = np.minimum(share.gbps * rate_scale, cap)
        # The call's first post is written at the sender's own pace, its last grain received at the
        # final primitive's, polled in host memory where the lines land there (``proxy_bound_us``).
        drain_gbps = ops_gbps / phases[-1].ops if phases else cta_cap
        if polls:
            drain_gbps = np.minimum(drain_gbps, recv_gbps)
        # An LL grain is one pass of the threads that bound the channel in time: their lines at
        # the CTA's rate, however slowly the link then carries them (the receiver takes each line
        # as it lands, and thread t of every rank forwards line t, one line per thread per trip,
        # ``LLGenericOp``).  So a chain or a tree fills one pass per hop whatever its thread
        # count, and fewer threads (NCCL's per-thread thresholds) cost only their extra passes.
        # A split tree's pass is that of the thread group that bounds it (``tree_pass_threads``).
        grain_unit = unit
        if proto is Proto.LL:
            grain_unit = pass_threads * LL_LINE_DATA_BYTES * gbps / cap
        grain = chunk
        if shape == "pipeline":
            # A rank forwards a chunk's first grain while the rest still arrives, so the pipeline
            # fills in steps of one grain plus the hop latency, not of whole chunks.
            grain = np.minimum(chunk, grain_unit + gbps * 1e3 * share.step_us)
        loops = np.maximum(1, np.ceil(per_channel / (loop_bytes_per_chunk * grain)))
        step_bytes = per_channel / (loops * loop_bytes_per_chunk)
        quantum = ring_quantum_bytes(geom.nccl_version, op, proto, nthreads)
        if shape == "rounds" and algo is Algo.RING and np.any(quantum):
            # NCCL 2.8 – 2.19 round each rank's piece up to a quantum: a step lasts as long as the
            # rounded piece, which the ranks before the end carry while the rest idle.
            step_bytes = np.minimum(chunk, np.ceil(step_bytes / quantum) * quantum)
            step_bytes = np.minimum(step_bytes, rounded_piece_cap(op, nbytes, n))
        grain_bytes = np.minimum(simple_slice_bytes(step_bytes) if shape == "rounds" and proto is Proto.SIMPLE
                                 else grain_unit, step_bytes)
        # A ring round hands over each of its slices; a pipeline step is one slice (Tree, Broadcast
        # and Reduce run ``ProtoSimple<1, 1>``: one step per chunk, one slice per step).
        slices = step_bytes / grain_bytes if shape == "rounds" else 1.0
        proxy_us, post_bytes = share.proxy_us, step_bytes
        if algo is Algo.RING and shape == "rounds" and proto is Proto.SIMPLE:
            # A Simple ring step goes out slice by slice: one post per slice (``sliceSteps`` FIFO
            # steps each, ``sendProxyProgress``), and a flush per slice received (PAT runs
            # ``ProtoSimple<1, 1>``: one slice a step).
            proxy_us, post_bytes = share.proxy_us * np.ceil(slices - 1e-9), grain_bytes
        if shape == "pipeline":
            # Across the network a pipeline moves NCCL's steps, not the grains above: the proxy
            # posts one message per FIFO step (``sendProxyProgress``, ``src/transport/net.cc``),
            # so its per-step CPU time is shared by the grains of a step.
            messages = np.maximum(1, np.ceil(per_channel / chunk))
            proxy_us = share.proxy_us * messages / loops
        # An LL step sent over the network is checked line by line before its post (``ll_scan``).
        scan_us, scan_lag_us = geom.ll_scan(pattern, nch, proto, step_bytes,
                                            per_channel / messages if shape == "pipeline" else step_bytes)
        # A one-node chain's first chunk crosses each hop at that hop's rate (``fill_gbps_scale``).
        # Across nodes the same holds, but is not applied yet: it moves the multi-node A100 and
        # EFA files other parts fit (docs/physics.md, "Pipeline fill at each hop's rate").
        # Receives through host memory slow the hops that receive so (``host_gbps``), not the chain's
        # NVLink, PCIe or in-switch hops, which fill at their own rate or the CTA's.
        # The first chunk down a one-node tree meets fewer of its receivers' loads and stores through
        # host memory than the chunks behind it (``first_chunk_host_gbps``).
        # Across nodes, LL lines polled in host memory slow the network hops only (``write_share``).
        if shape == "pipeline" and pattern in ("tree", "chain") and geom.nnodes == 1:
            fill = fill_gbps_scale(geom.fill_ratios(pattern, proto), share.gbps * rate_scale, host_gbps, cta_cap,
                                   first_chunk_host_gbps(geom, pattern, proto, nch, recv_threads, loops, host_gbps))
        elif shape == "pipeline" and polls:
            net = geom.network_share(pattern)
            fill = net + (1 - net) * write_share
        else:
            fill = 1.0
        return Schedule(shape, steps, loops, step_bytes, grain_bytes, gbps, share.step_us + scan_lag_us,
                        launch + extra_launch, cap, scaled_links(share.links, rate_scale), pattern == "chain",
                        slice_sync_us(algo, proto, slices, params) + fence_us,
                        PIPELINE_IN_FLIGHT if shape == "pipeline" else 1, proxy_us + scan_us, fill, host,
                        share.proxy_lag_us if shape == "rounds" else 0.0,
                        held_share * held_step_bytes(shape, proto, step_bytes, grain_bytes,
                                                     np.minimum(chunk, per_channel)),
                        geom.repeat_coupling(nch, proto) if pattern == "chain" else 0.0, passes,
                        paced_grain=proto is Proto.LL and pattern in ("chain", "tree"), write_share=write_share,
                        post_bytes=post_bytes, write_gbps=ops_gbps / phases[0].ops if phases else sender_cap,
                        wire_gbps=share.gbps * rate_scale, drain_gbps=drain_gbps)

    if op in POINT_TO_POINT:
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
        # Each network send is one peer's message of the step, checked line by line (LL, ``ll_scan``).
        scan_us, scan_lag_us = geom.ll_scan(pattern, nch, proto, per_peer / loops, per_peer / loops)
        return Schedule("pipeline", 1, loops, step_bytes, step_bytes, gbps, share.step_us + scan_lag_us,
                        start + work_fetch_us(geom, nch * lanes), cap,
                        scaled_links(share.links, per_flow), in_flight=PIPELINE_IN_FLIGHT,
                        proxy_us=share.proxy_us + scan_us, host=host)
    if algo is Algo.RING:
        if op is Op.ALLREDUCE:
            return shaped("rounds", "ring", 2 * (n - 1), n, phases=ring_phases(op, n, direct))
        if op in (Op.ALLGATHER, Op.REDUCESCATTER):
            return shaped("rounds", "ring", n - 1, n, phases=ring_phases(op, n, direct))
        return shaped("pipeline", "chain", n - 1, 1)  # Broadcast, Reduce
    if algo is Algo.TREE:
        depth = geom.tree_chain_hops + (math.ceil(math.log2(geom.nnodes)) if geom.nnodes > 1 else 0)
        if op is Op.ALLREDUCE and proto.value in tuner_constants(geom.nccl_version).facts.tree_up_down:
            # The CTA reduces all its data up the tree, then broadcasts it down, each pass on all its
            # threads and alone on its links (``ReleaseFacts.tree_up_down``): two pipelines of
            # ``depth`` hops one after the other, each moving every byte at its own rates, so a
            # step moves at their harmonic mean.
            up, down = geom.tree_pass_gbps(nch, proto)
            return shaped("pipeline", "tree", 2 * max(depth, 1), 1, passes=2, net_hops=0,
                          rate_scale=2 / (1 / up + 1 / down) / geom.share("tree", nch, proto).gbps,
                          cap=tree_up_down_cta_gbps(geom.cluster.gpu.hbm_gbps, proto, nthreads, n, direct,
                                                    params=params, **_tree_net_children(geom)))
        cap, pass_threads = (tree_binding_group(geom.cluster.gpu.hbm_gbps, proto, nthreads, n, direct, params=params,
                                                **_tree_net_children(geom))
                             if op is Op.ALLREDUCE else (copy, nthreads))
        # Each hop of a tree is crossed both ways, up by the parent's reduce threads and down by the
        # child's broadcast threads (``tree_split``): the smaller group receives the slower way.
        # Across nodes its network hops hold their first step too (``held_step_bytes``), but that
        # is not applied yet: it slows the ABCI NCCL 2.8 trees and p4de's, already too slow
        # (docs/physics.md, "The network step hold on trees").
        return shaped("pipeline", "tree", 2 * max(depth, 1), 1, cap=cap,
                      recv_threads=np.minimum(*tree_split(proto, nthreads)), net_hops=0, pass_threads=pass_threads)
    if algo is Algo.PAT:
        return shaped("rounds", "ring", max(1, math.ceil(math.log2(n))), n,
                      rate_scale=math.ceil(math.log2(n)) / (n - 1) if n > 1 else 1.0)
    if algo in (Algo.NVLS, Algo.NVLS_TREE):
        # In-switch reduction: each GPU sends its data once and receives the result once.
        # A channel's loop moves one chunk per head (``nHeads`` = the node's ranks, ``all_reduce.h``
        # NVLS ``oneNode``): each GPU's links carry its loop to the switch and the result back, plus
        # its own head's reduced chunk once more each way, ``1 + 1/ppn`` per payload byte.  Every
        # loop's stores are fenced before its step is posted (``postPeer``, ``prims_simple.h``:
        # ``fence_acq_rel_sys``), an NVLink round trip that no chunk in flight hides: ``1/ppn``
        # of one per chunk.  The first chunk's pass up to the switch and back costs NCCL's measured
        # NVLS latency (``link.nvls_pass_us``), not two plain NVLink steps: its polls of every
        # rank's step go through the switch and its fences wait for multimem stores; the chunks
        # behind it follow at their transfers.  Across nodes (NVLS-Tree) the same pass brackets
        # the tree between the node heads (NCCL's NVLSTree latency: ``hwLatencies[NVLINK]
        # [NVLS_TREE][SIMPLE]`` = 25 µs, plus the network hops).
        ppn = geom.ppn
        inter = 2 * math.ceil(math.log2(geom.nnodes)) if geom.nnodes > 1 else 0
        pass_us = max(0.0, params.link.nvls_pass_us - 2 * geom.nvls_switch_hop_us(proto))
        return shaped("pipeline", "nvls", 2 + inter, 1, rate_scale=params.link.nvls_efficiency * ppn / (ppn + 1),
                      fence_us=geom.nvlink_round_trip_us() / ppn, extra_launch=pass_us)
    # CollNet: reduce inside the node, one trip through the in-network reducer, broadcast back;
    # its two network hops post whole steps (``*recvTail > tail``, ``src/transport/coll_net.cc``).
    steps = 2 * max(geom.ppn - 1, 1) + 2 if algo is Algo.COLLNET_CHAIN else 4
    return shaped("pipeline", "tree", steps, 1, net_hops=2)


def fill_gbps_scale(ratios: Sequence[tuple[float, float, bool]], link_gbps: float, host_gbps, cap,
                    first_host: Sequence = ()):
    """The share of a step at the pipeline's rate that one of its fill steps takes: the weighted
    mean over its hops of the pipeline's rate (the slowest of the links' ``link_gbps``, the receives
    through host memory's ``host_gbps`` and the CTA's ``cap``) over that hop's own rate (``link_gbps``
    / its ``ratio``; its receives through host memory as the first chunk crosses it, ``first_host``
    per hop, ``host_gbps`` where not given, if that is slower; the CTA's ``cap`` if slower still).
    A fill step so takes the first chunk over each hop in that hop's own time, and a faster link
    never makes it longer.

    >>> float(fill_gbps_scale(((0.5, 1.0, False), (0.5, 0.1, False)), 10.0, np.inf, 200.0))  # a hop 10x faster
    0.55
    >>> float(fill_gbps_scale(((0.5, 1.0, False), (0.5, 0.1, False)), 10.0, np.inf, 5.0))   # the CTA binds every hop
    1.0
    >>> float(fill_gbps_scale(((0.5, 1.0, True), (0.5, 1.0, False)), 10.0, 5.0, 200.0))  # host memory binds one hop
    0.75
    >>> float(fill_gbps_scale(((0.5, 1.0, True), (0.5, 1.0, False)), 10.0, 5.0, 200.0, (10.0, 5.0)))  # alone
    0.5
    """
    gbps = np.minimum(np.minimum(link_gbps, host_gbps), cap)
    first_host = first_host or (host_gbps,) * len(ratios)
    return sum(w * gbps / np.minimum(np.minimum(link_gbps / ratio, host if through_host else np.inf), cap)
               for (w, ratio, through_host), host in zip(ratios, first_host, strict=True)) if ratios else 1.0


def first_chunk_host_gbps(geom: CommGeometry, pattern: str, proto: Proto, nch: int, threads, loops, host_gbps
                          ) -> tuple:
    """Per hop of ``fill_ratios``, the rate at which the first chunk of a one-node tree crosses it
    where it receives through host memory (``CommGeometry.first_chunk_receives``): its receiver's
    ``threads`` (those that copy) loading on the channels whose chunks are on a hop into it at that
    step, in series with the duplex ceiling only if one of the ``loops − 1`` chunks behind is
    already on one of its sends through host memory; ``host_gbps`` (every chunk's bound) for the
    other hops, and () where no hop is told apart (``fill_gbps_scale`` then takes ``host_gbps``).

    In a pipeline of many chunks the broadcast's first chunk already meets the reduce's later ones
    storing up the same hop (every chunk's rate), but the reduce's first chunk meets no broadcast:
    on 8 H100 NVL a 2 MiB call's 2 chunks a channel cross the tree's SHM hops while nothing else
    loads or stores there, at the copying threads' latency-bound rate alone."""
    receives = geom.first_chunk_receives(pattern, nch)
    if proto is not Proto.SIMPLE or not any(receives):
        return ()
    sm = geom.cluster.gpu.sm_version
    out = []
    for r in receives:
        if r is None:
            out.append(host_gbps)
            continue
        step, loads, stores, link_gbps = r
        # A chunk of the call is on step t's hop while the first one is on ``step``'s: step − t behind it.
        n = sum((t <= step) & (step - t < loops) for t in loads)
        duplex = sum((t <= step) & (step - t < loops) for t in stores) > 0
        out.append(np.where(duplex, receive_gbps(n * copy_threads(threads), link_gbps, duplex=True, sm_version=sm),
                            receive_gbps(n * copy_threads(threads), link_gbps, duplex=False, sm_version=sm)) / n)
    return tuple(out)


def host_memory_gbps(geom: CommGeometry, pattern: str, proto: Proto, nch: int, threads):
    """A channel's rate as its receives through host memory bound it (``twin.model.shm``): each
    receiving GPU's group of ``threads`` (those of them that copy, ``copy_threads``) on every one of
    its receives on the ``nch`` channels (``CommGeometry.host_memory_receivers``), over those
    receives.  Simple only: LL and LL128 poll flagged lines, which ``twin.model.shm`` does not
    describe."""
    cap = np.inf
    if proto is not Proto.SIMPLE:
        return cap
    for duplex, link_gbps, receives in geom.host_memory_receivers(pattern, nch):
        cap = np.minimum(cap, receive_gbps(receives * copy_threads(threads), link_gbps, duplex=duplex,
                                           sm_version=geom.cluster.gpu.sm_version) / receives)
    return cap


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


def _tree_net_children(geom: CommGeometry) -> dict[str, int]:
    """The network children of the busiest GPUs of a Tree channel's chains (``tree_cta_gbps``): a
    middle node's (``dtree.inner_children``; a balanced tree joins its two to two GPUs,
    ``CommGeometry.tree_pattern``, so each has one) and the root's (one, ``ncclGetBtree``); none
    where a node has one GPU (no chain: the tree is all network)."""
    if geom.nnodes == 1 or geom.ppn == 1:
        return {}
    children = dtree.inner_children(geom.nnodes)
    return {"net_children": min(children, 1) if geom.tree_pattern == "balanced" else children, "root_net_children": 1}


def tree_thread_groups(proto: Proto, nthreads, nranks: int, direct: bool, *, net_children: int = 0,
                       root_net_children: int = 0) -> tuple[tuple, ...]:
    """The thread groups of a tree AllReduce channel's busiest ranks, as ``(threads, memory
    operations per payload byte)``: a middle rank's reduce group, its broadcast group, then the
    root's whole CTA where it has network children (``tree_cta_gbps`` says why each costs what).

    >>> from tuner.config import Proto
    >>> tree_thread_groups(Proto.LL, 512, 64, False, net_children=2, root_net_children=1)
    ((352, 5.0), (160, 5.0), (512, 6.0))
    """
    up, down = tree_split(proto, nthreads)
    if nranks <= 2:
        return ((nthreads, 4.0), (up, 2.0)) if direct else ((nthreads, 4.0), (up, 2.0), (down, 2.0))
    middle = ((up, 3.0 + net_children), (down, (2.0 if direct else 3.0) + net_children))
    if not root_net_children:
        return middle
    children = root_net_children + 1  # its network children and its chain child
    return (*middle, (nthreads, 2.0 * children + 2.0))


def tree_cta_gbps(hbm_gbps: float, proto: Proto, nthreads, nranks: int, direct: bool, *,
                  params: TwinParams = DEFAULT_PARAMS, net_children: int = 0, root_net_children: int = 0):
    """Payload rate of a tree AllReduce channel: the slowest thread group on the chain
    (``tree_thread_groups``).

    A middle rank's reduce group receives, reduces and sends up (3 operations per byte) while its
    broadcast group receives and sends down (3, or 2 direct); a leaf's groups send (2) and
    receive (2, or nothing direct); with two ranks the root's whole CTA receives, reduces, keeps
    and sends back (4).  Across nodes a node's head also has the ``net_children`` other nodes
    below it in the double binary tree (``dtree.inner_children``): its reduce group loads each
    child's data in the same pass (``recvReduceSend`` from up to ``NCCL_MAX_TREE_ARITY`` = 3
    peers, ``src/collectives/device/all_reduce.h`` @ v2.8.4-1, ``src/device/all_reduce.h`` @
    v2.28.9-1) and its broadcast group stores to each of them, one operation per byte more each.
    The root's head (``root_net_children`` network children and its chain child) runs one
    ``recvReduceCopySend`` on all its threads: every child's data loaded, its own, the result
    stored and sent to every child.

    >>> from tuner.config import Proto
    >>> [round(float(tree_cta_gbps(1555.0, Proto.LL128, 640, 64, False, net_children=k)), 2) for k in (0, 2)]
    [4.56, 2.74]
    >>> round(float(tree_cta_gbps(1555.0, Proto.LL128, 640, 64, False, root_net_children=1)), 2)
    3.34
    """
    return tree_binding_group(hbm_gbps, proto, nthreads, nranks, direct, params=params, net_children=net_children,
                              root_net_children=root_net_children)[0]


def tree_binding_group(hbm_gbps: float, proto: Proto, nthreads, nranks: int, direct: bool, *,
                       params: TwinParams = DEFAULT_PARAMS, net_children: int = 0, root_net_children: int = 0):
    """``(rate, threads)`` of the thread group that bounds a tree AllReduce channel
    (``tree_thread_groups``; on a tie the first, a middle rank's, whose hops are nearly all of the
    tree's): its rate is the channel's (``tree_cta_gbps``), and one pass of its threads is the
    channel's LL cut-through grain in time (``schedule_for``).

    >>> from tuner.config import Proto
    >>> [round(float(x), 2) for x in tree_binding_group(1555.0, Proto.LL, 512, 64, False, net_children=2,
    ...                                                  root_net_children=1)]  # the broadcast group
    [1.35, 160.0]
    >>> int(tree_binding_group(1555.0, Proto.LL, 128, 16, False, root_net_children=1)[1])  # a tie: the reduce group
    64
    """
    groups = tree_thread_groups(proto, nthreads, nranks, direct, net_children=net_children,
                                root_net_children=root_net_children)
    rate, threads = cta_copy_gbps(hbm_gbps, proto, groups[0][0], groups[0][1], params=params), groups[0][0]
    for group_threads, ops in groups[1:]:
        group_rate = cta_copy_gbps(hbm_gbps, proto, group_threads, ops, params=params)
        threads = np.where(group_rate < rate, group_threads, threads)
        rate = np.minimum(rate, group_rate)
    return rate, threads


def tree_up_down_cta_gbps(hbm_gbps: float, proto: Proto, nthreads, nranks: int, direct: bool, *,
                          params: TwinParams = DEFAULT_PARAMS, net_children: int = 0, root_net_children: int = 0):
    """Payload rate of a tree AllReduce channel whose whole CTA runs the reduce up, then the
    broadcast down (``ReleaseFacts.tree_up_down``): the harmonic mean of the two passes' rates,
    each its busiest rank's operations per byte on all ``nthreads``.

    Up, a middle rank's ``recvReduceSend`` loads its children's data and its own and stores once
    (3, one more per network child: ``tree_cta_gbps``), the root's ``recvReduceCopy`` loads every
    child's and its own and stores the result (``root_net_children`` + 3, with its chain child),
    a leaf sends (2); down, a middle rank's ``recvCopySend`` loads, stores and sends (3, 2
    direct, one more per network child), the root sends to every child (``root_net_children`` +
    2), a leaf receives (2).  With two ranks: up 3 (the root), down 2.
    (``src/collectives/device/all_reduce.h`` @ v2.8.4-1, LL and Simple.)

    Per pass it moves far more than the split tree's 30 % broadcast group, on a V100 head of a
    4-node tree (each byte then takes both passes):

    >>> from tuner.config import Proto
    >>> [round(float(f(900.0, Proto.LL, 512, 32, False, net_children=2, root_net_children=1)), 2)
    ...  for f in (tree_cta_gbps, tree_up_down_cta_gbps)]
    [1.35, 4.31]
    """
    def rate(ops_per_byte: float):
        return cta_copy_gbps(hbm_gbps, proto, nthreads, ops_per_byte, params=params)

    if nranks <= 2:
        up_ops, down_ops = 3.0, 2.0
    else:
        up_ops = 3.0 + max(net_children, root_net_children)
        down_ops = max((2.0 if direct else 3.0) + net_children, 2.0 + root_net_children)
    return 2 / (1 / rate(up_ops) + 1 / rate(down_ops))


@dataclass(frozen=True)
class Phase:
    """One primitive of a ring loop: ``count`` times per loop, ``ops`` bytes loaded and stored per
    payload byte, over the link to the next rank or (``sends=False``) local only, on what it
    receives from the previous rank or (``receives=False``) on the rank's own data."""

    count: int
    ops: float
    sends: bool = True
    receives: bool = True


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
        phases = (Phase(1, 2, receives=False), Phase(n - 2, 3), Phase(1, 4), Phase(n - 2, 2 if direct else 3),
                  Phase(1, 0 if direct else 2, sends=False))
    elif op is Op.ALLGATHER:
        phases = (Phase(1, 3, receives=False), Phase(n - 2, 2 if direct else 3),
                  Phase(1, 0 if direct else 2, sends=False))
    elif op is Op.REDUCESCATTER:
        phases = (Phase(1, 2, receives=False), Phase(n - 2, 3), Phase(1, 3, sends=False))
    else:
        raise ValueError(f"{op} has no ring rounds")
    return tuple(p for p in phases if p.count and p.ops)


def phased_gbps(phases: tuple[Phase, ...], link_gbps, ops_gbps, recv_gbps=np.inf):
    """Payload rate of a ring channel whose CTA runs ``phases`` one after another.

    A CTA executes each primitive to the end of its slice before it starts the next, and every
    channel of the collective does the same work in the same order, so the channels keep in step:
    a primitive that sends goes at the slower of the link share (``link_gbps``) and the CTA's
    memory operations (``ops_gbps`` bytes loaded plus stored per second), and the final receive,
    which only copies locally, leaves the link idle meanwhile.  When every phase is bound by the
    CTA this is its rate at the loop's mean operations per byte; when the link binds the sends,
    the local phase comes on top (a 2-rank AllReduce: one local copy per two sends).  A phase that
    receives goes no faster than ``recv_gbps`` (LL lines polled in host memory, ``netpath``).
    """
    def pace(p: Phase):
        own = np.maximum(p.ops / ops_gbps, 1.0 / recv_gbps) if p.receives else p.ops / ops_gbps
        return np.maximum(1.0 / link_gbps, own) if p.sends else own

    seconds = sum(p.count * pace(p) for p in phases)
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


def scaled_links(links: Sequence[LinkUse], rate_scale: float) -> Sequence[LinkUse]:
    """Link uses for a channel whose payload rate is ``rate_scale`` times its flows' rate (built
    when first looked at)."""
    if rate_scale == 1.0:
        return links
    return LinkUses(lambda: tuple(LinkUse(u.link, u.raw_per_payload / rate_scale, u.capacity) for u in links))
