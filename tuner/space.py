"""The resource grid AutoCCL searches inside one subspace (its candidate generators' ranges).

NC: 1 … ``max_channels`` step 1.  NT: 96 … 640 step 32, Simple at most 608 (a sync warp is
added on top) and Tree/Simple AllReduce at most 512.  Chunk (effective data bytes): multiples
of a per-protocol minimum up to the buffer's ceiling — LL ``8·NT`` … 40,960; LL128 ``60·NT`` …
576,000 in steps of 1,920; Simple ``8·NT`` … 2 MiB (512 KiB for Tree AllReduce).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tuner.config import Algo, Proto

THREAD_VALUES = tuple(range(96, 641, 32))
LL128_GRAIN = 1920


@dataclass(frozen=True)
class ResourceGrid:
    """⟨NC, NT, C⟩ candidates of one subspace: chunk sizes depend on the thread count."""

    nchannels: np.ndarray
    nthreads: tuple[int, ...]
    chunks: dict[int, np.ndarray]

    @property
    def size(self) -> int:
        return len(self.nchannels) * sum(len(self.chunks[nt]) for nt in self.nthreads)


def max_threads(algo: Algo, proto: Proto) -> int:
    if proto is Proto.SIMPLE:
        return 512 if algo is Algo.TREE else 608
    return 640


def chunk_range(algo: Algo, proto: Proto, nthreads: int) -> np.ndarray:
    """Effective chunk sizes AutoCCL tries at ``nthreads`` threads."""
    if proto is Proto.LL:
        return np.arange(8 * nthreads, 40_960 + 1, 8 * nthreads)
    if proto is Proto.LL128:
        step = 60 * nthreads
        values = np.arange(step, 576_000 + 1, step)
        return values[values % LL128_GRAIN == 0]
    top = 524_288 if algo is Algo.TREE else 2_097_152
    return np.arange(8 * nthreads, top + 1, 8 * nthreads)


def resource_grid(algo: Algo, proto: Proto, max_channels: int = 128) -> ResourceGrid:
    threads = tuple(t for t in THREAD_VALUES if t <= max_threads(algo, proto))
    return ResourceGrid(np.arange(1, max_channels + 1), threads, {t: chunk_range(algo, proto, t) for t in threads})
