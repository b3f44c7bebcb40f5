"""The host thread that launches a collective: one per process, driving ``gpus`` GPUs in turn.

With one process per GPU (``mpirun -np 8 … -g 1``) every GPU has its own thread.  With one
process driving several (nccl-tests ``-g N``, ``--gpus-per-process``), one thread does it all,
one GPU after another:

* nccl-tests' ``startColl`` (``src/common.cu``) wraps the N calls in ``ncclGroupStart`` /
  ``ncclGroupEnd``; NCCL's ``doLaunches`` (``src/group.cc``) then visits each communicator in
  turn — ``cudaSetDevice``, ``ncclLaunchPrepare``, ``ncclLaunchKernel`` (``cuLaunchKernelEx``) —
  so GPU ``i``'s kernel is launched ``i`` launches after GPU 0's, and a collective, which needs
  every rank, starts when the last one is (``skew_us``).
* the calls are asynchronous, so while the GPUs run call ``k`` the thread already launches call
  ``k + 1``: back to back, the calls follow each other at the pace of the GPUs or of the thread
  (``gpus`` launches per call, ``call_us``), whichever is slower.
* nccl-tests times ``iters`` calls (``-n``, default 20) from the first launch until
  ``testStreamSynchronize`` has seen all N streams idle, polling them with ``cudaStreamQuery``
  one after another (``poll_us``), and divides by ``iters`` (``timed_loop_us``).

Each GPU keeps its own proxy thread even then (``ncclProxyInit`` makes one ``ncclProxyState``
per communicator, ``src/proxy.cc``, ``src/init.cc``), so the network side is the same as with
one process per GPU (``ChannelShare.proxy_us``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NCCL_TESTS_ITERS = 20
"""Calls nccl-tests times per size unless ``-n`` says otherwise (``int iters = 20`` in
``src/common.cu``)."""


@dataclass(frozen=True)
class HostLaunch:
    """One host thread's part in a call: ``gpus`` launches of ``launch_us`` each, one after
    another, and a poll of ``query_us`` per GPU's stream when the caller waits for the result.

    >>> h = HostLaunch(gpus=8, launch_us=3.8, query_us=0.5)
    >>> round(h.call_us, 1), round(h.skew_us, 1), h.poll_us
    (30.4, 26.6, 4.0)
    """

    gpus: int = 1
    launch_us: float = 0.0
    query_us: float = 0.0

    @property
    def call_us(self) -> float:
        """The thread's time per call: one launch per GPU it drives."""
        return self.gpus * self.launch_us

    @property
    def skew_us(self) -> float:
        """How long after the first GPU's kernel the last one is launched."""
        return (self.gpus - 1) * self.launch_us

    @property
    def poll_us(self) -> float:
        """One round of ``cudaStreamQuery`` over the thread's streams."""
        return self.gpus * self.query_us

    def timed_loop_us(self, gpu_us, period_us, iters: int = NCCL_TESTS_ITERS):
        """The time per call nccl-tests reports for ``iters`` calls launched back to back.

        ``gpu_us``: one call on the GPUs from its last launch to its end; ``period_us``: the GPUs'
        time between two calls already queued (``gpu_us``, or less where calls overlap).  Call
        ``j``'s last kernel is launched ``(j + 1) × call_us`` after the first launch and ends no
        sooner than ``gpu_us`` later, nor sooner than one GPU period after call ``j − 1``; the last
        call ends at the worse of the host-bound and GPU-bound extremes, then the thread polls.

        >>> h = HostLaunch(gpus=8, launch_us=4.0)
        >>> float(h.timed_loop_us(15.0, 15.0))  # host-bound: 32 µs of launches per call
        32.75
        >>> float(HostLaunch(gpus=1, launch_us=4.0).timed_loop_us(15.0, 15.0))  # GPU-bound
        15.2
        """
        host = self.call_us
        last = np.maximum(host + (iters - 1) * period_us, iters * host)
        return (gpu_us + last + self.poll_us) / iters
