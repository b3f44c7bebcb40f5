"""The closed-form engine over a whole search space at once.

For one task, every subspace and every ⟨NC, NT, C⟩ of its resource grid: the geometry is
solved once per (subspace, NC) and the schedule formula runs as numpy over all chunk sizes of
each thread count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traces.task import Op
from tuner.config import Config, Subspace
from tuner.space import ResourceGrid
from twin.model.geometry import CommGeometry
from twin.model.schedule import Unsupported, check_supported, schedule_for


@dataclass(frozen=True)
class SubspaceSweep:
    """Predicted times (µs) of every grid point of one subspace; ``times[nt][i_nc, i_chunk]``."""

    subspace: Subspace
    grid: ResourceGrid
    times: dict[int, np.ndarray]

    @property
    def size(self) -> int:
        return self.grid.size

    def best(self) -> tuple[Config, float]:
        """The fastest grid point and its time."""
        best_nt = min(self.times, key=lambda nt: float(self.times[nt].min()))
        t = self.times[best_nt]
        i_nc, i_chunk = np.unravel_index(int(np.argmin(t)), t.shape)
        s = self.subspace
        config = Config(s.algo, s.proto, s.transport, int(self.grid.nchannels[i_nc]), best_nt,
                        int(self.grid.chunks[best_nt][i_chunk]))
        return config, float(t[i_nc, i_chunk])


def sweep_subspace(geoms: dict, op: Op, nbytes: int, subspace: Subspace, grid: ResourceGrid,
                   *, gpus_per_process: int = 1) -> SubspaceSweep:
    """Time every grid point of ``subspace``; ``geoms`` maps each transport to its geometry."""
    geom: CommGeometry = geoms[subspace.transport]
    check_supported(geom, op, subspace.algo, subspace.proto)
    times = {}
    for nt in grid.nthreads:
        chunks = grid.chunks[nt].astype(float)
        rows = [schedule_for(geom, op, nbytes, subspace.algo, subspace.proto, int(nc), nt, chunks,
                             gpus_per_process=gpus_per_process).time_us() for nc in grid.nchannels]
        times[nt] = np.vstack([np.broadcast_to(r, chunks.shape) for r in rows])
    return SubspaceSweep(subspace, grid, times)


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
