"""Invariants every prediction of the closed-form model keeps, on every preset, op, algorithm and
protocol the model runs there, over sizes from 1 B to 16 GiB.

(a) For a fixed configuration, time never decreases as the size grows.
(b) At NCCL's own choice the configuration may switch at a size, and the time just above the
    switch may then be below the time of a smaller size, by no more than NCCL's real
    thresholds allow: ``time(s2) ≥ time(s1) × (1 − tolerance)`` for every ``s2 > s1`` of the
    same dtype (sizes below 4 B reduce int8, which NCCL runs without NVLS: a change of dtype,
    not of size), where
    the tolerance depends on what changed between the configurations of ``s1`` and ``s2``:

    * only the chunk (NCCL's NVLS 16 → 32 → 64 → 128 KiB steps): ``CHUNK_TOLERANCE`` = 10 %.
      The one such step measured in the repo, NVLS 64 → 128 KiB at 1 GiB on 8×H100, raises
      busbw from 438 to 466 GB/s between 512 MiB and 1 GiB (Azure ND H100 v5 file), 6.4 %.
    * channels, threads, protocol or algorithm: ``SWITCH_TOLERANCE`` = 25 %.  NCCL halves
      channels and threads below its thresholds (``MinTrafficPerChannel``, the per-thread
      thresholds of ``enqueue.cc``), so just below one a channel's LL CTA walks up to twice
      the line passes per step (``LLGenericOp``, ``prims_ll.h``), and it switches protocol
      where its cost model says, not where the time crosses: on the L40S 2-GPU files the
      measured LL and Simple differ by 2× at 1 MiB, so a late switch can save a quarter of the
      time and more.  25 % keeps every step the model's thresholds make, and none of the
      1.5× cliffs this test was written against.  A Broadcast/Reduce chain's LL pipeline fills
      one CTA pass per hop whatever its threads (thread t of every rank forwards line t), so
      below a per-thread threshold only the extra passes cost: ≤ 2× the passes of the data, a
      fall of at most 21 % on every preset.
    * more threads, from ``nt1`` to ``nt2 > nt1``, the channels the same or more but none with
      less of the data (``s2/nc2 ≥ s1/nc1``: a channel's work does not shrink, and more channels
      share the links): also no more than
      ``(1 − nt1/nt2) × (1 − floor/time(s1))``.  Across nodes a pipeline's network hop waits
      until the sending CTA has written its whole FIFO step (``sendProxyProgress``: the chunk of
      a Broadcast chain, a tree's step, ``Schedule.hold_bytes``), in passes of its threads, so
      below NCCL's thread threshold (Ring LL: 8 B × nranks a thread, ``tuning.cc``) a 16-rank
      LL chain's held 32 KiB step takes twice its time at half the threads.  What ``nt2/nt1``
      times the threads can shorten is at most the CTA's passes: ``nt1/nt2`` of them remain, and
      the launch and every fill step's hop latency (``floor`` = ``launch_us + fill_steps ×
      step_us`` of ``s1``'s schedule) do not move; the data of ``s2`` is no less.  So
      ``time(s2) ≥ floor + (time(s1) − floor) × nt1/nt2``, whatever the preset.

(c) busbw never exceeds the bound of the links the collective crosses
    (``twin.model.bounds.busbw_bound_gbps``), and neither does any measurement in the repo.
(d) Predictions are finite and positive.

Presets are read from the preset folder, so new ones are covered without editing this file.
Every communicator is one whole node, a 2-GPU and a half-node subset, and two nodes.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import pytest

from traces.nccl_tests import read_nccl_tests
from traces.task import Op
from tuner.config import Algo, Config, ConfigError, Proto, Transport
from tuner.rules import ALGORITHMS_FOR_OP
from twin.model.bounds import busbw_bound_gbps
from twin.model.schedule import Unsupported, check_supported, schedule_for
from twin.placement import Communicator
from twin.predict import predict, resolve
from twin.topology import load_cluster

PRESETS = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "twin/topology/presets").glob("*.yaml"))
DATA = Path(__file__).resolve().parents[1] / "data" / "nccl-tests"
CHUNK_TOLERANCE = 0.10
SWITCH_TOLERANCE = 0.25
EPS = 1e-9
SIZES = sorted({1, 2, 3} | {s for k in range(2, 35) for s in (1 << k, (1 << k) - (1 << max(k - 10, 2)))} - {0})
"""1 B to 16 GiB: every power of two and a size 1/1024 below it (where NCCL's thresholds sit)."""


def dtype_for(nbytes: int) -> str:
    return "float32" if nbytes % 4 == 0 else "int8"


@cache
def communicators() -> dict[str, Communicator]:
    out = {}
    for preset in PRESETS:
        one = load_cluster(preset)
        per_node = one.gpus_per_node
        for n in sorted({per_node, max(2, per_node // 2), 2}):
            if n <= per_node:
                out[f"{preset}:{n}"] = Communicator.first(one, n)
        out[f"{preset}:2x{per_node}"] = Communicator.first(load_cluster(preset, nodes=2))
    return out


def subspaces(comm: Communicator, op: Op) -> list[tuple[Algo, Proto]]:
    geom = comm.geometry()
    out = []
    for algo in ALGORITHMS_FOR_OP[op]:
        for proto in Proto:
            try:
                check_supported(geom, op, algo, proto)
            except Unsupported:
                continue
            out.append((algo, proto))
    return out


def fixed_config(comm: Communicator, op: Op, algo: Algo, proto: Proto) -> Config | None:
    """NCCL's resources for ``algo``/``proto`` at 64 MiB, held for every size (None where NCCL
    itself would refuse the pair here, as it refuses NVLS alone across nodes)."""
    try:
        config, _, _ = resolve(comm, op, 64 << 20, algo=algo, proto=proto)
    except ConfigError:
        return None
    return Config(algo, proto, Transport.P2P, config.nchannels, config.nthreads, config.chunk_bytes)


def fixed_curve(comm: Communicator, op: Op, config: Config) -> list[float]:
    geom = comm.geometry()
    return [float(schedule_for(geom, op, s, config.algo, config.proto, config.nchannels, config.nthreads,
                               config.chunk_bytes).time_us()) for s in SIZES]


CASES = [(name, op) for name in communicators() for op in Op]


def busbw(comm: Communicator, op: Op, nbytes: int, time_us: float) -> float:
    return comm.task(op, nbytes, dtype_for(nbytes)).busbw_gbps(time_us)


@pytest.mark.parametrize(("name", "op"), CASES, ids=[f"{n}-{o}" for n, o in CASES])
def test_a_fixed_config_never_gets_faster_with_size_and_stays_within_its_links(name, op):
    comm = communicators()[name]
    if op is not Op.SENDRECV and comm.nranks < 2:
        pytest.skip("one rank")
    problems = []
    for algo, proto in subspaces(comm, op):
        config = fixed_config(comm, op, algo, proto)
        if config is None:
            continue
        times = fixed_curve(comm, op, config)
        bound = busbw_bound_gbps(comm.geometry(), op, algo)
        for s, t in zip(SIZES, times, strict=True):
            if not (math.isfinite(t) and t > 0):
                problems.append(f"{config} at {s} B: time {t}")
            elif busbw(comm, op, s, t) > bound * (1 + EPS):
                problems.append(f"{config} at {s} B: busbw {busbw(comm, op, s, t):.1f} > bound {bound:.1f} GB/s")
        for (s1, t1), (s2, t2) in zip(zip(SIZES, times, strict=True), zip(SIZES[1:], times[1:], strict=True),
                                      strict=False):
            if t2 < t1 * (1 - EPS):
                problems.append(f"{config}: {s2} B takes {t2:.2f} µs < {s1} B {t1:.2f} µs")
    assert not problems, "\n".join(problems[:20])


def switch_tolerance(before: Config, after: Config, floor_share: float = 1.0, sizes: tuple[int, int] = (1, 1)
                     ) -> float:
    """How much faster a size may run than a smaller one when NCCL's choice changes between them
    (the module's rule (b)); ``floor_share``: the share of the smaller size's time that no thread
    count shortens (its launch and fill steps' hop latency); ``sizes``: the two sizes.

    >>> from dataclasses import replace
    >>> ll = Config(Algo.RING, Proto.LL, Transport.P2P, 1, 128, 32768)
    >>> more = replace(ll, nchannels=2, nthreads=512)
    >>> switch_tolerance(ll, more, 0.5, (32736, 131072)), switch_tolerance(ll, more, 0.5, (32736, 32768))
    (0.375, 0.25)
    """
    if (before.algo, before.proto, before.nchannels, before.nthreads) == (after.algo, after.proto,
                                                                          after.nchannels, after.nthreads):
        return CHUNK_TOLERANCE
    if ((before.algo, before.proto) == (after.algo, after.proto) and after.nthreads > before.nthreads
            and after.nchannels >= before.nchannels
            and sizes[1] / after.nchannels >= sizes[0] / before.nchannels):
        return max(SWITCH_TOLERANCE, (1 - before.nthreads / after.nthreads) * (1 - floor_share))
    return SWITCH_TOLERANCE


def floor_share(comm: Communicator, op: Op, nbytes: int, config: Config, time_us: float) -> float:
    """The share of ``time_us`` that its launch and its fill steps' hop latency take (rule (b))."""
    s = schedule_for(comm.geometry(), op, nbytes, config.algo, config.proto, config.nchannels, config.nthreads,
                     config.chunk_bytes)
    return min(1.0, float(s.launch_us + s.fill_steps * s.step_us) / time_us)


SHM_TREE = ("4 H100 NVL/PCIe in 2 NVLink-bridged pairs on 2 PCIe switches of an Intel socket: NCCL goes through "
            "host memory between the pairs (SHM: P2P stops at PXB on Intel, 2.18-2.28) and its tree search prices "
            "only a chain's forward hops, so its 2 chains (0-1-2-3, 2-3-0-1) get 40 GB/s each against the ring's one "
            "40 GB/s channel split in two, and its Tree correction factors pick Tree at 16,760,832 B (and from "
            "64 MiB; 2.18 and 2.23-2.28, where 2.19-2.22's 28 µs PCI Tree hop keeps Ring there); a chain crosses "
            "its SHM hop both ways, so the GPUs there load host memory while storing into it on half the channels, "
            "a channel's 256 broadcast threads, 224 copying (prims_simple.h keeps a warp out to post each step), "
            "8 loads of 16 B in flight at 3.8 µs, in series with the link's duplex ceiling (0.925 of NCCL's 48 GB/s; "
            "H200 measurements, twin.model.shm), receive 5.6 GB/s against the ring's 9.4-10.4 GB/s link share: "
            "NCCL's switch back to Ring at 16 MiB falls 28-30 %, the tree's 6-hop fill of 512 KiB chunks included "
            "(its first chunk up the SHM hop meets no stores there, 7.6 GB/s); the ring's SHM stores are priced at "
            "NCCL's 48 GB/s less TLP headers, 43.9, where the H200's CTAs store 52.3, so a real fall would be no "
            "smaller; no nccl-tests file of such a node says what NCCL's Tree really gets there")
EFA_TREE = ("two nodes over EFA: NCCL's own tables switch Ring → Tree LL128 at 4-8 MiB where the twin's Ring LL128 "
            "is paced by the busiest proxy's requests: 16 channels on NCCL's 8 net devices (aws-ofi-nccl merges each "
            "GPU's rails into one), 2 a GPU, 2 isends and 2 irecvs a step of 1.75 µs on p5/p5e's AMD hosts (1.5 on "
            "p5en), 246 µs at 8 MiB against the Tree's 139-159 (35-43 %; p5en 40 % at 4 MiB); and NCCL's NVLS-Tree "
            "64 → 128 KiB chunk step at 64 MiB falls 23-32 % (chunk-only tolerance 10 %), its 64 KiB steps bound by "
            "the same requests; each request's EFA cost (fabric.efa.message_us, 1.25 µs) is first-generation EFA's "
            "(libfabric tagged RDM on c5n), no public figure gives aws-ofi-nccl's RDMA protocol on EFA v2+; "
            "aws-ofi-nccl's tuner keeps NCCL's choice on two nodes or fewer (nccl_ofi_regions.cpp since v1.15.0). "
            "Against the held-out p5 file it is the other side of each switch that is fast: the measured ring "
            "(16, 32 MiB) extrapolates to 227-239 µs at 8 MiB, the measured Tree takes 201-205 (a 10-16 % fall), "
            "the twin's Tree 159, short of a fixed cost of the 16-channel call (docs/physics.md, 'Two p5 nodes'); "
            "NVLS-Tree at 64 MiB takes 601 µs measured, the twin 541 on 64 KiB chunks and 369 on 128 KiB")
GIB_A4_LL = ("two a4 VMs of 8 B200: Google's gIB tuner (tuner_config_a4.txtpb) keeps Ring LL on 8 channels up to "
             "256 KiB per rank (4 MiB of AllGather over 16 ranks) and Ring LL128 on 16 above, where the twin's LL on 8 "
             "channels is bound by their LL line rate (78 µs at 4 MiB against 42 at 2 MiB; Broadcast and Reduce 111) "
             "and its LL128 takes 56 (74), a 27-33 % fall; Google tuned that threshold on the VMs, and no public a4 "
             "2x8 measurement says whether the twin's LL is too slow or its LL128 too fast there")
GIB_A3U_LL = ("two a3-ultra VMs of 8 H200: a two-node LL chain's network hop holds a whole LL step, written one CTA "
              "pass of lines at a time (sendProxyProgress posts it whole, after checking every line in host memory), "
              "and Google's gIB tuner (tuner_config_a3u.txtpb) moves a Broadcast or Reduce from NCCL's own 2 channels "
              "to Ring LL on 8 at 8 KiB per rank: 65,472 B on 2 channels of 256 threads hold 32 KiB each and take "
              "53.4 µs, 128 KiB on 8 of 512 hold 16 KiB and take 39.8, a 25.4 % fall, where rule (b)'s thread step "
              "needs the channels to carry no less data; no public a3-ultra 2x8 measurement of a chain says "
              "whether NCCL's time falls there")
GH200_LL_SCAN = ("two HPE Cray EX254n nodes of 4 GH200 over Slingshot: NCCL's own tables switch Ring LL on 8 channels "
                 "to Ring LL128 between 1 and 2 MiB, where the twin's Ring LL is paced by the busiest proxy thread's "
                 "flag scans of every LL step in host memory before it posts it (twin.model.netpath.ll_scan_us, H200 "
                 "host measurement: 7 steps at 9.1 µs of proxy work, 74.8 of the 81.4 µs of AllGather at 1 MiB; "
                 "ReduceScatter 80.8) and its LL128 steps by their transfer (60.9 and 60.4 µs at 2 MiB): a 25.2 % "
                 "fall, 24.2 % before the first post was written at the CTA's own rate (Schedule.write_gbps, issue 12, "
                 "session 11); no public GH200 Slingshot measurement says whether NCCL's LL is that slow there")
SHM_TREE_SOCKETS = ("8 H100 NVL in 4 NVLink-bridged pairs over 2 Sapphire Rapids sockets, one node or two: "
                    "between pairs NCCL goes through host memory (SHM), and NCCL's cost model picks Tree at 2-8 MiB, "
                    "a chain of 14 hops (one node) of 512 KiB chunks whose SHM hops load host memory at the copying "
                    "threads' latency-bound rate (twin.model.shm, as SHM_TREE): at 2 MiB a channel's 2 chunks cross "
                    "them while nothing else loads or stores there (7.6 GB/s a channel) and still take 509 µs against "
                    "the ring's 263 at 4 MiB, whose stores cross the sockets at UPI's rate for device DMA "
                    "(cpu.memory_bw, 4 x 16 GT/s); on two nodes, where the fill is not yet taken at each hop's rate, "
                    "the tree's 4 MiB take 1,257 µs against the ring's 681 at 8 MiB (h100-pcie:8, at NCCL's 22 GB/s "
                    "socket link, falls 22 %: 751 against 585); no nccl-tests file of such a node says what NCCL's "
                    "Tree really gets there")
KNOWN_MISSES = {
    **{(name, Op.ALLREDUCE): SHM_TREE_SOCKETS for name in ("h100-nvl:8", "h100-nvl:2x8")},
    **{("gcp-a3-ultra:2x8", op): GIB_A3U_LL for op in (Op.BROADCAST, Op.REDUCE)},
    **{("gcp-a4:2x8", op): GIB_A4_LL for op in (Op.ALLGATHER, Op.REDUCESCATTER, Op.BROADCAST, Op.REDUCE)},
    **{("gh200-slingshot:2x4", op): GH200_LL_SCAN for op in (Op.ALLGATHER, Op.REDUCESCATTER)},
    **{(f"{p}:2x8", Op.ALLREDUCE): EFA_TREE for p in ("aws-p5", "aws-p5e", "aws-p5en")},
    **{(f"{p}:4", Op.ALLREDUCE): SHM_TREE for p in ("h100-nvl", "h100-pcie")},
}
"""Where rule (b) does not hold yet: thresholds of NCCL's whose effect the model still overstates
(each an effect not yet modelled, docs/physics.md).  Strict: a fix makes its case fail here."""


CHOICE_CASES = [pytest.param(n, o, id=f"{n}-{o}", marks=[pytest.mark.xfail(strict=True, reason=why)]
                             if (why := KNOWN_MISSES.get((n, o))) else []) for n, o in CASES]


@pytest.mark.parametrize(("name", "op"), CHOICE_CASES)
def test_at_nccl_choice_time_falls_at_a_switch_no_more_than_real_thresholds_allow(name, op):
    comm = communicators()[name]
    geom = comm.geometry()
    problems = []
    # Per dtype: below 4 B the test reduces int8, which NCCL may run with other algorithms (NVLS
    # cannot reduce int8), so a change of dtype is not a change of size and is not compared.
    slowests: dict[str, tuple[float, int, Config | None, float]] = {}
    for s in SIZES:
        p = predict(comm, op, s, dtype=dtype_for(s))
        slowest = slowests.get(dtype_for(s), (0.0, 0, None, 1.0))
        t = p.time_us
        if not (math.isfinite(t) and t > 0):
            problems.append(f"{p.config} at {s} B: time {t}")
            continue
        bound = busbw_bound_gbps(geom, op, p.config.algo)
        if p.busbw_gbps > bound * (1 + EPS):
            problems.append(f"{p.config} at {s} B: busbw {p.busbw_gbps:.1f} > bound {bound:.1f} GB/s")
        tolerance = switch_tolerance(slowest[2], p.config, slowest[3], (slowest[1], s)) if slowest[2] else 0.0
        if slowest[2] is not None and t < slowest[0] * (1 - tolerance):
            problems.append(f"{s} B ({p.config}) takes {t:.2f} µs, {slowest[1]} B ({slowest[2]}) {slowest[0]:.2f}")
        if t > slowest[0]:
            slowests[dtype_for(s)] = (t, s, p.config, floor_share(comm, op, s, p.config, t))
    assert not problems, "\n".join(problems[:20])


MEASURED = {
    # file: (preset, nodes, the algorithm the run used, or None for NCCL's choice: any it offers)
    "nvidia-dgxc-dgxh100-8gpu-intranode-allreduce-sample": ("dgx-h100", 1, None),
    "azure-ndH100v5-8gpu-intranode-allreduce-NVLS-busbw-summary": ("dgx-h100", 1, Algo.NVLS),
    "vtrain-a100-8gpu-intranode-allreduce-LUT-1MiB-1GiB": ("dgx-a100", 1, Algo.RING),
    "vtrain-a100-4gpu-intranode-allreduce-LUT-1MiB-1GiB": ("dgx-a100", 1, Algo.RING),
    "vtrain-a100-2gpu-intranode-allreduce-LUT-1MiB-1GiB": ("dgx-a100", 1, Algo.RING),
    "echo-azure-ndA100v4-allreduce-8gpu": ("dgx-a100", 1, None),
    "echo-azure-ndA100v4-allreduce-16gpu": ("dgx-a100", 2, None),
    "echo-azure-ndA100v4-allreduce-64gpu": ("dgx-a100", 8, None),
}


@pytest.mark.parametrize("stem", sorted(MEASURED))
def test_no_measurement_beats_the_link_bound(stem):
    """The bound is physics, not a wish: real runs stay under it, and inside a node (where
    nothing but the GPUs' links limits a large AllReduce) come within 25 % of it."""
    preset, nodes, algo = MEASURED[stem]
    log = read_nccl_tests(DATA / f"{stem}.txt")
    comm = Communicator.first(load_cluster(preset, nodes=nodes), log.nranks)
    geom = comm.geometry()
    algos = [algo] if algo else [a for a, _ in subspaces(comm, log.op)]
    bound = max(busbw_bound_gbps(geom, log.op, a) for a in algos)
    peak = max(row.busbw for row in log.rows if row.busbw)
    assert peak <= bound, f"{stem}: measured {peak} GB/s > bound {bound:.1f}"
    assert nodes > 1 or peak > 0.75 * bound, f"{stem}: bound {bound:.1f} GB/s is far above the measured {peak}"
