"""Replay a whole trace on a cluster: every rank's streams as SimPy processes on one network.

Picture rank 0 of a data-parallel job: its compute stream runs the backward pass layer by
layer, and each gradient bucket's all-reduce waits (``after``) for the layer that produced
it, then runs on the NCCL stream while the next layers compute.  The replay follows the
trace's rules: events of one (rank, stream) run in order; an event waits for its ``after``
events; the k-th collective of a group on each member is one call, which begins when the
last member present in the trace reaches it (members missing from the trace are assumed to
be there already) and ends for all members at once.  A trace that keeps one representative
rank per role leaves out ranks that would make the same calls at the same time on shifted groups;
those calls that share a node with a call replayed here (the seven other data-parallel groups of a
node of eight GPUs) run beside it as *shadows*: they load the network and nothing waits for them
(a copy on another pipeline stage is that stage's, not a shadow of this one).  A shadow runs as
NCCL runs the absent ranks' own call, on their communicator (``Placement.copy_timed``): its
default choice there may differ from the call's (GPUs that sit otherwise to a shared NIC take
another protocol, with another launch).  A shadow that does not end with the call it copies (its
ranks sit on other NIC or PCIe paths) breaks that symmetry: its ranks are a placement class of
their own, join the trace (``twin.placement.classes``) and the trace is replayed again, so the
iteration is what the trace of every rank gives; the result's notes say so.
SendRecv calls pair as NCCL pairs them,
per direction: the k-th send from A to B with B's k-th receive from A (a trace without directions:
the k-th call of a rank naming a peer with the k-th of the peer naming it).

Each rank's *host thread* (``_Replay._host``) issues the rank's events in trace order, each
after its host time (``PhaseCost.host_us``: Python, autograd, the kernel launch; a collective call
``ComputeTimer.collective_host_us``), and a stream
starts an event no earlier than the host issued it; the GPU then takes ``PhaseCost.gpu_us``.  So
a host runs ahead during long kernels and falls behind on short ones, and the GPU idles waiting
for it (*host wait*).  The host blocks where the framework synchronises with the GPU
(``blocks_host``): Megatron reads the loss-scale overflow flag and the gradient norm with
``.item()`` (``optimizer`` phases of kind ``scale`` and ``clip``) and ends each iteration reading
the reduced loss (the host waits for the rank's whole iteration).  Megatron also synchronises the
device after each batched pipeline exchange (``p2p_communication._communicate``:
``batch_isend_irecv``, ``wait``, ``torch.cuda.synchronize()``): where the trace's metadata says
so (``host_syncs_after_p2p``, as the generator's Megatron traces do), the host waits for each run
of SendRecvs it issued back to back before it issues the next event.

Each call moves its bytes through the fluid network as one lumped transfer
(``twin.des.engine``), so calls that overlap share links and NICs; compute phases are
linkless transfers whose speed communication kernels on the same GPU lower, and compute
lowers those kernels' copy rate in turn (``twin.compute``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import simpy

from traces.errors import CcltwinError
from traces.schema import CollectiveEvent, ComputeEvent, Trace
from traces.task import Op, Task
from tuner.config import Config
from tuner.plan import Plan
from twin.compute import ComputeTimer, PhaseCost, copy_ratio, phase_speed
from twin.compute.shapes import optimizer_kind
from twin.des import FluidNetwork, Transfer, lumped_bytes, lumped_cap_gbps
from twin.model.schedule import Schedule
from twin.params import DEFAULT_PARAMS, TwinParams
from twin.placement import Placement, Timed, members_of, task_of
from twin.placement.classes import with_ranks
from twin.replay import steady
from twin.replay.result import ReplayResult, covered, union
from twin.replay.totals import RankSums, TaskSums, Totals
from twin.topology import Cluster


class ReplayError(CcltwinError):
    """A trace whose replay cannot finish (a call a peer never issues)."""


WORK_UNITS_PER_US = 1e3
"""A compute phase is a linkless transfer of ``µs × 1e3`` units: at a cap of 1 "GB/s" it
moves 1e3 units per µs, so its cap is its speed."""


@dataclass
class _Call:
    """One collective call across its members."""

    key: tuple
    group: str
    task: Task | None
    timed: Timed | None
    members: tuple[int, ...]
    present: tuple[int, ...]
    done: simpy.Event
    measured_us: float = 0.0
    arrived: list[int] = field(default_factory=list)
    events: list[tuple[int, int]] = field(default_factory=list)  # (rank, event id) of each arrival
    began_us: float = 0.0
    transfer: Transfer | None = None
    shadows: list[tuple[tuple[int, ...], Schedule, Transfer, list[float]]] = field(default_factory=list)
    """The absent copies it stands for: (members, schedule, transfer, its end once it ended)."""
    launching: list[tuple[int, ...]] = field(default_factory=list)
    """Absent copies whose own launch is still under way (``_launch_shadow``)."""


@dataclass
class _Gpu:
    """What runs on one rank's GPU now: compute phases, SMs held by NCCL kernels, calls moving data."""

    computes: dict[Transfer, PhaseCost] = field(default_factory=dict)
    busy_sms: int = 0
    calls: list[_Call] = field(default_factory=list)
    early: list[_Call] = field(default_factory=list)  # calls whose shadows launched before their transfer


class _Replay:
    def __init__(self, trace: Trace, cluster: Cluster, configs: dict[Task, Config], placement: Placement):
        self.trace = trace
        self.placement = placement
        self.configs = configs
        self.gpu = cluster.gpu
        self.params = placement.params
        self.timer = ComputeTimer.for_trace(trace, self.gpu, self.params, cluster.host_cpu.single_thread)
        self.collective_host_us = self.timer.collective_host_us()
        self.env = simpy.Environment()
        self.net = FluidNetwork(self.env)
        self.present = {r.rank for r in trace.ranks}
        self.gpus = {r: _Gpu() for r in self.present}
        self.done = {(r.rank, e.id): self.env.event() for r in trace.ranks for e in r.events}
        self.calls: dict[tuple, _Call] = {}
        self.intervals: dict[int, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
        self.iteration_end: dict[int, float] = defaultdict(float)
        self.call_log: list[tuple[_Call, float]] = []  # (call, its end)
        self.unsized = 0
        self.shadow_of: dict[tuple[int, ...], tuple[int, ...]] = {}
        self.issued_at: dict[tuple[int, int], float] = {}  # (rank, event id) -> when its host issued it
        self.awaiting_host: dict[tuple[int, int], simpy.Event] = {}  # streams waiting for an issue
        self.costs: dict[tuple[int, int], PhaseCost] = {}
        self.unlike: dict[tuple[int, ...], tuple[int, ...]] = {}  # shadow -> the members of its call
        self.classes = 0  # ranks added to the trace as representatives of their placement class
        self.p2p_syncs = bool(trace.metadata.get("host_syncs_after_p2p"))
        self.speeds: dict[tuple[PhaseCost, int, bool], float] = {}  # ``phase_speed`` on this GPU, as asked
        self.spans: dict[tuple[int, int], tuple[float, float]] | None = None  # (rank, id) -> (start, end), if asked

    # ---- streams -------------------------------------------------------------------------

    def run(self) -> None:
        for rank in self.trace.ranks:
            streams: dict[str, list] = defaultdict(list)
            for event in rank.events:
                streams[event.stream].append(event)
            keys = _call_keys(rank.rank, rank.events)
            for events in streams.values():
                self.env.process(self._stream(rank.rank, events, keys))
            self.env.process(self._host(rank.rank, rank.events))
        self.env.run()
        self._check_finished()

    def _stream(self, rank: int, events: list, keys: dict[int, tuple]):
        for event in events:
            waits = [ev for ev in (self.done[(rank, d)] for d in event.after) if not ev.processed]
            if len(waits) == 1:
                yield waits[0]
            elif waits:
                yield simpy.AllOf(self.env, waits)
            yield from self._await_issue(rank, event)
            start = self.env.now
            if isinstance(event, ComputeEvent):
                yield from self._compute(rank, event)
                kind = "compute"
            else:
                yield from self._collective(rank, event, keys[event.id])
                kind = "comm"
            self.intervals[rank][kind].append((start, self.env.now))
            if self.spans is not None:
                self.spans[(rank, event.id)] = (start, self.env.now)
            self.iteration_end[event.iteration] = max(self.iteration_end[event.iteration], self.env.now)
            self.done[(rank, event.id)].succeed()

    def _compute(self, rank: int, event: ComputeEvent):
        cost = self.costs.pop((rank, event.id))  # the host thread has paid its host_us
        if cost.gpu_us <= 0:
            return
        gpu = self.gpus[rank]
        phase = self.net.start(cost.gpu_us * WORK_UNITS_PER_US, (), self._speed(cost, gpu.busy_sms, bool(gpu.calls)))
        gpu.computes[phase] = cost
        self._recap_calls(gpu)
        yield phase.done
        del gpu.computes[phase]
        self._recap_calls(gpu)

    def _collective(self, rank: int, event: CollectiveEvent, key: tuple):
        call = self._call(rank, event, key)
        call.arrived.append(rank)
        call.events.append((rank, event.id))
        if event.nbytes is None:
            measured = event.duration_us
            if measured is None and event.start_us is not None and event.end_us is not None:
                measured = event.end_us - event.start_us
            call.measured_us = max(call.measured_us, measured or 0.0)
        sms = call.timed.config.nchannels if call.timed else 0
        gpu = self.gpus[rank]
        self._hold_sms(gpu, sms)
        if len(call.arrived) == len(call.present):
            self.env.process(self._run_call(call))
        yield call.done
        self._hold_sms(gpu, -sms)

    # ---- host thread ---------------------------------------------------------------------

    def _host(self, rank: int, events: list):
        """Issue the rank's events in order, each ``host_us`` after the one before, blocking where
        the framework synchronises with the GPU (``blocks_host``; after each run of SendRecvs
        where the trace says its framework does) and at each iteration's end.

        Issue times are set a stretch at a time (up to the next block), so an event costs the
        host no SimPy event of its own; a stream that reaches an event not yet set waits."""
        now, pending, syncs, first, exchange = self.env.now, [], [], 0, []
        for i, event in enumerate(events):
            key = (rank, event.id)
            if isinstance(event, ComputeEvent):
                self.costs[key] = cost = self.timer.cost(event)
                now += cost.host_us
            else:
                now += self.collective_host_us
            self.issued_at[key] = now
            pending.append(key)
            if blocks_host(event):
                syncs.append(self.done[key])
            if self.p2p_syncs and _exchanging(event):  # a batch of pipeline sends and receives
                exchange.append(self.done[key])
                if i + 1 == len(events) or not _exchanging(events[i + 1]):
                    syncs, exchange = syncs + exchange, []
            last = i + 1 == len(events) or events[i + 1].iteration != event.iteration
            if last or syncs:
                for waiting in pending:
                    if waiting in self.awaiting_host:
                        self.awaiting_host.pop(waiting).succeed()
                pending = []
                if now > self.env.now:
                    yield self.env.timeout(now - self.env.now)
                if last:
                    syncs = [self.done[(rank, e.id)] for e in events[first:i + 1]]
                    first = i + 1
                yield simpy.AllOf(self.env, [ev for ev in syncs if not ev.processed])
                syncs = []
                now = self.env.now

    def _await_issue(self, rank: int, event):
        """Wait until the host has issued ``event``; the GPU's wait for it is logged as host wait."""
        key, ready = (rank, event.id), self.env.now
        if key not in self.issued_at:
            self.awaiting_host[key] = self.env.event()
            yield self.awaiting_host[key]
        issued = self.issued_at.pop(key)
        if issued > self.env.now:
            yield self.env.timeout(issued - self.env.now)
        if self.env.now > ready:
            self.intervals[rank]["host"].append((ready, self.env.now))

    # ---- calls ---------------------------------------------------------------------------

    def _call(self, rank: int, event: CollectiveEvent, key: tuple) -> _Call:
        if key in self.calls:
            return self.calls[key]
        members = members_of(self.trace, rank, event)
        task = task_of(self.trace, rank, event)
        timed = None
        if task is None:
            self.unsized += 1
        elif task.nranks > 1 and task.nbytes > 0:
            timed = self.placement.timed(task, event.group, members, self.configs.get(task))
        present = tuple(r for r in members if r in self.present)
        call = _Call(key, event.group, task, timed, members, present, self.env.event())
        self.calls[key] = call
        return call

    def _run_call(self, call: _Call):
        call.began_us = self.env.now
        if call.timed is not None:
            s = call.timed.schedule
            # The absent copies run as NCCL runs them on their own communicators (its default choice
            # there may be another protocol, with another launch): those launching unlike the call
            # start their transfers on their own.
            alike = []
            for copy in self._shadows(call):
                shadow = self.placement.copy_timed(call.task, call.group, call.members, copy,
                                                   self.configs.get(call.task)).schedule
                if shadow.launch_us == s.launch_us:
                    alike.append((copy, shadow))
                else:
                    call.launching.append(copy)
                    self.env.process(self._launch_shadow(call, copy, shadow))
            yield self.env.timeout(float(s.launch_us))
            ratio = self._copy_ratio(call)
            call.transfer = self.net.start(lumped_bytes(s), s.links, lumped_cap_gbps(s, ratio))
            for r in call.present:
                if call in self.gpus[r].early:
                    self.gpus[r].early.remove(call)
            for copy, shadow in alike:
                # The absent ranks compute what the ones standing for them compute: the same copy rate.
                self._start_shadow(call, copy, shadow, ratio)
            for r in call.present:
                self.gpus[r].calls.append(call)
                self._recap_phases(self.gpus[r])
            yield call.transfer.done
            self._compare(call)
            for r in call.present:
                self.gpus[r].calls.remove(call)
                self._recap_phases(self.gpus[r])
        elif call.measured_us > 0:
            yield self.env.timeout(call.measured_us)
        if call.task is not None:
            self.call_log.append((call, self.env.now))
        del self.calls[call.key]
        call.done.succeed()

    def _shadows(self, call: _Call) -> list[tuple[int, ...]]:
        """Absent shifted copies of the call's members that this call stands for (each copy is
        claimed by the first replayed group that shares a node with it)."""
        mine = []
        for copy in self.placement.absent_siblings(call.members):
            if self.shadow_of.setdefault(copy, call.members) == call.members:
                mine.append(copy)
        return mine

    def _launch_shadow(self, call: _Call, copy: tuple[int, ...], shadow: Schedule):
        """Start a shadow's transfer after its own launch (not the call's)."""
        yield self.env.timeout(float(shadow.launch_us))
        call.launching.remove(copy)
        self._start_shadow(call, copy, shadow, self._copy_ratio(call))

    def _start_shadow(self, call: _Call, copy: tuple[int, ...], shadow: Schedule, ratio: float) -> None:
        transfer = self.net.start(lumped_bytes(shadow), shadow.links, lumped_cap_gbps(shadow, ratio))
        call.shadows.append((copy, shadow, transfer, self._shadow_end(transfer)))
        if call.transfer is None:  # its caps follow the compute on the call's GPUs from now (``_recap_calls``)
            for r in call.present:
                if call not in self.gpus[r].early:
                    self.gpus[r].early.append(call)

    def _shadow_end(self, transfer: Transfer) -> list[float]:
        """A list that holds the transfer's end time once it ends."""
        end: list[float] = []
        transfer.done.callbacks.append(lambda _event: end.append(self.env.now))
        return end

    def _compare(self, call: _Call) -> None:
        """Note the shadows that did not end with the call they copy: ranks left out of the trace
        whose calls run unlike their representatives' (other NIC or PCIe paths, other sharing).

        A shadow due now may not have run its end's callbacks yet (SimPy processes the ends of one
        instant in turn): it ended now; one still running is compared by its predicted end."""
        now = self.env.now
        slack = 1e-9 * (now - call.began_us) + 1e-6
        for copy, _, transfer, end in call.shadows:
            when = end[0] if end else now if transfer.done.triggered else transfer.end_us
            if abs(when - now) > slack:
                self.unlike[copy] = call.members
        for copy in call.launching:  # not even started: it ends later
            self.unlike[copy] = call.members

    def _copy_ratio(self, call: _Call) -> float:
        """What the compute on the call's GPUs leaves of its kernels' copy rate (the slowest rank's)."""
        return min(copy_ratio(self.gpus[r].computes.values(), self.gpu, self.params) for r in call.present)

    # ---- interference --------------------------------------------------------------------

    def _hold_sms(self, gpu: _Gpu, sms: int) -> None:
        if not sms:
            return
        gpu.busy_sms += sms
        self._recap_phases(gpu)

    def _recap_phases(self, gpu: _Gpu) -> None:
        copying = bool(gpu.calls)
        self.net.set_caps([(phase, self._speed(cost, gpu.busy_sms, copying)) for phase, cost in gpu.computes.items()])

    def _speed(self, cost: PhaseCost, busy_sms: int, copying: bool) -> float:
        """``phase_speed`` on the replay's GPU, each distinct phase, SM count and copying state
        computed once (a pure function of them; the replay asks tens of thousands of times)."""
        key = (cost, busy_sms, copying)
        if key not in self.speeds:
            self.speeds[key] = phase_speed(cost, busy_sms, copying, self.gpu, self.params)
        return self.speeds[key]

    def _recap_calls(self, gpu: _Gpu) -> None:
        caps = []
        for call in gpu.calls:
            ratio = self._copy_ratio(call)
            caps.append((call.transfer, lumped_cap_gbps(call.timed.schedule, ratio)))
            caps += [(transfer, lumped_cap_gbps(shadow, ratio)) for _, shadow, transfer, _ in call.shadows]
        for call in gpu.early:
            ratio = self._copy_ratio(call)
            caps += [(transfer, lumped_cap_gbps(shadow, ratio)) for _, shadow, transfer, _ in call.shadows]
        self.net.set_caps(caps)

    # ---- results -------------------------------------------------------------------------

    def _check_finished(self) -> None:
        for call in self.calls.values():
            waiting = sorted(set(call.present) - set(call.arrived))
            rank = call.arrived[0]
            what = f"{call.task.op} of {call.task.nbytes} B" if call.task else "a collective of unknown size"
            raise ReplayError(f"rank {rank} waits forever in {what} on group {call.group!r}: "
                              f"rank(s) {waiting} never issue their matching call")
        stuck = [key for key, ev in self.done.items() if not ev.triggered]
        if stuck:
            rank, event = stuck[0]
            raise ReplayError(f"rank {rank}, event {event} never ran ({len(stuck)} events stuck)")

    def totals(self) -> Totals:
        """The replay's sums, before the per-iteration means."""
        ranks, computes = {}, {}
        for rank in sorted(self.present):
            computes[rank] = compute = union(self.intervals[rank]["compute"])
            ranks[rank] = RankSums.of(compute, union(self.intervals[rank]["comm"]), union(self.intervals[rank]["host"]))
        sums: dict[Task, list] = {}  # task -> [calls, took, exposed, alone, timed, first timed call, weight]
        alone_us: dict[int, float] = {}
        for call, end in self.call_log:
            acc = sums.setdefault(call.task, [0, 0.0, 0.0, 0.0, 0, None, 0])
            hidden = sum(covered(computes[r], call.began_us, end) for r in call.present) / len(call.present)
            weight = 1 + len(call.shadows)  # the absent groups copying it take as long
            acc[0] += 1
            acc[1] += (end - call.began_us) * weight
            acc[2] += (end - call.began_us - hidden) * weight
            acc[6] += weight
            if call.timed is not None:
                key = id(call.timed)  # alive in the log; a call's time alone is its schedule's, once each
                if key not in alone_us:
                    alone_us[key] = float(call.timed.schedule.time_us())
                acc[3] += alone_us[key]
                acc[4] += 1
                acc[5] = acc[5] or call.timed
        tasks = {task: TaskSums(timed.config, timed.chosen_by, calls, took, exposed, alone, n, weight)
                 for task, (calls, took, exposed, alone, n, timed, weight) in sums.items() if timed is not None}
        return Totals(dict(self.iteration_end), ranks, tasks, sum(len(r.events) for r in self.trace.ranks))

    def _notes(self) -> list[str]:
        notes = []
        if self.timer.kept_as_measured:
            source = self.timer.source.model if self.timer.source else "an unnamed GPU"
            notes.append(f"{self.timer.kept_as_measured} compute phase(s) have only a measured duration "
                         f"(on {source}) and keep it on {self.gpu.model}")
        if self.timer.untimed:
            notes.append(f"{self.timer.untimed} compute phase(s) have no duration, FLOPs or bytes: timed as 0")
        if self.unsized:
            notes.append(f"{self.unsized} collective call(s) of unknown size replay with their measured time")
        fallbacks = {c.task for c, _ in self.call_log if c.timed and c.timed.chosen_by == "nccl-fallback"}
        if fallbacks:
            notes.append(f"{len(fallbacks)} task(s) had a configuration this cluster cannot run: NCCL's default used")
        missing = self.trace.world_size - len(self.present)
        if missing:
            notes.append(f"{len(self.present)} of {self.trace.world_size} ranks in the trace: the others are assumed "
                         f"to reach each shared call in time; {len(self.shadow_of)} group(s) of absent ranks sharing "
                         "nodes with replayed calls load the network beside them")
        if self.classes:
            notes.append(f"{self.classes} absent rank(s) reach the network otherwise than the ranks that stood for "
                         "them (other NIC or PCIe paths): replayed as ranks of the trace")
        if self.unlike:
            notes.append(f"{len(self.unlike)} group(s) of absent ranks run their calls unlike the ranks that stand for "
                         "them (other NIC or PCIe paths, other sharing): the prediction holds for the ranks in the "
                         "trace; replay a trace of every rank for the others")
        return notes


def blocks_host(event) -> bool:
    """Whether the host waits for ``event`` to finish before issuing the next one (the module
    docstring says where Megatron synchronises): a loss-scale check or a gradient clip.

    >>> from traces.schema import ComputeEvent
    >>> blocks_host(ComputeEvent(0, "clip_grad_norm", category="optimizer"))
    True
    >>> blocks_host(ComputeEvent(1, "optimizer.step", category="optimizer")), blocks_host(ComputeEvent(2, "qkv"))
    (False, False)
    """
    return (isinstance(event, ComputeEvent) and event.category == "optimizer"
            and optimizer_kind(event.name) in ("clip", "scale"))


def _exchanging(event) -> bool:
    """A point-to-point call (a side of a pipeline exchange)."""
    return isinstance(event, CollectiveEvent) and event.op is Op.SENDRECV


def _call_keys(rank: int, events) -> dict[int, tuple]:
    """Event id -> the call it joins: (group, k) for the k-th call of a group in issue order;
    for a SendRecv, as NCCL matches point-to-point operations, (None, sender, receiver, k) for
    the k-th send from sender to receiver, which is the receiver's k-th receive from it
    (``_pair_key``).

    >>> from traces.schema import CollectiveEvent
    >>> send = CollectiveEvent(0, Op.SENDRECV, 8, "pp", peer=1, direction="send")
    >>> recv = CollectiveEvent(1, Op.SENDRECV, 8, "pp", peer=1, direction="recv")
    >>> _call_keys(0, [send, recv])
    {0: (None, 0, 1, 0), 1: (None, 1, 0, 0)}
    """
    keys, seq = {}, defaultdict(int)
    for event in events:
        if isinstance(event, CollectiveEvent):
            pair = _pair_key(rank, event) if event.op is Op.SENDRECV else (event.group,)
            keys[event.id] = (*pair, seq[pair])
            seq[pair] += 1
    return keys


def _pair_key(rank: int, event: CollectiveEvent) -> tuple:
    """Which ordered stream of point-to-point calls a SendRecv belongs to: (None, sender,
    receiver) when the trace gives its direction, else (None, lower rank, higher rank, None):
    both sides' calls on the pair in one order."""
    if event.direction == "send":
        return None, rank, event.peer
    if event.direction == "recv":
        return None, event.peer, rank
    return None, *sorted((rank, event.peer)), None


def plan_configs(plan: Plan) -> dict[Task, Config]:
    """The best configuration of every task of a warm-start plan, as ``replay`` takes them."""
    return {entry.task: entry.best.config for entry in plan.entries}


def replay(trace: Trace, cluster: Cluster, configs: dict[Task, Config] | None = None, *,
           placement: Placement | None = None, params: TwinParams = DEFAULT_PARAMS, periods: bool = True
           ) -> ReplayResult:
    """Replay ``trace`` on ``cluster`` (rank r on GPU r: ``twin.placement``) with the twin's
    physical constants ``params``.

    ``configs`` maps tasks (as ``Trace.tasks`` names them) to the configuration to run them
    with (``plan_configs`` reads them off a warm-start plan); other tasks run with NCCL's
    default choice.  ``placement`` reuses the communicators of an earlier replay of the same
    trace on the same cluster with the same ``params``.  With ``periods`` (the default) a trace whose
    ranks repeat the same work (a pipeline's micro-batches) is simulated for a few repeats and the
    others added once the replay is periodic (``twin.replay.steady``); ``periods=False`` steps
    through every event.  Raises ``twin.placement.PlacementError`` when the cluster has
    fewer GPUs than the trace's world size, ``ReplayError`` when a call can never complete.
    """
    if placement is None:
        placement = Placement(trace, cluster, params=params)
    elif placement.params != params:
        raise ValueError("the placement was built with other parameters than the replay's params")
    run, totals = _simulate(trace, cluster, configs or {}, placement, periods)
    added = 0
    while classes := _class_ranks(run):
        # Shadows that ran unlike their calls: one rank of each such group joins the trace and runs
        # its representative's events on the shifted groups (``twin.placement.classes``).
        trace = with_ranks(trace, classes)
        if len(trace.ranks) == len(run.trace.ranks):
            break
        added += len(trace.ranks) - len(run.trace.ranks)
        run, totals = _simulate(trace, cluster, configs or {}, placement.with_trace(trace), periods)
    run.classes = added
    return totals.result(cluster.identity, run.gpu.model, tuple(run._notes()), _stands_for(run) if added else None)


def _simulate(trace: Trace, cluster: Cluster, configs: dict[Task, Config], placement: Placement,
              periods: bool) -> tuple[_Replay, Totals]:
    """One replay of ``trace`` and its sums: a shortened trace's extended by its periods where it
    settles (``twin.replay.steady``), else every event stepped."""
    keep = steady.KEEP
    while periods and (short := steady.shorten(trace, keep, _call_keys)) is not None:
        run = _Replay(short.trace, cluster, configs, placement)
        run.spans = {}
        run.run()
        totals = steady.extend(run, short)
        if totals is not None:
            return run, totals
        keep += steady.KEEP
    run = _Replay(trace, cluster, configs, placement)
    run.run()
    return run, run.totals()


def _stands_for(run: _Replay) -> dict[int, int]:
    """Rank of the trace -> the ranks of the job it stands for: itself and the absent ranks whose
    shadows copy it (each absent rank counted once, for the first call it shadows)."""
    counts = dict.fromkeys(run.present, 1)
    for rank in _copied(run.shadow_of, run.present).values():
        counts[rank] += 1
    return counts


def _class_ranks(run: _Replay) -> dict[int, int]:
    """Absent rank -> the rank of the trace it copies: the ranks of every shadow that did not end
    with its call, where that call's members in the trace sit (both ends of a pipeline pair)."""
    return _copied(run.unlike, run.present)


def _copied(shadows: dict[tuple[int, ...], tuple[int, ...]], present: set[int]) -> dict[int, int]:
    """Absent rank -> the rank of the trace in its place, over ``shadows`` (a shadow's members ->
    the members of the call it copies), for the first shadow naming it."""
    out: dict[int, int] = {}
    for copy, members in shadows.items():
        for absent, rank in zip(copy, members, strict=True):
            if rank in present and absent not in present:
                out.setdefault(absent, rank)
    return out
