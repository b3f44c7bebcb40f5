"""Where a benchmark finds the real files it reads, and the one-line error when they are missing.

The repository's copy (``tests/data``) comes first; a ``shared/data`` folder beside the clone is
the fallback; ``--data`` on each benchmark names any other folder laid out the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEARCHED = (ROOT / "tests" / "data", ROOT.parent / "shared" / "data")


def default_path(*parts: str) -> Path:
    """``parts`` under the first searched folder that has them (the repository's copy when neither does)."""
    return next((base.joinpath(*parts) for base in SEARCHED if base.joinpath(*parts).exists()),
                SEARCHED[0].joinpath(*parts))


def missing(problem: str) -> None:
    """Stop with ``problem`` on one line of stderr and exit status 2."""
    print(f"{Path(sys.argv[0]).name}: {problem}", file=sys.stderr)
    raise SystemExit(2)
