"""Say a thing once per process: notes a live job prints to stderr (which NCCL it found, plugin state).

>>> import io
>>> out = io.StringIO()
>>> say_once("doc-example", "hello", stream=out), say_once("doc-example", "hello", stream=out)
(True, False)
>>> out.getvalue()
'ccltwin live: hello\\n'
"""

from __future__ import annotations

import sys
from typing import TextIO

_SAID: set[str] = set()


def say_once(key: str, message: str, *, stream: TextIO | None = None) -> bool:
    """Print ``message`` the first time ``key`` is seen in this process; whether it printed."""
    if key in _SAID:
        return False
    _SAID.add(key)
    print(f"ccltwin live: {message}", file=stream or sys.stderr, flush=True)
    return True
