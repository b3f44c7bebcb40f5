"""One subspace's grid as flat arrays, so that searches can index, sample and scan it with numpy.

Index order is thread count first, then channels, then chunk size — the order of
``twin.fastpath``'s sweep tables (``times[nt][i_nc, i_chunk]``), so index ``i`` of a subspace
is one cell of its sweep.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from tuner.config import Config, Subspace
from tuner.space import ResourceGrid


class Candidates:
    """Every ⟨NC, NT, C⟩ point of ``grid`` for ``subspace``; ``points[i]`` is point ``i``."""

    def __init__(self, subspace: Subspace, grid: ResourceGrid):
        self.subspace = subspace
        self.grid = grid
        nc = np.asarray(grid.nchannels, dtype=np.int64)
        blocks, offsets, start = [], {}, 0
        for nt in grid.nthreads:
            chunks = np.asarray(grid.chunks[nt], dtype=np.int64)
            offsets[nt] = start
            cc, nn = np.meshgrid(chunks, nc)
            blocks.append(np.column_stack([nn.ravel(), np.full(nn.size, nt, dtype=np.int64), cc.ravel()]))
            start += nn.size
        self.points: np.ndarray = np.concatenate(blocks) if blocks else np.zeros((0, 3), dtype=np.int64)
        """``(size, 3)`` int64 array of (nchannels, nthreads, chunk_bytes)."""
        self._offsets = offsets
        self._nc_index = {int(v): i for i, v in enumerate(nc)}

    @cached_property
    def axes(self) -> np.ndarray:
        """``(3, size)`` float copy of ``points``, one contiguous row per axis (for fast scans)."""
        return np.ascontiguousarray(self.points.T, dtype=float)

    @property
    def size(self) -> int:
        return len(self.points)

    def config(self, i: int) -> Config:
        nc, nt, chunk = (int(v) for v in self.points[i])
        s = self.subspace
        return Config(s.algo, s.proto, s.transport, nc, nt, chunk)

    def index(self, config: Config) -> int | None:
        """The index of ``config`` here, ``None`` if it is not a grid point of this subspace."""
        if config.subspace != self.subspace or config.nthreads not in self._offsets:
            return None
        i_nc = self._nc_index.get(config.nchannels)
        chunks = self.grid.chunks[config.nthreads]
        i_chunk = int(np.searchsorted(chunks, config.chunk_bytes))
        if i_nc is None or i_chunk >= len(chunks) or chunks[i_chunk] != config.chunk_bytes:
            return None
        return self._offsets[config.nthreads] + i_nc * len(chunks) + i_chunk

    def nearest(self, config: Config) -> Config:
        """The grid point closest to ``config`` (channels, threads, then chunk on a log scale)."""
        if config.subspace != self.subspace:
            raise ValueError(f"{config} is not in subspace {self.subspace}")
        nts = np.asarray(self.grid.nthreads)
        nt = int(nts[np.argmin(np.abs(nts - config.nthreads))])
        ncs = np.asarray(self.grid.nchannels)
        nc = int(ncs[np.argmin(np.abs(ncs - config.nchannels))])
        chunks = self.grid.chunks[nt]
        chunk = int(chunks[np.argmin(np.abs(np.log(chunks) - np.log(max(config.chunk_bytes, 1))))])
        s = self.subspace
        return Config(s.algo, s.proto, s.transport, nc, nt, chunk)
