"""The twin as a tuning executor: predicted times with seeded measurement noise.

Timing one NCCL call on a GPU varies by a few percent from call to call, with the odd slow
outlier when something else grabs the GPU.  ``TwinExecutor.measure`` returns the twin's
closed-form time multiplied by ``exp(N(0, noise))`` and, with probability ``spike_prob``, a
straggler factor of 1.05 to 1.25.  The noise of the k-th measurement of a config is a pure
function of (seed, task, config, k), so a restarted executor measures exactly what an
uninterrupted one would have.

Predictions are cached; ``load_sweep`` times a task's whole space at once with the fast path
(``twin.fastpath``) so that every later measurement is a table look-up, and gives the
exhaustive optimum.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace

import numpy as np

from traces.errors import CcltwinError
from traces.task import Task
from tuner.config import Config, Subspace, Transport
from tuner.knobs import ALL_TIERS
from tuner.rules import CommFacts
from tuner.space import ConfigError, ConfigSpace
from twin.fastpath import sweep_subspace
from twin.model.schedule import Unsupported
from twin.predict import Twin
from twin.rank import comm_facts, placement

SPIKE_RANGE = (0.05, 0.25)
"""A straggler measurement is this much slower (uniformly drawn)."""


class TwinExecutor:
    """Measure configs of any task on ``cluster`` with the twin (every knob tier can change)."""

    tiers = ALL_TIERS

    def __init__(self, cluster, *, noise: float = 0.02, spike_prob: float = 0.05, seed: int = 0,
                 nccl_version: tuple[int, int, int] = (2, 28, 9),
                 transports: tuple[Transport, ...] = (Transport.P2P, Transport.SHM)):
        if not 0 <= noise < 0.5:
            raise CcltwinError(f"noise must be a relative sigma in [0, 0.5), got {noise}")
        if not 0 <= spike_prob <= 1:
            raise CcltwinError(f"spike_prob must be in [0, 1], got {spike_prob}")
        self.cluster = cluster
        self.noise = noise
        self.spike_prob = spike_prob
        self.seed = seed
        self.nccl_version = nccl_version
        self.transports = transports
        self.hardware = f"twin:{cluster.name}"
        self._twins: dict[tuple[int, int], Twin] = {}
        self._times: dict[tuple[Task, Config], float] = {}
        self._tables: dict[tuple[Task, Subspace], tuple[ConfigSpace, np.ndarray]] = {}
        self._counts: dict[tuple[Task, Config], int] = {}

    def twin(self, task: Task) -> Twin:
        """The twin of the communicator ``task`` runs on (placed by its ``GxN`` group shape)."""
        (gpus, nodes), _ = placement(task, self.cluster.gpus_per_node)
        if nodes > self.cluster.nodes or gpus > self.cluster.gpus_per_node:
            raise ConfigError(f"{task.op} on {task.nranks} ranks needs {nodes} node(s) of {gpus} GPUs; "
                              f"{self.cluster.name} has {self.cluster.nodes} of {self.cluster.gpus_per_node}")
        if (gpus, nodes) not in self._twins:
            sub = self.cluster.subset(nodes=nodes, gpus_per_node=gpus)
            self._twins[(gpus, nodes)] = Twin(sub, nccl_version=self.nccl_version)
        return self._twins[(gpus, nodes)]

    def facts(self, task: Task) -> CommFacts:
        return replace(comm_facts(self.twin(task)), transports=self.transports)

    def default_config(self, task: Task) -> Config:
        return self.twin(task).resolve(task.op, task.nbytes, dtype=task.dtype)[0]

    def true_time(self, task: Task, config: Config) -> float:
        """The twin's noise-free time of ``task`` with ``config``, µs."""
        table = self._tables.get((task, config.subspace))
        if table is not None:
            i = table[0].candidates(config.subspace).index(config)
            if i is not None:
                return float(table[1][i])
        key = (task, config)
        if key not in self._times:
            twin = self.twin(task)
            try:
                self._times[key] = float(twin.schedule(task, config).time_us())
            except Unsupported as err:
                raise ConfigError(f"{config}: {err}") from None
        return self._times[key]

    def measure(self, task: Task, config: Config) -> float:
        """One noisy measurement (see the module docstring)."""
        key = (task, config)
        k = self._counts.get(key, 0)
        self._counts[key] = k + 1
        return self.true_time(task, config) * self.noise_factor(task, config, k)

    def resumed(self, task: Task, config: Config) -> None:
        """Count a measurement of ``config`` taken by an earlier run (a tuning session resumed
        from it), so that the next one draws the noise an uninterrupted run would have."""
        key = (task, config)
        self._counts[key] = self._counts.get(key, 0) + 1

    def noise_factor(self, task: Task, config: Config, k: int) -> float:
        """The multiplicative noise of the ``k``-th measurement of ``config`` on ``task``."""
        if self.noise == 0 and self.spike_prob == 0:
            return 1.0
        text = f"{self.seed}|{task}|{config}|{k}".encode()
        rng = np.random.default_rng(int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little"))
        factor = math.exp(self.noise * rng.standard_normal())
        if rng.random() < self.spike_prob:
            factor *= 1.0 + rng.uniform(*SPIKE_RANGE)
        return factor

    def load_sweep(self, task: Task, space: ConfigSpace) -> tuple[Config, float]:
        """Time every config of ``space`` with the fast path (later look-ups are free); returns
        the exhaustive optimum and its noise-free time."""
        twin = self.twin(task)
        geoms = {t: twin.geometry(t) for t in Transport}
        best = (None, math.inf)
        for s in space.subspaces:
            if (task, s) not in self._tables:
                try:
                    sw = sweep_subspace(geoms, task.op, task.nbytes, s, space.grid(s),
                                        gpus_per_process=twin.gpus_per_process)
                except Unsupported:
                    continue
                flat = np.concatenate([sw.times[nt].ravel() for nt in sw.grid.nthreads])
                self._tables[(task, s)] = (space, flat)
            flat = self._tables[(task, s)][1]
            i = int(np.argmin(flat))
            if flat[i] < best[1]:
                best = (space.candidates(s).config(i), float(flat[i]))
        if best[0] is None:
            raise ConfigError(f"the twin models none of the subspaces of {task.op} here")
        return best

    def table(self, task: Task, subspace: Subspace) -> np.ndarray:
        """Noise-free times of every grid point of ``subspace`` (after ``load_sweep``), in
        :class:`tuner.candidates.Candidates` order."""
        return self._tables[(task, subspace)][1]
