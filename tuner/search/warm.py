"""A warm-start plan as a search uses it: which subspaces to search, in what order, from where.

A plan entry (``tuner.plan.PlanEntry.warm_start``) lists ``(config, predicted time_us)`` per
subspace, fastest first, each config the predicted best resources of its subspace.
"""

from __future__ import annotations

import math

from tuner.config import Config
from tuner.space import ConfigSpace


def order_by_plan(space: ConfigSpace, warm_start: list[tuple[Config, float]], drop_ratio: float = math.inf
                  ) -> list[tuple[Config, float]]:
    """The plan's starting points that lie in ``space`` (snapped to its grid), fastest first,
    without those predicted slower than ``drop_ratio`` × the fastest.

    Subspaces the plan does not rank are left out: the twin found them invalid or slower than
    it could model.  A plan that ranks none of the space's subspaces is an error.
    """
    usable = [(space.nearest(c), t) for c, t in warm_start if c.subspace in space.subspaces]
    seen, starts = set(), []
    for config, t in sorted(usable, key=lambda ct: ct[1]):
        if config.subspace not in seen:
            seen.add(config.subspace)
            starts.append((config, t))
    if not starts:
        raise ValueError("the warm-start plan ranks none of this space's subspaces")
    fastest = starts[0][1]
    return [(c, t) for c, t in starts if t <= drop_ratio * fastest]
