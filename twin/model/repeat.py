"""Calls repeated back to back on one stream: how far a one-way chain's calls overlap.

Down a Broadcast or Reduce chain the data flows one way, so the root could start call ``k + 1``
as soon as it has pushed call ``k``, while the far ranks still receive it: repeated calls would
follow each other at the chain's interval, its busiest rank's time for one call.  But NCCL runs
a collective as one kernel with one CTA per channel (``blockIdx.x`` is the channel, the grid
``nChannels`` wide: ``ncclLaunchKernel``, ``src/enqueue.cc``), and a stream starts a kernel only
once the kernel before it has ended.  So a rank ends call ``k`` when its *last* channel's data has
arrived, and forwards nothing of call ``k + 1`` on any channel before that.  Each channel's chain
is its ring cut at the root, and the rings visit a node's GPUs in different orders, so a GPU of
the root's node can be near the head of one channel's chain and near its tail in another's: it
then holds up call ``k + 1`` on the first channel until call ``k`` has gone all the way round on
the second.

With every rank ``r``'s kernel start ``S_r`` and ``A_c(r)`` the latency from the root down
channel ``c``'s chain to ``r``, call ``k + 1`` starts at ``r`` no sooner than call ``k`` started at
any rank ``q`` before it on some chain, plus the interval ``T`` for ``q`` to push the call, plus
the hops from ``q`` to ``r``: ``S_r(k+1) = max over c, q ≤_c r of S_q(k) + T + A_c(r) − A_c(q)``, a
max-plus linear system.  Repeated calls so follow each other at its heaviest cycle's mean weight
per call (its max-plus eigenvalue): ``T`` plus a share of the chain's fill (``coupled_fill_share``).
Two ranks ``a``, ``b`` with ``a`` before ``b`` on channel ``c`` and after it on ``c'`` close a cycle
of two calls, of mean ``T + (A_c(b) − A_c(a) + A_c'(a) − A_c'(b)) / 2``; with more channels
longer cycles weigh more.  One channel, or channels that all visit the ranks in one order (the
rings of one NVSwitch node), have no such cycle: their calls overlap down to ``T``.
"""

from __future__ import annotations

import numpy as np

SETTLE_CALLS = 120
"""Calls the system is run before its growth is read, and then as many more: a max-plus system
settles into a periodic regime after a transient, and 120 calls are whole periods of any
cyclicity up to 6 (and of 8, 10, 12, 15, 20, ...)."""


def coupled_fill_share(arrivals: np.ndarray, settle: int = SETTLE_CALLS) -> float:
    """The share of a chain's fill that each repeated call waits for: the system's growth per
    call with ``T = 0`` (every cycle's mean is ``T`` plus its hops' mean), over the longest
    channel's whole chain (the one a call's fill ends with), at most 1.

    ``arrivals[c, r]``: the latency from the root down channel ``c``'s chain to rank ``r`` (0 at
    the root).  Each call sweeps every chain once (``S_q − A_c(q)`` running maxima down it), so
    the cost is ``2 × settle`` sweeps of channels × ranks.

    >>> import numpy as np
    >>> same = np.array([[0., 1., 2., 3.], [0., 1., 2., 3.]])  # both channels in one order
    >>> coupled_fill_share(same)
    0.0
    >>> crossed = np.array([[0., 1., 2., 3.], [0., 3., 1., 2.]])  # rank 1 first on one, last on the other
    >>> coupled_fill_share(crossed)  # 1 -> 3 on channel 0 (2 hops), 3 -> 1 on channel 1 (1 hop)
    0.5
    """
    arrivals = np.asarray(arrivals, dtype=float)
    total = float(arrivals.max()) if arrivals.size else 0.0
    if arrivals.shape[0] < 2 or total <= 0:
        return 0.0
    order = np.argsort(arrivals, axis=1, kind="stable")
    along = np.take_along_axis(arrivals, order, axis=1)  # each channel's latencies in its chain's order
    start = np.zeros(arrivals.shape[1])
    latest = []
    for _ in range(2 * settle):
        ends = np.maximum.accumulate(start[order] - along, axis=1) + along  # [c, i]: chain c's i-th rank
        done = np.empty_like(ends)
        np.put_along_axis(done, order, ends, axis=1)
        start = done.max(axis=0)
        latest.append(start.max())
    growth = (latest[-1] - latest[settle - 1]) / settle
    return float(min(1.0, max(0.0, growth / total)))
