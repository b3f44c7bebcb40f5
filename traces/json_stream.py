"""Read one big array of a JSON object element by element, in bounded memory.

Profiler traces are one object whose ``traceEvents`` array holds millions of small events.
``stream_object`` walks the top level of such a document and hands each element of the
chosen array to a callback as soon as it is decoded, keeping only a window of the text;
the other top-level members are decoded whole and returned.  The standard library's C
decoder does the work, so no extra dependency is needed: all the complete elements in the
window at once where it can (``json.loads`` of the window up to its last element), else
one element at a time (``JSONDecoder.raw_decode``), which also places any error.  Files
ending in ``.gz`` are decompressed on the fly.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Callable
from typing import Any, TextIO

from traces.errors import TraceError

__all__ = ["open_text", "stream_object"]

_CHUNK = 1 << 20
_MAX_ELEMENT = 64 << 20  # a single element larger than this is taken as corrupt
_SPACE = re.compile(r"[ \t\n\r]*")
_NUMBER_TAIL = re.compile(r"[0-9.eE+-]*")
_ELEMENT_END = re.compile(r"[ \t\n\r]*[,\]]")
_DECODER = json.JSONDecoder()
_BATCH_MIN = 1 << 16  # below this many characters of complete elements, decode one at a time


def open_text(path: str) -> TextIO:
    """Open ``path`` as UTF-8 text, through gzip when the name ends in ``.gz``."""
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


class _Window:
    """A sliding window over a text stream: decode values at the cursor, read more when needed."""

    def __init__(self, file: TextIO, path: str):
        self.file, self.path = file, path
        self.text, self.pos, self.eof = "", 0, False
        self.batch_blocked_until = 0  # a batch up to here failed: decode singly past it

    def fail(self, problem: str) -> TraceError:
        return TraceError(problem, self.path)

    def _more(self) -> bool:
        if self.eof:
            return False
        try:
            chunk = self.file.read(_CHUNK)
        except (OSError, EOFError, UnicodeDecodeError, zlib.error) as err:
            raise self.fail(f"cannot read the file ({err})") from None
        if not chunk:
            self.eof = True
            return False
        self.batch_blocked_until = max(0, self.batch_blocked_until - self.pos)
        self.text = self.text[self.pos :] + chunk
        self.pos = 0
        return True

    def peek(self) -> str:
        """The next non-space character ('' at end of file)."""
        while True:
            self.pos = _SPACE.match(self.text, self.pos).end()
            if self.pos < len(self.text) or not self._more():
                return self.text[self.pos : self.pos + 1]

    def expect(self, char: str, where: str) -> None:
        found = self.peek()
        if found != char:
            raise self.fail(f"malformed JSON {where}: expected {char!r}, found {found or 'end of file'!r}")
        self.pos += 1

    def batch(self) -> list[Any] | None:
        """Decode every complete element from the cursor to the window's last ``}`` that ends one.

        Cutting just after a ``}`` that is followed by ``,`` or ``]`` and parsing the cut as an
        array either fails (the ``}`` closed a nested object or sat in a string) or yields
        exactly the elements the whole text holds there, since a prefix of valid JSON parses
        the same way.  Returns ``None`` (cursor unmoved) when that does not give a batch.
        """
        end = len(self.text)
        for _ in range(4):
            end = self.text.rfind("}", self.pos, end)
            if end - self.pos < _BATCH_MIN:
                return None
            if _ELEMENT_END.match(self.text, end + 1):
                break
        else:
            return None
        try:
            items = json.loads(f"[{self.text[self.pos : end + 1]}]")
        except (json.JSONDecodeError, RecursionError):
            self.batch_blocked_until = end + 1
            return None
        self.pos = end + 1
        return items

    def value(self, where: str) -> Any:
        self.peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as err:
                if len(self.text) - self.pos > _MAX_ELEMENT:
                    raise self.fail(f"malformed JSON {where}: {err.msg}") from None
                if not self._more():
                    problem = (
                        "truncated"
                        if err.pos >= len(self.text) - 1 or "Unterminated" in err.msg
                        else "malformed"
                    )
                    raise self.fail(f"{problem} JSON {where}: {err.msg}") from None
                continue
            except RecursionError:
                raise self.fail(f"JSON nested too deeply {where}") from None
            # A value that reaches the end of the window may continue in the next chunk (a number).
            if _NUMBER_TAIL.fullmatch(self.text, end) and self._more():
                continue
            self.pos = end
            return value


def stream_object(path: str, array_key: str, on_item: Callable[[Any], None]) -> dict[str, Any]:
    """Call ``on_item`` on each element of the top-level array ``array_key``; return the other members.

    Raises ``TraceError`` for malformed or truncated JSON, a top level that is not an object,
    or a missing ``array_key``.
    """
    try:
        file = open_text(path)
    except OSError as err:
        raise TraceError(f"cannot open ({err.strerror})", path) from None
    with file:
        window = _Window(file, path)
        others: dict[str, Any] = {}
        found = False
        window.expect("{", "at the start of the file")
        if window.peek() == "}":
            window.pos += 1
        else:
            while True:
                key = window.value("for a top-level key")
                if not isinstance(key, str):
                    raise window.fail("malformed JSON: a top-level key is not a string")
                window.expect(":", f"after key {key!r}")
                if key == array_key and window.peek() == "[":
                    found = True
                    _stream_array(window, array_key, on_item)
                else:
                    others[key] = window.value(f"in {key!r}")
                separator = window.peek()
                window.pos += 1
                if separator == "}":
                    break
                if separator != ",":
                    raise window.fail(f"malformed JSON after {key!r}: found {separator or 'end of file'!r}")
        if window.peek():
            raise window.fail("malformed JSON: text after the top-level object")
    if not found:
        raise TraceError(f"no {array_key!r} array", path)
    return others


def _stream_array(window: _Window, key: str, on_item: Callable[[Any], None]) -> None:
    window.expect("[", f"at {key!r}")
    if window.peek() == "]":
        window.pos += 1
        return
    index = 0
    while True:
        items = window.batch() if window.pos >= window.batch_blocked_until else None
        if items is None:
            on_item(window.value(f"in {key}[{index}]"))
            index += 1
        else:
            for item in items:
                on_item(item)
            index += len(items)
        separator = window.peek()
        window.pos += 1
        if separator == "]":
            return
        if separator != ",":
            raise window.fail(
                f"malformed JSON in {key!r} after element {index - 1}: found {separator or 'end of file'!r}"
            )
