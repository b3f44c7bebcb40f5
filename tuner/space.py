"""The config space of one task on one communicator: subspaces, resource grids, validity and caps.

An 80 MB AllGather on 8 A40s splits into ⟨ring, {ll, ll128, simple}, {p2p, shm}⟩ subspaces; each
holds AutoCCL's resource grid (its candidate generators' ranges, research/autoccl-anchors.md §1.6):

* NC: 1 … the channel cap, step 1;
* NT: 96 … 640 step 32, Simple at most 608 (a sync warp is added on top) and Tree/Simple
  AllReduce at most 512;
* C (effective data bytes per chunk): multiples of a per-thread step — LL and Simple ``8·NT``,
  LL128 ``60·NT`` — up to the buffer's ceiling: LL 40,960; LL128 576,000; Simple 2 MiB (512 KiB
  for Tree).  Stock NCCL aligns a chunk down to its protocol grain (LL 16 B, LL128 1,920 B,
  Simple 512 B), so only grain multiples are distinct configs.

The caps that keep a search from crashing a job (AutoCCL §8.2: oversized NC/NT/C saturate
resources and fail, and the unimodal landscape means capping them costs nothing): at most the
communicator's channels (``MAXCHANNELS``: 32 before NCCL 2.25, 64 after), ``2 × SMs`` and 255
(AutoCCL's runtime cap and NCCL's uint8 field), and no more CTAs than the GPU can keep resident
together (a channel's CTA spins on its peers; one that cannot be scheduled hangs them); threads
within NCCL's 640 per block; a Simple chunk within four of the eight buffer slots (NCCL's
"chunkSize is too large"), LL128 chunks whole 1,920-byte slices.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from traces.task import Task
from tuner.config import Algo, Config, ConfigError, Proto, Subspace, Transport
from tuner.knobs import ALL_TIERS, Knob, Tier, changeable_knobs, knob_tiers
from tuner.rules import CommFacts, subspace_problem

THREAD_VALUES = tuple(range(96, 641, 32))
LL128_GRAIN = 1920
GRAIN_BYTES = {Proto.LL: 16, Proto.LL128: LL128_GRAIN, Proto.SIMPLE: 512}
"""``ncclProtoGrainSize``: NCCL aligns every chunk down to a multiple of this."""
MAX_BLOCK_THREADS = 640
"""``NCCL_MAX_NTHREADS``: the largest CTA NCCL launches, extra warps included."""
THREADS_PER_SM = {70: 2048, 75: 1024, 80: 2048, 86: 1536, 87: 1536, 89: 1536, 90: 2048, 100: 2048}
"""Resident threads per SM by compute capability (CUDA programming guide, table of limits)."""
CHANNEL_FIELD_MAX = 255
"""NCCL keeps a call's channel count in a uint8 (AutoCCL refuses more)."""


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


def chunk_limits(algo: Algo, proto: Proto, nthreads: int) -> tuple[int, int]:
    """(per-thread step, ceiling) of the effective chunk at ``nthreads`` threads."""
    if proto is Proto.LL:
        return 8 * nthreads, 40_960
    if proto is Proto.LL128:
        return 60 * nthreads, 576_000
    return 8 * nthreads, 524_288 if algo is Algo.TREE else 2_097_152


def chunk_range(algo: Algo, proto: Proto, nthreads: int, *, grain: int = 1) -> np.ndarray:
    """Effective chunk sizes AutoCCL tries at ``nthreads`` threads, kept to multiples of ``grain``."""
    step, top = chunk_limits(algo, proto, nthreads)
    values = np.arange(step, top + 1, step)
    grain = max(grain, LL128_GRAIN if proto is Proto.LL128 else 1)
    return values[values % grain == 0]


def resource_grid(algo: Algo, proto: Proto, max_channels: int = 128) -> ResourceGrid:
    """AutoCCL's own grid (no NCCL grain alignment), ``max_channels`` channels."""
    threads = tuple(t for t in THREAD_VALUES if t <= max_threads(algo, proto))
    return ResourceGrid(np.arange(1, max_channels + 1), threads, {t: chunk_range(algo, proto, t) for t in threads})


def maxchannels(nccl_version: tuple[int, int, int]) -> int:
    """NCCL's compiled ``MAXCHANNELS``: 32 up to 2.24, 64 from 2.25.1."""
    return 64 if tuple(nccl_version) >= (2, 25, 1) else 32



def check_forced_resources(config: Config, knobs: dict, nccl_version: tuple[int, int, int]) -> None:
    """Raise ``ConfigError`` naming the option when a forced resource (a ``knobs`` value that is
    not ``None``) is one NCCL cannot run with the algorithm and protocol in use: channels above
    ``MAXCHANNELS``, threads outside the protocol's range, a chunk smaller than the protocol's grain.

    >>> ring_ll128 = Config(Algo.RING, Proto.LL128, Transport.P2P, 8, 64, 1920)
    >>> check_forced_resources(ring_ll128, {"nchannels": None, "nthreads": 64, "chunk_bytes": None}, (2, 28, 9))
    Traceback (most recent call last):
    ...
    tuner.config.ConfigError: --nthreads 64: ring/ll128 runs 96 to 640 threads
    """
    s = config.subspace
    if knobs["nchannels"] is not None and config.nchannels > maxchannels(nccl_version):
        raise ConfigError(f"--nchannels {config.nchannels}: NCCL {'.'.join(map(str, nccl_version))} runs at most "
                          f"{maxchannels(nccl_version)} channels")
    top = max_threads(s.algo, s.proto)
    if knobs["nthreads"] is not None and not THREAD_VALUES[0] <= config.nthreads <= top:
        raise ConfigError(f"--nthreads {config.nthreads}: {s.algo}/{s.proto} runs {THREAD_VALUES[0]} to {top} threads")
    grain = GRAIN_BYTES[s.proto]
    if knobs["chunk_bytes"] is not None and config.chunk_bytes < grain:
        raise ConfigError(f"--chunk {config.chunk_bytes}: below the {s.proto} protocol's grain of {grain} bytes")

def channel_cap(facts: CommFacts, tiers: Iterable[Tier] = ALL_TIERS) -> int:
    """Most channels any config may use on this communicator (see the module docstring).

    An executor that can only change per-call knobs stays within the live communicator's
    channels; one that can create communicators may raise them up to ``MAXCHANNELS``.
    """
    resident = facts.sm_count * (THREADS_PER_SM.get(facts.sm_version, 1024) // MAX_BLOCK_THREADS)
    cap = facts.max_channels if facts.max_channels is not None else maxchannels(facts.nccl_version)
    if facts.channel_cap is not None and Tier.PER_COMMUNICATOR not in set(tiers):
        cap = min(cap, facts.channel_cap)
    return max(1, min(cap, 2 * facts.sm_count, CHANNEL_FIELD_MAX, resident))


class ConfigSpace:
    """Every config a search may propose for ``task`` on the communicator ``facts`` describes.

    Only knobs of the ``tiers`` the executor can change (per NCCL release, :mod:`tuner.knobs`)
    vary; the others take their value from ``fixed`` (the warm-start plan's or NCCL's choice).

    >>> from traces.task import Op
    >>> facts = CommFacts(nranks=8, nnodes=1, sm_count=84, sm_version=86, transports=(Transport.P2P,))
    >>> space = ConfigSpace(Task(op=Op.ALLGATHER, nbytes=80_000_000, nranks=8), facts)
    >>> [str(s) for s in space.subspaces]
    ['ring/ll/p2p', 'ring/ll128/p2p', 'ring/simple/p2p']
    >>> space.problems(Config(Algo.RING, Proto.SIMPLE, Transport.P2P, 200, 256, 4096))
    ['nchannels 200 above the cap of 64 (channel cap, 2 x SMs, 255, resident CTAs)']
    """

    def __init__(self, task: Task, facts: CommFacts, *, tiers: Iterable[Tier] = ALL_TIERS,
                 fixed: Config | None = None):
        if task.nranks != facts.nranks:
            raise ConfigError(f"the task has {task.nranks} ranks but the communicator {facts.nranks}")
        self.task = task
        self.facts = facts
        self.tiers = frozenset(tiers)
        self.knobs = changeable_knobs(facts.nccl_version, self.tiers)
        self.tier_of = knob_tiers(facts.nccl_version)
        if fixed is None and self.knobs != frozenset(Knob):
            frozen = ", ".join(sorted(k.value for k in set(Knob) - self.knobs))
            raise ConfigError(f"{frozen} cannot change in tiers {sorted(t.name for t in self.tiers)}: "
                              "pass fixed= (the plan's or NCCL's config) for their values")
        self.fixed = fixed
        self.max_channels = channel_cap(facts, self.tiers)
        if not facts.ll128 and Tier.PER_COMMUNICATOR in self.tiers:
            facts = replace(facts, ll128=True)  # NCCL_PROTO at communicator init forces LL128
        self._rule_facts = facts
        self.excluded: dict[Subspace, str] = {}
        subspaces = []
        for algo in Algo:
            for proto in Proto:
                for transport in Transport:
                    s = Subspace(algo, proto, transport)
                    why = subspace_problem(task.op, s, facts) or self._frozen_problem(s)
                    if why is None:
                        subspaces.append(s)
                    else:
                        self.excluded[s] = why
        if not subspaces:
            raise ConfigError(f"no config of {task.op} can run on this communicator: "
                              f"{sorted(set(self.excluded.values()))}")
        self.subspaces: tuple[Subspace, ...] = tuple(subspaces)
        self._grids: dict[Subspace, ResourceGrid] = {}
        self._candidates: dict = {}

    def _frozen_problem(self, s: Subspace) -> str | None:
        f = self.fixed
        if Knob.ALGO not in self.knobs and s.algo is not f.algo:
            return f"algo is fixed to {f.algo} (tier {self.tier_of[Knob.ALGO].name})"
        if Knob.PROTO not in self.knobs and s.proto is not f.proto:
            return f"proto is fixed to {f.proto} (tier {self.tier_of[Knob.PROTO].name})"
        # A fixed transport still reads p2p where the transport does not apply.
        if (Knob.TRANSPORT not in self.knobs and s.transport is not f.transport
                and subspace_problem(self.task.op, Subspace(s.algo, s.proto, f.transport), self._rule_facts) is None):
            return f"transport is fixed to {f.transport} (tier {self.tier_of[Knob.TRANSPORT].name})"
        return None

    def grid(self, subspace: Subspace) -> ResourceGrid:
        """The ⟨NC, NT, C⟩ grid of ``subspace`` (caps applied; fixed knobs hold one value)."""
        if subspace not in self._grids:
            self._check_subspace(subspace)
            a, p = subspace.algo, subspace.proto
            f = self.fixed
            channels = (np.array([f.nchannels]) if Knob.NCHANNELS not in self.knobs
                        else np.arange(1, self.max_channels + 1))
            threads = ((f.nthreads,) if Knob.NTHREADS not in self.knobs
                       else tuple(t for t in THREAD_VALUES if t <= max_threads(a, p)))
            if Knob.CHUNK_BYTES not in self.knobs:
                chunks = {t: np.array([f.chunk_bytes]) for t in threads}
            else:
                chunks = {t: chunk_range(a, p, t, grain=GRAIN_BYTES[p]) for t in threads}
            self._grids[subspace] = ResourceGrid(channels, threads, chunks)
        return self._grids[subspace]

    def candidates(self, subspace: Subspace):
        """The grid of ``subspace`` as flat arrays (see :class:`tuner.candidates.Candidates`)."""
        from tuner.candidates import Candidates

        if subspace not in self._candidates:
            self._candidates[subspace] = Candidates(subspace, self.grid(subspace))
        return self._candidates[subspace]

    @property
    def size(self) -> int:
        """Configs in the whole space."""
        return sum(self.grid(s).size for s in self.subspaces)

    def _check_subspace(self, subspace: Subspace) -> None:
        if subspace in self.excluded:
            raise ConfigError(f"{subspace}: {self.excluded[subspace]}")

    def problems(self, config: Config) -> list[str]:
        """Why ``config`` is not in this space (empty when it is)."""
        s = config.subspace
        if s in self.excluded:
            return [self.excluded[s]]
        out = []
        f = self.fixed
        for knob in (Knob.NCHANNELS, Knob.NTHREADS, Knob.CHUNK_BYTES):
            if knob not in self.knobs and getattr(config, knob.value) != getattr(f, knob.value):
                out.append(f"{knob} is fixed to {getattr(f, knob.value)} (tier {self.tier_of[knob].name})")
        if config.nchannels > self.max_channels:
            out.append(f"nchannels {config.nchannels} above the cap of {self.max_channels} "
                       "(channel cap, 2 x SMs, 255, resident CTAs)")
        top = max_threads(s.algo, s.proto)
        if not THREAD_VALUES[0] <= config.nthreads <= top:
            out.append(f"nthreads {config.nthreads} outside {THREAD_VALUES[0]}..{top} for {s.algo}/{s.proto}")
        step, ceiling = chunk_limits(s.algo, s.proto, config.nthreads)
        if config.chunk_bytes > ceiling:
            out.append(f"chunk_bytes {config.chunk_bytes} above the {s.proto} buffer's ceiling {ceiling}")
        if config.chunk_bytes < step:
            out.append(f"chunk_bytes {config.chunk_bytes} below one {step}-byte step of {config.nthreads} threads")
        grain = LL128_GRAIN if s.proto is Proto.LL128 else GRAIN_BYTES[s.proto]
        if config.chunk_bytes % grain:
            out.append(f"chunk_bytes {config.chunk_bytes} is not a multiple of the {s.proto} grain {grain}")
        return out

    def validate(self, config: Config) -> Config:
        """``config`` itself, or :class:`ConfigError` with every reason it is refused."""
        problems = self.problems(config)
        if problems:
            raise ConfigError(f"{config} refused: " + "; ".join(problems))
        return config

    def __contains__(self, config: Config) -> bool:
        return not self.problems(config) and self.candidates(config.subspace).index(config) is not None

    def nearest(self, config: Config) -> Config:
        """The grid point of ``config``'s subspace nearest to it (for starting points off the grid)."""
        return self.candidates(config.subspace).nearest(config)

    @cached_property
    def fingerprint(self) -> str:
        """A short hash of everything that shapes the space (a saved search resumes only here)."""
        t = self.task
        f = self.fixed
        blob = {
            "task": [str(t.op), t.nbytes, t.nranks, t.dtype, t.group], "facts": self.facts.as_dict(),
            "knobs": sorted(k.value for k in self.knobs),
            "fixed": None if f is None else [str(f.algo), str(f.proto), str(f.transport), f.nchannels,
                                             f.nthreads, f.chunk_bytes],
        }
        return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]
