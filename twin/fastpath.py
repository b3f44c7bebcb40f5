"""The closed-form engine over a whole search space at once.

For one task, every subspace and every ⟨NC, NT, C⟩ of its resource grid: the geometry is
solved once per (subspace, NC), and the schedule formula runs as numpy over every
(thread count, chunk size) pair of the grid at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise

import numpy as np

from traces.task import Op
from tuner.config import Config, Subspace
from tuner.space import ResourceGrid
from twin.model.geometry import CommGeometry
from twin.model.schedule import Unsupported, check_supported, schedule_for


@dataclass(frozen=True)
class SubspaceSweep:
    """Predicted times (µs) of every grid point of one subspace.

    ``flat[i]`` is point ``i`` in ``tuner.candidates`` order (thread count, then channels, then
    chunk size); ``times[nt][i_nc, i_chunk]`` views the points of one thread count.
    """

    subspace: Subspace
    grid: ResourceGrid
    flat: np.ndarray

    @property
    def size(self) -> int:
        return self.grid.size

    @cached_property
    def _blocks(self) -> list[tuple[int, int, int]]:
        """``(nt, first index, chunk count)`` of each thread count's block of ``flat``."""
        out, start = [], 0
        for nt in self.grid.nthreads:
            count = len(self.grid.chunks[nt])
            out.append((nt, start, count))
            start += len(self.grid.nchannels) * count
        return out

    @cached_property
    def times(self) -> dict[int, np.ndarray]:
        n = len(self.grid.nchannels)
        return {nt: self.flat[start:start + n * count].reshape(n, count) for nt, start, count in self._blocks}

    @cached_property
    def nchannels(self) -> np.ndarray:
        """The channel count of every point, aligned with ``flat``."""
        return np.concatenate([np.repeat(self.grid.nchannels, count) for _, _, count in self._blocks])

    def config(self, i: int) -> Config:
        """Point ``i`` of ``flat`` as a configuration."""
        for nt, start, count in self._blocks:
            if i < start + len(self.grid.nchannels) * count:
                i_nc, i_chunk = divmod(i - start, count)
                s = self.subspace
                return Config(s.algo, s.proto, s.transport, int(self.grid.nchannels[i_nc]), nt,
                              int(self.grid.chunks[nt][i_chunk]))
        raise IndexError(f"point {i} of a {self.size}-point sweep")

    def best(self, objective: np.ndarray | None = None) -> tuple[Config, float]:
        """The point with the least ``objective`` (aligned with ``flat``; default: the time) among
        those the twin gives a finite time, and its time; ties go to the first in ``flat`` order.
        The time is ``inf`` when no point has a finite one."""
        finite = np.isfinite(self.flat)
        score = np.where(finite, self.flat if objective is None else objective, np.inf)
        i = int(np.argmin(score))
        return self.config(i), float(self.flat[i]) if finite[i] else np.inf


def sweep_subspace(geoms: dict, op: Op, nbytes: int, subspace: Subspace, grid: ResourceGrid,
                   *, gpus_per_process: int = 1) -> SubspaceSweep:
    """Time every grid point of ``subspace``; ``geoms`` maps each transport to its geometry."""
    geom: CommGeometry = geoms[subspace.transport]
    check_supported(geom, op, subspace.algo, subspace.proto)
    nthreads = np.concatenate([np.full(len(grid.chunks[nt]), nt) for nt in grid.nthreads])
    chunks = np.concatenate([grid.chunks[nt] for nt in grid.nthreads]).astype(float)
    table = np.empty((len(grid.nchannels), len(chunks)))  # channels x (threads, chunk) pairs
    for i, nc in enumerate(grid.nchannels):
        table[i] = schedule_for(geom, op, nbytes, subspace.algo, subspace.proto, int(nc), nthreads, chunks,
                                gpus_per_process=gpus_per_process).time_us()
    bounds = np.cumsum([0, *(len(grid.chunks[nt]) for nt in grid.nthreads)])
    flat = np.concatenate([table[:, a:b].ravel() for a, b in pairwise(bounds)])
    return SubspaceSweep(subspace, grid, flat)


def sweep(geoms: dict, op: Op, nbytes: int, grids: dict[Subspace, ResourceGrid], *, gpus_per_process: int = 1
          ) -> list[SubspaceSweep]:
    """Every supported subspace of ``grids``; unsupported ones are left out."""
    out = []
    for subspace, grid in grids.items():
        try:
            out.append(sweep_subspace(geoms, op, nbytes, subspace, grid, gpus_per_process=gpus_per_process))
        except Unsupported:
            continue
    return out
