"""The schedule protocol: one leader per communicator decides, every rank installs the same rules.

Picture two ranks of a DDP job at their 7th optimizer step. The leader (communicator rank 0)
wants the 16 KiB AllReduce to try ring/LL128 next. It publishes round 7, "from occurrence 7 of
that key use ring/LL128 (version 8)", in the job's c10d store — never through the
communicator being tuned. The worker reads round 7, checks that it has not yet issued
occurrence 7 of that key, and acknowledges. The leader sees every acknowledgement before its
deadline and writes the round's outcome, ``commit``; both ranks install the rule and return to
training, and both run their 8th AllReduce with ring/LL128.

One round per iteration boundary, on every rank of the communicator, while tuning goes on:

* **leader**: publish ``r/<i>`` (the rules that change, each from the next occurrence of its
  key, plus ``final`` once nothing is left to tune), wait for ``a/<i>/<rank>`` from every
  worker until ``deadline_s``, then decide ``o/<i>``: ``commit`` if all acknowledged in time
  and none had already passed a rule's occurrence, else ``abort``;
* **worker**: wait for ``r/<i>`` until ``deadline_s``, acknowledge ``ok`` (or ``late``: it has
  already issued that occurrence), wait for ``o/<i>``;
* a rank installs a round's rules only when it reads ``commit``.

The outcome key is written once, with the store's atomic ``compare_set``: the leader writes
``commit`` or ``abort``, a worker that gave up waiting writes ``abort``, and whichever came first
is what every rank reads. So ranks decide only from committed state, never from their own
timing, and a round that is aborted (a rank late, slow or gone) changes nothing anywhere: the
leader proposes its rules again at the next round, from later occurrences (postponed for
everyone). A rule takes effect from the next call after the boundary, which no rank has issued
while it waits in the round (the check that it has not is the ``late`` acknowledgement).

When the leader stops publishing (its process hung or its tuner failed) the workers abort
``max_misses`` rounds in a row and then stop tuning the communicator with one message, as does
a leader whose worker stops acknowledging; whoever stops writes ``stop`` so that every rank
stops at its next boundary. The job goes on with the last committed schedule. After a
``final`` round commits there are no more rounds and boundaries cost nothing.

Keys live under ``ccltwin/<launch>/<comm>/`` so that a restarted launch sharing the store (a
torchrun restart) never reads an earlier launch's rounds.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from live.schedule import NCCL_DEFAULT, Fields, Rule, TaskKey, rules_from_json, rules_to_json

__all__ = ["Coordinator", "RoundResult"]

COMMIT, ABORT = "commit", "abort"


@dataclass(frozen=True, slots=True)
class RoundResult:
    """What one round did on this rank."""

    round: int
    outcome: str
    """``commit``, ``abort`` or ``none`` (nothing was proposed)."""
    installed: tuple[Rule, ...] = ()
    """Rules to install now (committed in this round)."""


class Coordinator:
    """One rank's side of the protocol for one communicator (see the module docstring).

    ``store`` is a c10d store (``set``, ``get``, ``check``, ``wait``, ``compare_set``); ``rank``
    and ``nranks`` are the communicator's, and its rank 0 leads. ``timeout_error`` is what the
    store's ``wait`` raises when its time is up; ``store_errors`` what it raises when it fails
    (then tuning stops).
    """

    def __init__(self, store: Any, *, comm: int, rank: int, nranks: int, launch: str, deadline_s: float = 10.0,
                 max_misses: int = 3, log: Callable[[str], None] = print, timeout_error: type = TimeoutError,
                 store_errors: tuple[type, ...] = ()):
        if not 0 <= rank < nranks:
            raise ValueError(f"rank {rank} is not in a communicator of {nranks} ranks")
        if deadline_s <= 0 or max_misses < 1:
            raise ValueError(f"deadline_s must be > 0 and max_misses >= 1, got {deadline_s}, {max_misses}")
        self.store = store
        self.comm = comm
        self.rank = rank
        self.nranks = nranks
        self.prefix = f"ccltwin/{launch}/{comm:016x}/"
        self.deadline_s = deadline_s
        self.max_misses = max_misses
        self.log = log
        self.timeout_error = timeout_error
        self.store_errors = store_errors
        self.stopped: str | None = None
        """Why tuning of this communicator stopped (``None`` while it goes on)."""
        self.final = False
        """A final round committed: the schedule will not change again."""
        self.aborted = 0
        self._misses = 0
        self._wanted: dict[TaskKey, Fields] = {}
        self.committed: dict[TaskKey, Rule] = {}
        """Leader: the last committed rule of every key."""

    @property
    def leader(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        """Rounds still run at boundaries."""
        return self.stopped is None and not self.final

    def want(self, key: TaskKey, fields: Fields) -> None:
        """Leader: from the next committed round on, run ``key`` with these rule fields."""
        self._wanted[key] = fields

    def committed_fields(self, key: TaskKey) -> tuple[Fields, int]:
        """Leader: the rule fields in force for ``key`` and their version (NCCL's own choice,
        version 0, before any rule)."""
        rule = self.committed.get(key)
        return (NCCL_DEFAULT, 0) if rule is None else (rule.fields, rule.version)

    def exchange(self, i: int, counts: Mapping[TaskKey, int], *, final: bool = False) -> RoundResult:
        """Run round ``i`` (the job's boundary number: every rank numbers boundaries alike, and
        a rank that starts later joins at its first one); ``counts`` are the calls of each key
        this rank has issued (its next occurrence); ``final`` (leader) ends tuning once it commits."""
        if not self.active:
            return RoundResult(i, "none")
        try:
            if self._get_stop():
                return RoundResult(i, "none")
            result = self._lead(i, counts, final) if self.leader else self._follow(i, counts)
        except self.store_errors as err:
            self._stop(f"the c10d store failed ({err}".splitlines()[0] + ")", publish=False)
            return RoundResult(i, "none")
        if result.outcome == ABORT:
            self.aborted += 1
        return result

    # ---- the two sides --------------------------------------------------------------------

    def _lead(self, i: int, counts: Mapping[TaskKey, int], final: bool) -> RoundResult:
        version = i + 1
        rules = [Rule(k, counts.get(k, 0), f, version) for k, f in sorted(self._wanted.items())
                 if self.committed_fields(k)[0] != f]
        self.store.set(self._key("r", i), json.dumps({"rules": rules_to_json(rules), "final": final}))
        if not rules and not final:
            return RoundResult(i, "none")
        acks = [self._key("a", i, r) for r in range(1, self.nranks)]
        arrived = self._wait_each(acks, self.deadline_s)
        late = [r for r, key in enumerate(acks, 1) if key not in arrived or arrived[key] != "ok"]
        outcome = self._decide(i, ABORT if late else COMMIT)
        if outcome == COMMIT:
            self._misses = 0
            self.committed.update((r.key, r) for r in rules)
            self.final = final
            return RoundResult(i, COMMIT, tuple(rules))
        self._misses += 1
        if self._misses >= self.max_misses:
            who = ", ".join(map(str, late)) or "a worker"
            self._stop(f"rank(s) {who} of the communicator did not acknowledge {self._misses} rounds in a row")
        return RoundResult(i, ABORT)

    def _follow(self, i: int, counts: Mapping[TaskKey, int]) -> RoundResult:
        published = self._wait_each([self._key("r", i)], self.deadline_s)
        if not published:
            outcome = self._decide(i, ABORT)
            self._misses += 1
            if self._misses >= self.max_misses:
                self._stop(f"the leader published nothing for {self._misses} rounds in a row")
            if outcome != COMMIT:
                return RoundResult(i, ABORT)
            published = {self._key("r", i): self.store.get(self._key("r", i)).decode()}
        self._misses = 0
        message = json.loads(next(iter(published.values())))
        rules = rules_from_json(message["rules"])
        if not rules and not message["final"]:
            return RoundResult(i, "none")
        passed = [r for r in rules if counts.get(r.key, 0) > r.from_occurrence]
        self.store.set(self._key("a", i, self.rank), "ok" if not passed else f"late: {passed[0].key}")
        done = self._wait_each([self._key("o", i)], self.deadline_s + 1.0)
        outcome = done.get(self._key("o", i)) or self._decide(i, ABORT)
        if outcome != COMMIT:
            return RoundResult(i, ABORT)
        self.final = bool(message["final"])
        return RoundResult(i, COMMIT, tuple(rules))

    # ---- the store ----------------------------------------------------------------------------

    def _key(self, *parts: Any) -> str:
        return self.prefix + "/".join(map(str, parts))

    def _decide(self, i: int, proposed: str) -> str:
        """The outcome of round ``i``: ``proposed`` unless another rank decided first."""
        return self.store.compare_set(self._key("o", i), "", proposed).decode()

    def _wait_each(self, keys: list[str], timeout_s: float) -> dict[str, str]:
        """Values of the ``keys`` that exist within ``timeout_s`` (all of them, or those that came)."""
        with contextlib.suppress(self.timeout_error):  # some did not come: read those that did
            self.store.wait(keys, timedelta(seconds=timeout_s))
        present = [k for k in keys if self.store.check([k])]
        return dict(zip(present, (v.decode() for v in self.store.multi_get(present)), strict=True)) if present else {}

    def _get_stop(self) -> bool:
        key = self._key("stop")
        if self.store.check([key]):
            self._stop(self.store.get(key).decode(), publish=False)
            return True
        return False

    def stop(self, reason: str) -> None:
        """Stop tuning this communicator on every rank: each stops at its next round."""
        if self.active:
            try:
                self._stop(reason)
            except self.store_errors as err:
                self.stopped = f"{reason}; the store could not tell the others ({err})".splitlines()[0]

    def _stop(self, reason: str, *, publish: bool = True) -> None:
        if publish:
            reason = self.store.compare_set(self._key("stop"), "", reason).decode()
        self.stopped = reason
        self.log(f"ccltwin live: tuning of communicator {self.comm:#x} stopped: {reason}; "
                 "the last committed schedule stays in force")
