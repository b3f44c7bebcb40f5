"""What one step over the network costs: the proxy path from one GPU's buffer to another's.

Picture one LL step from GPU A on node 1 to GPU B on node 2.  A's kernel stores the step's
lines into a buffer in host memory; A's proxy thread, polling that buffer, sees the flags
complete and posts an RDMA write; the NIC reads the data over PCIe and sends it; B's NIC
writes it into B's receive buffer; B's kernel, polling that buffer, sees the flags and goes
on.  Nothing of this happens on NVLink, which is why a network hop costs several µs where an
NVLink hop costs well under one.

Where the buffers live, and who must act per step, come from NCCL's ``src/transport/net.cc``
(2.28): the LL send buffer is always in host memory; every other buffer (LL receive, LL128,
Simple) is in GPU memory when GPUDirect RDMA is on, in host memory otherwise.  NCCL's IB
transport posts the data as a plain ``RDMA_WRITE_WITH_IMM`` from that buffer (``net_ib.cc``:
no inline data), so the NIC must read the payload across PCIe before sending.  The sender's
proxy posts one
network send per step; for Simple the receiver's proxy must also see the completion and flush
the GPU-bound data (an RDMA read when GPUDirect is on) before it tells the GPU through its
tail counter, so a Simple step takes three proxy actions where LL and LL128 take one (the
receiving kernel polls their in-line flags itself).  NCCL's own model charges exactly that:
``netOverhead`` per step, tripled for Simple (``src/graph/tuning.cc``).

GPUDirect RDMA is on, as in NCCL's ``ncclTopoCheckGdr`` with the default
``NCCL_NET_GDR_LEVEL=PXB``, when the GPU reaches its NIC through PCIe switches only; through a
CPU's root complex the data is staged in host memory.

Component times come from public measurements, not from the nccl-tests files:

* PCIe read round trip, device to host memory and back: about 1 µs (Neugebauer et al.,
  "Understanding PCIe performance for end host networking", SIGCOMM 2018: 0.5-1 µs for small
  DMA reads on Xeon hosts); a posted write is visible after about half of that.
* NIC to NIC, small RDMA write: about 1.1 µs (``ib_write_lat`` of perftest on ConnectX-6 HDR
  back to back, which sends small messages inline, so without the payload read NCCL needs);
  switches and cables come on top, from the fabric description.
* Proxy per-step latency: NCCL's ``getNetOverhead`` (1 µs on Intel, 2 µs on AMD x86), plus
  the wait until the progress loop comes round: an idle loop yields the CPU (``sched_yield``,
  ``src/proxy.cc``) once per pass, a system call of about a µs, so half a pass on average.

Those times are parameters (``TwinParams.net``); the proxy's actions per step are NCCL's.
``getNetOverhead`` is a step's latency in NCCL's cost model ("inter-node rings still have to
launch nsteps * net overhead", one per step whatever the channels), not the CPU time of a post.
A GPU's proxy thread makes the requests of all its channels one after another (``progressOps``,
``src/proxy.cc``), each at a post's CPU time (``net.post_*_us``, about a quarter of a µs with IB
verbs): where several channels leave through one GPU, the last one's step waits for the others'
posts (``CommGeometry.share``), and a full pipeline's steps follow each other no faster than
the thread's work per step: an ``isend`` per step it sends, an ``irecv`` per step it receives,
and a flush per received Simple step where ``needs_flush`` (``proxy_posts_per_recv``), while
each step's latency keeps the receiver's completion and flush (``PROXY_ACTIONS``).  Before it
posts an LL step the thread also checks the flags of every line the kernel stored into host
memory (``ll_scan_us``): work per byte on that same thread, and a wait after the step's last line.

Other fabric kinds than InfiniBand (``twin.hardware.FABRIC_KINDS``: RoCE, TCP sockets, Google's
GPUDirect-TCPX/TCPXO, AWS EFA, HPE Slingshot) change three things, and this module costs them
all through the same path: the NIC-to-NIC time (``nic_rdma_write_us``: 1.6 µs for RoCE, 6-12 µs
for TCP offload, EFA's SRD and kernel TCP), the share of line rate (``efficiency``), and the CPU
time of each network message beyond a verbs post (``message_us``, added to every proxy action
and post: a socket's system calls, libfabric's completion queues).  ``TwinParams.on_fabric`` puts a
kind's figures (``TwinParams.fabric``, sourced there) in ``net``'s place for every communicator of
a cluster of that kind.  A kind without GPUDirect (TCP) routes its bytes through host memory
(``Cluster.route``), so ``gdr_send``/``gdr_recv`` are false below and the flow crosses both CPUs.
"""

from __future__ import annotations

from tuner.config import Proto
from twin.model.protocols import LL_LINE_DATA_BYTES
from twin.params import DEFAULT_PARAMS, TwinParams

PROXY_ACTIONS = {Proto.LL: 1, Proto.LL128: 1, Proto.SIMPLE: 3}
"""Proxy actions on the critical path of one step: the send post; Simple adds the receiver's
completion and flush (NCCL triples ``netOverhead`` for Simple).  Kept on sm_90 too, where no flush
is posted (``needs_flush``): NCCL's cost model triples it there as well, and no measurement in
the repository separates the two."""


def needs_flush(sm_version: int, cpu_vendor: str) -> bool:
    """Whether a receiving proxy flushes every Simple step it receives with GPUDirect RDMA.

    NCCL's ``ncclTopoNeedFlush`` (``src/graph/paths.cc``, master 5067397): "Flush is required on
    Ampere and earlier"; from sm_90 none, unless the GPU reaches its CPU over NVLink-C2C (Grace:
    GH200, GB200), whose data path is PCIe while the control path is C2C.

    >>> needs_flush(80, "amd"), needs_flush(90, "intel"), needs_flush(100, "arm")
    (True, False, True)
    """
    return sm_version < 90 or cpu_vendor == "arm"


def proxy_posts_per_recv(proto: Proto, flush: bool) -> int:
    """Network requests a proxy thread makes for each step it receives, as one for each it sends.

    ``recvProxyProgress`` (``src/transport/net.cc``) posts one ``irecv`` per step and channel, up
    to ``NCCL_STEPS`` ahead of the data: with IB verbs the receive work request and the RDMA write
    of its FIFO slot that tells the sender where to write (``ncclIbIrecv``, ``ncclIbPostFifo``,
    ``src/transport/net_ib/p2p.cc``), a doorbell like a send's.  It groups the ``irecv`` of
    sub-operations that share one network connection (``maxRecvs``), which only point-to-point
    traffic through another GPU's NIC does (``NCCL_NET_SHARED_COMMS``, per channel): a collective's
    channels each have their own.  A Simple step received with a flush costs one more request,
    the flush's RDMA read (``ncclIbIflush``).  The receiver's wait for the completion and the
    flush is latency on the step's path (``PROXY_ACTIONS``), not work: the thread serves its
    other connections meanwhile.

    >>> proxy_posts_per_recv(Proto.SIMPLE, True), proxy_posts_per_recv(Proto.SIMPLE, False)
    (2, 1)
    """
    return 1 + int(flush and proto is Proto.SIMPLE)


def proxy_action_us(cpu_vendor: str, params: TwinParams = DEFAULT_PARAMS) -> float:
    """Latency one proxy action adds to a step on this vendor's CPUs."""
    return params.net.proxy_action_us(cpu_vendor)


def proxy_post_us(cpu_vendor: str, params: TwinParams = DEFAULT_PARAMS) -> float:
    """CPU time one network request (``isend``, ``irecv``, ``iflush``) takes its proxy thread."""
    return params.net.post_us(cpu_vendor)


LL_DATA_BYTES_PER_CACHE_LINE = 64 // 16 * LL_LINE_DATA_BYTES
"""LL data bytes per 64-byte cache line of the send buffer: four 16-byte lines of 8 data bytes."""


def ll_scan_us(proto: Proto, step_bytes, cpu_vendor: str, params: TwinParams = DEFAULT_PARAMS):
    """CPU time the send proxy spends checking an LL step of ``step_bytes`` data bytes before it
    posts it; 0 for LL128 and Simple.

    The LL send buffer is always in host memory (``NCCL_NET_MAP_ADD_POINTER(map, 0, p !=
    NCCL_PROTO_LL && useGdr ...)``), and NCCL's kernel writes a step's size into the FIFO before
    its lines.  ``sendProxyProgress`` (``src/transport/net.cc``, v2.8.4-1 and master 5067397) then
    reads flag1 and flag2 of every 16-byte line of the step (``DIVUP(size, sizeof(union
    ncclLLFifoLine))``) from line 0, breaks at the first stale one and starts again on its next
    pass; only a whole step is posted.  The lines came across PCIe from the GPU, so the thread
    reads each cache line fresh (``net.ll_scan_*_ns``, measured on our H200 host).  One proxy thread
    serves every channel of its GPU (``progressOps``, ``src/proxy.cc``): this is work on the thread
    that also posts every other step, and it comes after the step's last line lands.

    >>> round(float(ll_scan_us(Proto.LL, 32 << 10, "intel")), 2), ll_scan_us(Proto.SIMPLE, 32 << 10, "intel")
    (4.1, 0.0)
    """
    if proto is not Proto.LL:
        return 0.0
    return step_bytes / LL_DATA_BYTES_PER_CACHE_LINE * params.net.ll_scan_ns(cpu_vendor) * 1e-3


def ll_host_recv_gbps(recv_threads, params: TwinParams = DEFAULT_PARAMS):
    """What a channel's ``recv_threads`` receiving threads (scalar or numpy array) move at most, in
    GB/s of LL data, where they poll their lines in host memory: without GPUDirect RDMA the net
    transport's LL receive buffer is there (``NCCL_NET_MAP_ADD_POINTER(map, 0, resources->useGdr,
    ...)`` on the receive side, ``src/transport/net.cc``).  A thread takes one line at a time and
    spins on it (``readLL``, ``LLGenericOp`` in ``src/device/prims_ll.h``), so a pass of
    ``recv_threads`` lines lasts at least a host-memory pass (``net.ll_host_pass_us``).

    >>> round(float(ll_host_recv_gbps(512)), 2)  # measured: 2.40-2.70 GB/s a CTA of 512 threads
    2.63
    """
    return recv_threads * LL_LINE_DATA_BYTES / (params.net.ll_host_pass_us * 1e3)


def proxy_overhead_us(proto: Proto, cpu_vendor: str, params: TwinParams = DEFAULT_PARAMS) -> float:
    """CPU time the proxy threads spend on one step of one network connection."""
    return PROXY_ACTIONS[proto] * proxy_action_us(cpu_vendor, params)


def net_step_latency_us(proto: Proto, *, fabric_us: float, cpu_vendor: str, gdr_send: bool = True,
                        gdr_recv: bool = True, params: TwinParams = DEFAULT_PARAMS) -> float:
    """Latency of one network step from the sending kernel's store to the receiving kernel's go.

    ``fabric_us``: the switches and cables between the two NICs; ``gdr_send``/``gdr_recv``:
    whether each NIC reads/writes its GPU's memory directly (GPUDirect RDMA).
    """
    net = params.net
    send_in_gpu = gdr_send and proto is not Proto.LL
    # The kernel's data (LL) or its fence and tail counter (LL128, Simple) reach the proxy.
    signal = net.pcie_write_us + (0.0 if proto is Proto.LL else net.pcie_write_us)
    proxy = net.proxy_pickup_us + proxy_overhead_us(proto, cpu_vendor, params)
    # The NIC reads the payload (from the GPU through the switch with GPUDirect), then sends.
    nic = net.pcie_read_rtt_us + (net.gdr_read_extra_us if send_in_gpu else 0.0) + net.nic_rdma_write_us + fabric_us
    if proto is Proto.SIMPLE:
        # The receiving proxy flushes GPU-bound data (an RDMA read) and writes the tail counter,
        # which the kernel polls in host memory.
        detect = net.proxy_pickup_us + (net.pcie_read_rtt_us if gdr_recv else 0.0) + 1.5 * net.pcie_read_rtt_us
    else:
        # The kernel polls the flags in line with the data: in its own memory, or across PCIe.
        detect = 0.0 if gdr_recv else 1.5 * net.pcie_read_rtt_us
    return signal + proxy + nic + detect
