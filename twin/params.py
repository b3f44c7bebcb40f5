"""The twin's physical constants as one frozen, typed parameter object.

Picture a calibration run on two H200 nodes: it fits NVLink's efficiency, LL128's copy factor
and the Simple slice hand-over to a few hundred measurements and saves the result as a profile
(``twin.profile``); a later what-if loads it and passes it as ``params=`` to the model, both
engines and the replay, and nothing else changes.  ``DEFAULT_PARAMS`` holds the numbers the
twin has always used, each with its source.

Every parameter has a dotted name (``link.nvlink.efficiency``), a unit and a valid range, so a
fit can address each one by name and stay within its bounds:

>>> DEFAULT_PARAMS.link.nvlink.efficiency
0.84
>>> TwinParams.bounds()["protocol.ll_op_us"]
(0.001, 10.0)
>>> slower = DEFAULT_PARAMS.replace(**{"link.nvlink.efficiency": 0.7})
>>> slower.to_dict()["link.nvlink.efficiency"], slower == DEFAULT_PARAMS
(0.7, False)

What stays out: NCCL's own tables and formats, which the twin emulates exactly rather than fits
(``twin.nccl_model.constants``, the LL/LL128 line formats in ``twin.model.protocols``), and the
GPUs' data-sheet figures (``twin.hardware``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from numbers import Real
from typing import Any

from traces.errors import CcltwinError
from tuner.config import Proto
from twin.hardware import fabric_kind

__all__ = ["DEFAULT_PARAMS", "Attention", "Compute", "Cta", "FabricTimes", "Fabrics", "Gemm", "Interference",
           "IntraLink", "Kernels", "Links", "Network", "ParamsError", "ProtocolTimes", "Protocols", "TwinParams"]


class ParamsError(CcltwinError):
    """Parameters that are not a valid ``TwinParams``: an unknown name, a value that is not a
    finite number, or one outside the parameter's range."""


def _param(default: float, unit: str, low: float, high: float) -> Any:
    """A parameter field: its default, its unit, and the range a valid (or fitted) value lies in."""
    return field(default=default, metadata={"unit": unit, "range": (low, high)})


@dataclass(frozen=True, kw_only=True, slots=True)
class ProtocolTimes:
    """A time per protocol, µs."""

    ll: float = _param(0.0, "µs", 0.0, 100.0)
    ll128: float = _param(0.0, "µs", 0.0, 100.0)
    simple: float = _param(0.0, "µs", 0.0, 100.0)

    def of(self, proto: Proto) -> float:
        return (self.ll, self.ll128, self.simple)[proto.nccl_index]


@dataclass(frozen=True, kw_only=True, slots=True)
class IntraLink:
    """One kind of link inside a node (NVLink, PCIe, a CPU link), as the protocols see it."""

    efficiency: float = _param(1.0, "fraction", 0.05, 1.0)
    """Share of the link's one-way rate left for packets after flow control, CRC and encoding."""
    header_bytes: float = _param(0.0, "bytes", 0.0, 512.0)
    """Per-packet overhead: a store of ``s`` bytes crosses the link as a packet of ``s + header``."""
    step_us: ProtocolTimes = ProtocolTimes()
    """One step of each protocol over this link, µs (a ring's; a chain's, NVLS's, point to point's)."""
    tree_step_us: ProtocolTimes = ProtocolTimes()
    """One hop of a tree inside a node, µs: NCCL measures it apart from a ring step
    (``hwLatencies[hw][NCCL_ALGO_TREE]`` against ``[NCCL_ALGO_RING]``, ``src/graph/tuning.cc``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Links:
    """The links inside a node: what each delivers to payload and what one step over it costs."""

    nvlink: IntraLink = IntraLink(efficiency=0.84, header_bytes=16.0,
                                  step_us=ProtocolTimes(ll=0.6, ll128=1.9, simple=3.4),
                                  tree_step_us=ProtocolTimes(ll=0.6, ll128=1.25, simple=4.0))
    """NVLink: 16-byte packet headers; steps from NCCL's ``hwLatencies`` (NVLink, ring and tree
    rows, v2.29.2-1; the same in v2.28.9-1)."""
    pcie: IntraLink = IntraLink(efficiency=1.0, header_bytes=24.0,
                                step_us=ProtocolTimes(ll=1.0, ll128=2.5, simple=5.7),
                                tree_step_us=ProtocolTimes(ll=1.0, ll128=1.9, simple=4.0))
    """PCIe: a TLP costs about 24 bytes of header and framing.  Links in the topology already carry
    usable rates (NCCL's convention: 12 GB/s for Gen3 x16, 24 for Gen4), so only the header is
    charged; steps from NCCL's ``hwLatencies`` (PCI, ring and tree rows)."""
    cpu: IntraLink = IntraLink(efficiency=0.75, header_bytes=24.0,
                               step_us=ProtocolTimes(ll=1.0, ll128=2.5, simple=5.7),
                               tree_step_us=ProtocolTimes(ll=1.0, ll128=1.9, simple=4.0))
    """A CPU's links (root complex, socket interconnect): PCIe TLPs, 3/4 of the rate left for
    packets; steps from NCCL's ``hwLatencies`` (PCI, ring and tree rows)."""
    root_complex_p2p_efficiency: float = _param(0.72, "fraction", 0.05, 1.0)
    """Peer-to-peer TLPs forwarded by a CPU's root complex (GPUs with no PCIe switch between them,
    nvidia-smi's NODE/SYS) move at about this share of the link rate: the host bridge is built for
    traffic to memory, not between its ports."""
    nvls_efficiency: float = _param(0.85, "fraction", 0.05, 1.0)
    """NVSwitch multimem reductions run at this share of NVLink rate (NCCL's Hopper ``nvlsEfficiency``,
    ``src/graph/tuning.cc`` 2.28.9), on top of the ``1 + 1/ppn`` bytes each payload byte puts on a
    GPU's NVLinks (``twin.model.schedule``, NVLS)."""
    nvls_pass_us: float = _param(25.0, "µs", 0.0, 200.0)
    """One chunk's pass through an NVLS collective, up to the switch and back (across nodes the
    NVLS-Tree's tree between node heads comes between the two), of which
    the twin's two NVLink steps are a part (the rest comes on the call's launch): each rank's
    scatter fences and posts, the head polls every rank's step through
    the switch (``multimem.ld_reduce.min`` on the step counters, ``prims_simple.h``), reduces and
    broadcasts with multimem loads and stores, fences and posts again, and the gather polls before
    it copies.  NCCL's own measured latency of that pass: ``hwLatencies[NVLINK][NVLS][SIMPLE]`` =
    25 µs (``src/graph/tuning.cc``, 2.26.6 and 2.28.9; 23 µs in 2.20.5, and in 2.18.5 the same
    23 µs as the NVLS base latency), where a Ring step over NVLink is 3.4 µs; NVLSTree's intra-node
    latency is the same 25 µs (``hwLatencies[NVLINK][NVLS_TREE][SIMPLE]``).  The first chunk pays
    it; the chunks behind it follow at their transfers (as NCCL's cost model counts it once)."""

    def of(self, kind: str) -> IntraLink:
        """The link of ``kind`` (``nvlink``, ``pcie``, ``cpu``)."""
        return {"nvlink": self.nvlink, "pcie": self.pcie, "cpu": self.cpu}[kind]


@dataclass(frozen=True, kw_only=True, slots=True)
class Network:
    """A step between nodes: the NIC's share of its line rate and the proxy path's components.

    Component times come from public measurements, not from the nccl-tests files (sources in
    ``twin.model.netpath``).
    """

    efficiency: float = _param(0.92, "fraction", 0.05, 1.0)
    """Share of a NIC's line rate left for payload after the fabric's headers and flow control."""
    pcie_read_rtt_us: float = _param(1.0, "µs", 0.0, 50.0)
    """A small DMA read across PCIe and its completion back (device → host memory → device):
    0.5-1 µs on Xeon hosts (Neugebauer et al., SIGCOMM 2018)."""
    pcie_write_us: float = _param(0.5, "µs", 0.0, 50.0)
    """A posted PCIe write until the other side can see it: half a read round trip."""
    ll_host_pass_us: float = _param(1.56, "µs", 0.0, 50.0)
    """How long a CTA's pass over LL lines in pinned host memory takes, one line per thread (the
    thread spins on its line with ``ld.volatile.global.v4.u32``, then stores the line it forwards and
    its data: ``readLL``, ``LLGenericOp`` in ``src/device/prims_ll.h``), whatever the thread count.
    Measured on our H200 (PCIe Gen5 x16, one-socket Emerald Rapids KVM guest, two runs,
    ``benchmarks/gpu_ll_host.cu``, ``benchmarks/data/h200-ll-host.txt``): 1.50-1.68 µs, median 1.56,
    at 128-512 threads and 1-2 CTAs, forwarding into host memory (1.42-1.66 into device memory),
    where the same pass over lines in device memory takes 0.24-0.40: a volatile load of host
    memory takes 1.18-1.29 µs (a dependent chain), 0.15 of device memory."""
    nic_rdma_write_us: float = _param(1.1, "µs", 0.0, 50.0)
    """Small inline RDMA write NIC to NIC, no switch (perftest ``ib_write_lat`` on ConnectX-6 HDR
    back to back)."""
    proxy_pickup_us: float = _param(0.5, "µs", 0.0, 50.0)
    """Until an idle proxy progress loop comes round to a ready step: half a pass that ends in
    ``sched_yield`` (``src/proxy.cc``), a system call of about a µs."""
    gdr_read_extra_us: float = _param(0.5, "µs", 0.0, 50.0)
    """The sending NIC reads GPU memory through a PCIe switch (peer to peer) instead of host memory:
    half a PCIe round trip more, the GPU's BAR being slower to answer than the memory controller."""
    proxy_action_intel_us: float = _param(1.0, "µs", 0.0, 50.0)
    """One proxy action (post a send, reap a completion, post a flush) on Intel and other CPUs:
    NCCL's ``getNetOverhead``."""
    proxy_action_amd_us: float = _param(2.0, "µs", 0.0, 50.0)
    """One proxy action on AMD CPUs: NCCL's ``getNetOverhead``."""
    post_intel_us: float = _param(0.25, "µs", 0.0, 50.0)
    """CPU time of one request a proxy thread makes of the network (an ``isend``, ``irecv`` or
    ``iflush`` with the completion it reaps later) on Intel and other CPUs: what one thread's steps
    queue behind, where ``proxy_action_*`` is a step's latency.  An estimate: a core runs 10 M
    small RPCs a second through RDMA NIC queues, 0.1 µs for a received and a sent message with
    doorbells batched (eRPC, Kalia et al., NSDI 2019); NCCL rings a doorbell per request and reads
    words the GPU or the NIC wrote (FIFO size and tail, the receiver's slot, the completion), a
    cache miss each, so about 0.25 µs.  No public measurement of NCCL's own loop."""
    post_amd_us: float = _param(0.5, "µs", 0.0, 50.0)
    """One request on AMD CPUs: Intel's, times the 2 NCCL's ``getNetOverhead`` puts on AMD hosts."""
    message_us: float = _param(0.0, "µs", 0.0, 200.0)
    """CPU time a network message costs its proxy beyond a verbs post: none with IB verbs,
    whose NIC runs the transport; other fabric kinds set it (``fabric.<kind>.message_us``)."""
    ll_scan_intel_ns: float = _param(4.0, "ns", 0.0, 1000.0)
    """CPU time the send proxy takes to check one 64-byte cache line (4 LL lines, 32 data bytes)
    of an LL step in host memory before it posts the step (``sendProxyProgress``,
    ``src/transport/net.cc``, v2.8.4-1 and master 5067397: flag1 and flag2 of every line), on Intel
    and other CPUs.  Measured on our H200 hosts (``benchmarks/data/h200-ll-scan.txt``, made by
    ``benchmarks/gpu_ll_scan.cu``; Xeon family 6 model 207, Emerald Rapids, a KVM guest whose core
    ran 2.4-3.1 GHz): one thread checking the steps 4 or 8 CTAs stream into host memory, its
    bound, takes 3.1-6.8 ns a cache line over four runs on two machines, median 4.0 (16-20 GB/s of
    lines where the CTAs alone write 50); it is ready about one step's scan after the GPU's last
    store (64 KiB of lines: 3.4-4.2 µs after a one-line step's round trip; 6.75 on the slow run).
    A step the GPU has finished scans at 2.9-4.7 ns a line, 2.7-4.3 from L1/L2: the loop's loads
    and compares, not the misses, set the pace."""
    ll_scan_amd_ns: float = _param(8.0, "ns", 0.0, 1000.0)
    """The same on AMD CPUs: Intel's times the 2 NCCL's ``getNetOverhead`` puts on AMD hosts.  AMD
    hosts have no DDIO, so the CPU reads the GPU's lines from DRAM: on our Intel hosts a step
    flushed to DRAM first (``clflush``) scans 2.2-2.8 times slower than as the GPU left it."""

    def proxy_action_us(self, cpu_vendor: str) -> float:
        """Latency one proxy action adds to a step on this vendor's CPUs (others take Intel's, as
        NCCL does)."""
        return (self.proxy_action_amd_us if cpu_vendor == "amd" else self.proxy_action_intel_us) + self.message_us

    def post_us(self, cpu_vendor: str) -> float:
        """CPU time one network request takes its proxy thread on this vendor's CPUs."""
        return (self.post_amd_us if cpu_vendor == "amd" else self.post_intel_us) + self.message_us

    def ll_scan_ns(self, cpu_vendor: str) -> float:
        """CPU time the send proxy checks one 64-byte cache line of an LL step on this vendor's CPUs."""
        return self.ll_scan_amd_ns if cpu_vendor == "amd" else self.ll_scan_intel_ns


@dataclass(frozen=True, kw_only=True, slots=True)
class FabricTimes:
    """What a fabric kind changes in a network step against InfiniBand verbs (``net``): the NIC to
    NIC latency, the software cost of each message on each side, and the share of line rate."""

    wire_us: float = _param(1.1, "µs", 0.0, 200.0)
    """A small message NIC to NIC, no switch, including the transport stack that runs it."""
    message_us: float = _param(0.0, "µs", 0.0, 200.0)
    """CPU time each network message costs its proxy beyond a verbs post (``net.post_*_us``) and
    NCCL's own ``getNetOverhead``: the plugin's or the kernel's work per send and per receive."""
    efficiency: float = _param(0.92, "fraction", 0.05, 1.0)
    """Share of the NIC's line rate left for payload."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Fabrics:
    """The fabric kinds other than InfiniBand, whose figures are ``net``'s (``twin.hardware``
    lists the kinds; ``TwinParams.on_fabric`` puts a kind's figures in ``net``'s place).

    Sources: vendor and plugin documents and published microbenchmarks, named per kind; where
    only a range is published the figure is its middle, and says so.
    """

    roce: FabricTimes = FabricTimes(wire_us=1.6, message_us=0.0, efficiency=0.91)
    """RoCE v2 on ConnectX-6 Dx/7: perftest ``ib_write_lat`` about 1.5-1.7 µs back to back against
    1.1 µs on IB (the Ethernet MAC, PHY and FEC); the same verbs, so no extra message cost;
    per 4 KiB packet RoCE carries 82 bytes of preamble, gap, Ethernet, IP, UDP, BTH and ICRC where
    IB carries 26 (IBTA RoCEv2 annex), 0.987 of IB's payload share: 0.92 × 0.987."""
    tcp: FabricTimes = FabricTimes(wire_us=10.0, message_us=4.0, efficiency=0.75)
    """Kernel TCP sockets (NCCL's Socket transport): about 20 µs ``netperf TCP_RR`` round trip on
    100 GbE Linux hosts, so 10 µs one way; each message is a ``send``/``recv`` system call on a
    helper thread woken by the proxy (``net_socket.cc``), a few µs; the kernel's copies hold a
    stream to about 3/4 of 100 Gb/s with NCCL's default 1-2 helper threads per NIC."""
    gpudirect_tcpx: FabricTimes = FabricTimes(wire_us=10.0, message_us=4.0, efficiency=0.75)
    """GPUDirect-TCPX: the host kernel still runs TCP, only the payload skips host memory (dma-buf
    zero copy out of GPU memory, header split into it), so wire and per-message system calls are
    the socket's (``tcp``), the plugin polling its TX completions in 1 µs sleeps
    (``NCCL_GPUDIRECTTCPX_TX_COMPLETION_NANOSLEEP=1000`` in Google's profile); Google quotes
    800 Gb/s over 4 × 200 Gb/s NICs on a3-high, about 3/4 of it reached by NCCL all-reduce."""
    gpudirect_tcpxo: FabricTimes = FabricTimes(wire_us=6.0, message_us=3.0, efficiency=0.88)
    """GPUDirect-TCPXO: TCP offloaded to the NIC (Google's 'FasTrak' plugin, the RxDM receive
    daemon gone), estimated 6 µs one way, still several times RDMA's; per message the plugin's
    flow bookkeeping (``NCCL_FASTRAK_NUM_FLOWS=2``), estimated 3 µs; 8 × 200 Gb/s on a3-mega, where
    Google's health checks expect about 90 % of line rate (``BANDWIDTH_THRESHOLD=90``)."""
    efa: FabricTimes = FabricTimes(wire_us=12.0, message_us=1.25, efficiency=0.85)
    """AWS EFA (SRD, libfabric ``efa`` provider, aws-ofi-nccl): published small-message latencies of
    about 10-15 µs (AWS HPC blog 'Second generation EFA', 2022; Shalev et al., 'A cloud-optimized
    transport protocol for elastic and scalable HPC', IEEE Micro 2020), 12 µs; per message, one
    libfabric endpoint streams 64 B-4 KiB messages at 1.50-1.78 µs each (``fi_rdm_tagged_bw`` on
    c5n, Intel hosts, ofiwg/libfabric#5694), 1.5 µs of which the verbs post (``net.post_intel_us``)
    is 0.25: 1.25 µs beyond it; SRD sprays packets over many paths, and NCCL all-reduce on p5
    reaches about 85 % of 3,200 Gb/s."""
    slingshot: FabricTimes = FabricTimes(wire_us=2.0, message_us=1.0, efficiency=0.90)
    """HPE Slingshot-11 (Cassini NIC, Rosetta switch, libfabric ``cxi``): about 2 µs MPI
    ``osu_latency`` between nodes (Perlmutter and Frontier reports); aws-ofi-nccl over ``cxi``,
    about 1 µs per message; ``osu_bw`` about 23 of 25 GB/s (200 Gb/s), 0.9."""

    def of(self, kind: str) -> FabricTimes:
        """The figures of fabric kind ``kind`` (a ``twin.hardware`` name, e.g. ``gpudirect-tcpxo``;
        a kind that shares another's figures, ``FabricKind.times``, gets that one's)."""
        return getattr(self, (fabric_kind(kind).times or kind).replace("-", "_"))


@dataclass(frozen=True, kw_only=True, slots=True)
class Protocols:
    """What LL, LL128 and Simple cost beyond their links: launch, line passes, slice hand-overs."""

    launch_us: ProtocolTimes = ProtocolTimes(ll=6.6, ll128=14.0, simple=7.5)
    """A call's fixed cost on the GPU: kernel start, argument setup and the first flag round trip,
    once its kernels are launched (the host's part is ``host_launch_us``).  LL and LL128 are
    NCCL's own measured base latencies (ring ``baseLat`` in ``src/graph/tuning.cc``, 2.28.9:
    6.6 and 14.0 µs); our 2×H200 CUDA-graph sweep agrees (``benchmarks/data/h200x2-allreduce.json``:
    Ring LL 8.9-11.5 µs and Ring LL128 14.8-20.9 µs from 8 B to 512 KiB, where 2 steps add
    1.2 and 3.8).  Simple 7.5 µs (NCCL: 8.4), its steps also paying ``simple_slice_sync_us``."""
    host_launch_us: float = _param(3.8, "µs", 0.1, 100.0)
    """Host CPU time to launch one GPU's share of a collective: NCCL's enqueue and plan,
    ``cudaSetDevice`` and ``cuLaunchKernelEx`` (``doLaunches``, ``src/group.cc``).  One thread
    driving N GPUs (nccl-tests ``-g N``) pays it N times per call, one GPU after another
    (``twin.model.host``).  Measured where that thread is the bottleneck: Azure ND A100 v4, one
    process driving 8 GPUs, takes 30.5-32.1 µs per AllReduce from 8 B to 32 KiB, flat, while its
    GPUs need about 15 µs (one process per GPU on DGX A100/H100: 8.5-10 µs), so 31 / 8 launches
    = 3.9 µs each, less the GPUs' share of the first call (``tests/data/nccl-tests``)."""
    stream_query_us: float = _param(0.5, "µs", 0.0, 10.0)
    """One ``cudaStreamQuery`` when nccl-tests polls its streams at the end of a timed loop
    (``testStreamSynchronize``, ``src/common.cu``): a driver call that reads the stream's
    completion counter without a system call.  An estimate (no measurement in the repo); it
    enters per call as ``gpus × 0.5 µs / iters``, at most 0.2 µs for 8 GPUs and 20 calls."""
    ll_op_us: float = _param(0.19, "µs", 0.001, 10.0)
    """An LL thread handles one 16-byte line (8 data bytes) at a time: it polls the line until its
    flag is valid, then loads, reduces and stores what the primitive needs, and only then takes its
    next line.  So a channel moves ``nthreads × 8`` bytes per pass, and a pass lasts this long per
    memory operation of the primitive (rate linear in threads, no saturation).  Measured on H200
    (NCCL 2.28.9, 512 threads, ``benchmarks/nccl_channels.py``): a 2-rank ring sends 5.3 GB/s per
    channel for AllReduce (4 operations per byte), 4.1-4.3 for AllGather and ReduceScatter (5)."""
    ll_multinode_intra_factor: float = _param(1.8, "ratio", 0.1, 10.0)
    """Inside a node of a communicator that spans nodes, an LL step costs this many times its
    single-node latency: NVIDIA's measurement, carried in NCCL 2.8.4's ``src/graph/tuning.cc``
    (``if (nNodes > 1 && p == NCCL_PROTO_LL) intraLat *= 1.8``); its cause is not modelled."""
    ll128_copy_factor: float = _param(0.75, "ratio", 0.05, 1.0)
    """A channel's payload rate with LL128 as a share of Simple's: 120 data bytes per 128-byte line,
    each warp synchronised on its flag thread.  Measured on H200 (NCCL 2.28.9, 2-rank ring, 1-16
    channels, ``benchmarks/nccl_channels.py``): 0.74-0.83 of Simple for AllReduce, AllGather and
    ReduceScatter."""
    simple_slice_sync_us: float = _param(3.0, "µs", 0.0, 50.0)
    """What handing over one Simple slice costs a Ring or Tree CTA, with nothing moving meanwhile:
    its threads meet at a barrier, fence the slice's stores, post the step counter to the peer, and
    the next primitive polls for its own (``prims_simple.h``).  The same threads wait, copy and
    post, so nothing hides it; NVLS and point-to-point kernels give those roles to separate warps.
    Measured, not taken from NCCL's tables (whose Simple NVLink step latency is 3.4 µs): the best
    fit to our 2×H200 AllReduce sweep between 2 and 32 MiB, where a step carries less than a chunk
    (``benchmarks/accuracy.py``: Ring Simple 12% → 6% error, Tree Simple 16% → 11%, and Azure A100
    2-, 16- and 64-GPU files closer; vTrain's A100 LUT 5% → 8%)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Cta:
    """How fast one channel's CTA moves bytes: a share of its GPU's memory bandwidth, reached as
    its threads put enough loads in flight."""

    hbm_share: float = _param(0.0215, "fraction", 1e-4, 1.0)
    """Bytes one CTA loads plus stores per second with unlimited threads, as a share of its GPU's
    memory bandwidth.  Two measurements agree on it: 24 A100 channels of a ring AllReduce sustain
    about 595 GB/s of loads plus stores whether the ring has 2, 4 or 8 ranks (vTrain and Azure
    ND A100 v4 nccl-tests: busbw × operations per byte = 206×3, 222×2.67, 231×2.57; 0.0209 of
    1,555 GB/s at unlimited threads), and one channel of a 2-rank ring on H200 (NCCL 2.28.9,
    ``benchmarks/nccl_channels.py``) sends 20.9 GB/s at 4 operations per byte (0.0225 of 4,800)."""
    threads_at_half_rate: float = _param(160.0, "threads", 1.0, 4096.0)
    """Threads at which a CTA reaches half its peak rate (memory parallelism saturates)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Gemm:
    """A matrix product timed from its shape (``twin.compute.shapes``): tiles of the GPU's
    architecture spread in waves over its SMs, each at a share of the tensor cores' peak.
    Fitted to 584 bf16 products of real transformer layers on an H200
    (``benchmarks/compute_fit.py`` on ``benchmarks/data/h200-compute.json``)."""

    efficiency: float = _param(0.81, "fraction", 0.05, 1.0)
    """Share of an SM's dense tensor peak that one output tile's main loop reaches (bf16, fp16):
    the best measured products reach 812 of 989 TFLOP/s including their tails."""
    tf32_efficiency: float = _param(0.71, "fraction", 0.05, 1.0)
    """The same for fp32 products on tensor cores (TF32: at most 410 of 495 TFLOP/s, more of the
    time in the operands' 4-byte loads)."""
    fp8_efficiency: float = _param(0.69, "fraction", 0.05, 1.0)
    """The same for fp8 (e4m3 through ``torch._scaled_mm``: at most 1,452 of 1,979 TFLOP/s)."""
    k_overhead: float = _param(140.0, "elements", 0.0, 8192.0)
    """A tile's pipeline fill, drain and epilogue, as this many more elements of k: why products
    with a small inner dimension fall far below peak."""
    fixed_us: float = _param(1.8, "µs", 0.0, 100.0)
    """Launch-to-first-tile and the last tile's write-back of one product, beyond its waves."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Attention:
    """Attention kernels timed from ``(batch, heads, seq_q, seq_kv, head_dim)``; fitted to
    torch's ``scaled_dot_product_attention`` (flash), an unfused baddbmm/softmax/bmm and
    Megatron's baddbmm/fused causal softmax/dropout/bmm on H200."""

    flash_efficiency: float = _param(0.66, "fraction", 0.05, 1.0)
    """Share of dense bf16 peak a flash forward's inner loop reaches at head dim 128 (measured
    560-635 TFLOP/s at long sequences)."""
    small_head_penalty: float = _param(0.79, "ratio", 0.1, 1.0)
    """Head dim 64 runs at this share of head dim 128's rate (half the MMA work per softmax)."""
    tile_overhead_us: float = _param(2.0, "µs", 0.0, 100.0)
    """Softmax rescaling, the load of Q and the write of O, per 128-row query tile."""
    backward_factor: float = _param(2.85, "ratio", 1.0, 10.0)
    """A flash backward takes this many times its forward (2.5× the FLOPs, recomputing the
    scores; measured 2.9-3.1× at long sequences)."""
    unfused_score_passes: float = _param(15.0, "passes", 1.0, 64.0)
    """Passes an unfused attention makes over the bf16 score matrix: the first product's write,
    the mask (its own full-size boolean), the masked copy, softmax's read and write, the second
    product's read, each at streaming bandwidth or worse (fitted: 15)."""
    unfused_backward_factor: float = _param(1.0, "ratio", 0.1, 10.0)
    """An unfused backward takes this many times its forward (measured 0.8-1.2×)."""
    score_hbm_fraction: float = _param(0.61, "fraction", 0.05, 1.0)
    """Share of the data-sheet memory bandwidth the row-wise passes of a fused-softmax attention
    (Megatron's causal scale-mask-softmax, attention dropout, their backwards) reach over the score
    matrix (H200, ``h200-attention.json``: softmax and dropout 0.59-0.64, softmax backward 0.70-0.76;
    fitted over the forward and backward totals by ``benchmarks/compute_fit.py --fit fused-softmax``: 0.61)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Kernels:
    """What every kernel and every framework call costs whatever its work: measured on H200 with
    torch 2.11 (``benchmarks/gpu_compute_sweep.py``, ``floor`` and ``optimizer`` rows)."""

    floor_us: float = _param(1.8, "µs", 0.0, 100.0)
    """A kernel's least time on the GPU, launched back to back: a one-element copy or add takes
    1.8-1.9 µs (1.3 µs for a graph's empty-ish add)."""
    host_us_per_kernel: float = _param(32.0, "µs", 0.0, 10_000.0)
    """Host-side framework time per kernel when a phase does not say (``host_us``), on the
    reference host (``twin.host_cpu``; a cluster's host CPU divides it by its single-thread
    speed): an eager pre-norm transformer layer's forward and backward at hidden 64 take 1,795 µs
    of host time for 55 kernels (plain ops alone cost 7-14 µs each, autograd's backward call
    ~400 µs)."""
    megatron_host_us_per_kernel: float = _param(40.2, "µs", 0.0, 10_000.0)
    """The same for a trace that says it runs Megatron-LM's layers (metadata ``framework``
    ``megatron-lm``, as ``traces.generate`` writes): its layer (TP-region autograd Functions, the
    CUDA RNG tracker's fork around each dropout, TorchScript bias-GeLU and bias-dropout-add, the
    ``[s, b, h]`` views, transposes and copies) costs more host time per kernel than the plain
    layer above.  ``benchmarks/gpu_megatron_layer.py`` on the H200 machine (torch 2.11,
    ``benchmarks/data/h200-megatron-layer.json``): 63 kernels per layer forward and backward at
    a median 38.8 µs each, where the plain layer took 30.8 µs per kernel in the same rounds;
    scaled to the reference host by the plain layer's 32 µs: 40.2 (``python -m
    benchmarks.megatron_host_profile`` derives this and the two below)."""
    megatron_step_host_us: float = _param(520.0, "µs", 0.0, 100_000.0)
    """Megatron-LM's host time per schedule step outside its kernels (a micro-batch's forward
    step and its backward step each: receive-buffer allocation, the ``torch.autograd.backward``
    call), on the reference host: a ``host`` phase of a Megatron trace that says no ``host_us``.
    The same benchmark's middle-stage intercept over 1-8 layers, forward plus backward: 843-1,180
    µs, median 998, halved and scaled like ``megatron_host_us_per_kernel``: 520."""
    megatron_checkpoint_host_us: float = _param(986.0, "µs", 0.0, 100_000.0)
    """Megatron-LM's full recompute per layer beyond the recomputed forward's kernels, on the
    reference host: ``mpu.checkpoint``'s backward swapping the CPU, CUDA and tracker RNG states
    in and out and calling ``torch.autograd.backward`` on the layer (the same benchmark, with
    against without ``--recompute full``, same round: 881 and 1,017 µs per layer beyond 18
    kernels at the round's host time per kernel; scaled like ``megatron_host_us_per_kernel``)."""
    megatron_collective_host_us: float = _param(17.3, "µs", 0.0, 10_000.0)
    """Host time of one ``torch.distributed`` collective call a Megatron trace issues (c10d's
    ``ProcessGroupNCCL``: the work object, stream events and waits, ``recordStream``, NCCL's
    enqueue), on the reference host; the layer profile above calls the TP regions with a world of
    one, which skips the call.  ``benchmarks/gpu_c10d_host.py`` on the H200 machine
    (``benchmarks/data/h200-c10d-host.json``): ``dist.all_reduce`` 15.1 µs per call at 2 MiB and
    18.3 µs at 16 MiB, where an in-place multiply takes 7.2-7.7 µs; the median scaled like
    ``megatron_host_us_per_kernel``: 17.3."""
    optimizer_launch_us: float = _param(200.0, "µs", 0.0, 100_000.0)
    """A fused optimizer step's fixed cost (16 tensors, AdamW ``fused=True``: 216 µs at 1M
    parameters)."""
    optimizer_hbm_fraction: float = _param(0.74, "fraction", 0.01, 1.0)
    """Share of memory bandwidth a fused optimizer step reaches over its bytes (3.2 TB/s at 256M
    parameters, 28 bytes each)."""
    grad_clip_us: float = _param(430.0, "µs", 0.0, 100_000.0)
    """Gradient-norm clipping's fixed cost (``clip_grad_norm_``, foreach, 16 tensors: 457-490 µs at
    1M-16M parameters; its bytes then stream at ``hbm_fraction``; fitted over 1M-256M: 430)."""
    loss_scale_us: float = _param(34.0, "µs", 0.0, 100_000.0)
    """AMP's unscale and inf check's fixed cost (``_amp_foreach_non_finite_check_and_unscale_``:
    36 µs at 1M parameters; fitted over 1M-256M: 34)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Interference:
    """How a compute phase and an NCCL channel's copy on the same GPU slow each other, measured on
    H200 (``benchmarks/interference.py``, ``benchmarks/gpu_interference_sweep.py``)."""

    gemm_beside_copy: float = _param(0.8, "fraction", 0.05, 1.0)
    """A matrix product's speed while a channel copies beside it, beyond the SMs the channel holds:
    a copy on 1 CTA slows a 16384×4096×14336 product to 0.74-0.81, a spinning CTA (same SM, no
    memory traffic) only to 0.99; at 2-64 CTAs copy/spin stays 0.76-0.83 (L2 and DRAM contention)."""
    copy_floor: float = _param(0.14, "fraction", 0.01, 1.0)
    """A channel's copy rate beside a kernel that saturates memory bandwidth, relative to alone:
    0.13-0.18 beside a 1 GiB elementwise add at any CTA count (its requests queue behind the
    other kernel's; its rate is latency-bound)."""
    gemm_dram_traffic: float = _param(3.0, "ratio", 1.0, 100.0)
    """A product's DRAM traffic as a multiple of its operands' and result's bytes (panels re-read
    when they miss L2): with it, the copy beside the measured products keeps 0.79-0.86 of its rate."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Compute:
    """How long compute phases take, and how they and communication kernels slow each other."""

    flops_fraction: float = _param(0.7, "fraction", 0.01, 1.0)
    """Share of dense peak FLOP/s that large training kernels reach, for phases known only by
    FLOPs (bf16 products of real layers on H200: median 0.72 of peak, ``h200-compute.json``)."""
    hbm_fraction: float = _param(0.85, "fraction", 0.01, 1.0)
    """Share of the data-sheet memory bandwidth that streaming kernels reach (H200: adds and copies
    of 16 MB to 1 GiB move 3.7-4.3 of 4.8 TB/s; the fit over them, with the kernel floor, 0.85)."""
    copy_rate_under_compute: float = _param(0.8, "fraction", 0.01, 1.0)
    """A channel's copy rate beside a compute phase whose memory traffic is unknown (one known only
    by a measured duration or FLOPs), relative to alone: 0.79-0.93 beside H200 matrix products."""
    min_speed: float = _param(0.05, "fraction", 0.0, 1.0)
    """Floor of a phase's speed however many SMs communication holds (the scheduler still
    interleaves its blocks)."""
    gemm: Gemm = Gemm()
    attention: Attention = Attention()
    kernels: Kernels = Kernels()
    interference: Interference = Interference()


@dataclass(frozen=True, kw_only=True, slots=True)
class TwinParams:
    """Every fittable physical constant of the twin, grouped by what it describes.

    Built from defaults, ``from_dict`` (dotted names), ``replace`` or ``dataclasses.replace``;
    construction checks every value against its range.  Equal objects predict the same, so
    caches may key on them.
    """

    link: Links = Links()
    net: Network = Network()
    fabric: Fabrics = Fabrics()
    protocol: Protocols = Protocols()
    cta: Cta = Cta()
    compute: Compute = Compute()

    def __post_init__(self) -> None:
        for name, value in _leaves(self):
            _check_value(name, value)

    def on_fabric(self, kind: str) -> TwinParams:
        """These parameters as a cluster of fabric ``kind`` sees them: ``net`` (InfiniBand's) takes
        the kind's wire latency, share of line rate and per-message proxy cost.

        >>> p = DEFAULT_PARAMS.on_fabric("roce")
        >>> p.net.nic_rdma_write_us, p.net.efficiency, DEFAULT_PARAMS.on_fabric("infiniband") is DEFAULT_PARAMS
        (1.6, 0.91, True)
        """
        if kind == "infiniband":
            return self
        times = self.fabric.of(kind)
        net = dataclasses.replace(self.net, nic_rdma_write_us=times.wire_us, efficiency=times.efficiency,
                                  message_us=times.message_us)
        return dataclasses.replace(self, net=net)

    def to_dict(self) -> dict[str, float]:
        """Every parameter by dotted name, in declaration order."""
        return dict(_leaves(self))

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], *, where: str = "params") -> TwinParams:
        """Parameters by dotted name; the ones not given keep their defaults.

        Raises ``ParamsError`` starting with ``where`` (a file name) for an unknown name or a
        value that is not a finite number in the parameter's range.

        >>> TwinParams.from_dict({"cta.hbm_share": 0.02}).cta.hbm_share
        0.02
        >>> TwinParams.from_dict({"link.nvlink.speed": 1.0}, where="h200.json")
        Traceback (most recent call last):
        ...
        twin.params.ParamsError: h200.json: unknown parameter 'link.nvlink.speed'
        """
        return DEFAULT_PARAMS._with(values, where)

    def replace(self, **changes: float) -> TwinParams:
        """A copy with the parameters named (dotted) in ``changes`` set."""
        return self._with(changes, "params")

    def _with(self, values: Mapping[str, Any], where: str) -> TwinParams:
        for name, value in values.items():
            if name not in _SPECS:
                raise ParamsError(f"{where}: unknown parameter {name!r}")
            _check_value(name, value, where)
        return _rebuilt(self, "", {k: float(v) for k, v in values.items()})

    @staticmethod
    def bounds() -> dict[str, tuple[float, float]]:
        """The valid range of every parameter, by dotted name (what a bounded fit may explore)."""
        return {name: spec["range"] for name, spec in _SPECS.items()}

    @staticmethod
    def units() -> dict[str, str]:
        """The unit of every parameter, by dotted name."""
        return {name: spec["unit"] for name, spec in _SPECS.items()}


def _check_value(name: str, value: Any, where: str = "params") -> None:
    """Raise ``ParamsError`` unless ``value`` is a finite number within parameter ``name``'s range."""
    spec = _SPECS[name]
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ParamsError(f"{where}: {name} must be a number ({spec['unit']}), got {value!r:.40}")
    low, high = spec["range"]
    if not math.isfinite(value) or not low <= value <= high:
        raise ParamsError(f"{where}: {name} = {value!r} is outside its range [{low:g}, {high:g}] ({spec['unit']})")


def _leaves(obj: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    """Every parameter of ``obj`` (a group of parameters) by dotted name, with its value."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        if is_dataclass(value):
            yield from _leaves(value, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", value


def _specs(cls: type, prefix: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every parameter field of ``cls`` by dotted name, with its unit and range."""
    for f in fields(cls):
        if "unit" in f.metadata:
            yield f"{prefix}{f.name}", f.metadata
        else:
            yield from _specs(type(f.default), f"{prefix}{f.name}.")


def _rebuilt(obj: Any, prefix: str, values: dict[str, float]) -> Any:
    """``obj`` with the parameters named in ``values`` replaced."""
    kwargs = {}
    for f in fields(obj):
        name, value = f"{prefix}{f.name}", getattr(obj, f.name)
        kwargs[f.name] = _rebuilt(value, f"{name}.", values) if is_dataclass(value) else values.get(name, value)
    return type(obj)(**kwargs)


_SPECS: dict[str, Mapping[str, Any]] = dict(_specs(TwinParams))
"""Unit and range of every parameter, by dotted name."""

DEFAULT_PARAMS = TwinParams()
"""The twin's parameters as the sources above give them."""
