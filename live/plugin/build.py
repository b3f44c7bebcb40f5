"""Compile the plugin with the system C compiler on first use, into a cache keyed by its source.

The library lands in ``$XDG_CACHE_HOME/ccltwin/plugin/<key>/libccltwin-live.so`` (``~/.cache``
without ``XDG_CACHE_HOME``), where ``<key>`` is the SHA-256 of the sources, the compiler's name
and the flags, so an edited source or another compiler builds anew and an unchanged one is reused.
Ranks that start together may all call :func:`build`: one compiles under a file lock, into a
temporary name renamed into place, and the others find the finished library.

>>> key_of(b"int x;", "cc") == key_of(b"int x;", "cc") != key_of(b"int y;", "cc")
True
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent
SOURCES = ("ccltwin_live.c", "ccltwin_live.h", "abi.h")
LIBRARY = "libccltwin-live.so"
CFLAGS = ("-std=gnu11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror", "-pthread")
COMPILERS = ("cc", "gcc", "clang")


class PluginBuildError(ValueError):
    """The plugin cannot be built here (no C compiler, or the compiler refused the source)."""


def source_bytes() -> bytes:
    """The plugin's sources, concatenated in a fixed order (what the cache key hashes)."""
    return b"".join((SOURCE_DIR / name).read_bytes() for name in SOURCES)


def key_of(source: bytes, compiler: str, flags: tuple[str, ...] = CFLAGS) -> str:
    """The cache key: SHA-256 of the sources, the compiler's name and the flags."""
    digest = hashlib.sha256(source)
    digest.update("\0".join((Path(compiler).name, *flags)).encode())
    return digest.hexdigest()


def cache_root(env: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_CACHE_HOME/ccltwin/plugin``, or ``~/.cache/ccltwin/plugin``."""
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ccltwin" / "plugin"


def find_compiler(env: Mapping[str, str] = os.environ) -> str:
    """``$CC`` if set, else the first of cc, gcc, clang on ``PATH``; a one-line error naming all tried."""
    tried = ([env["CC"]] if env.get("CC") else []) + list(COMPILERS)
    for name in tried:
        found = shutil.which(name, path=env.get("PATH"))
        if found:
            return found
    raise PluginBuildError(f"cannot build the ccltwin live plugin: no C compiler found (tried {', '.join(tried)}); "
                           "install gcc or set CC")


def build(env: Mapping[str, str] = os.environ) -> Path:
    """The path of the compiled plugin, compiling it first if this source was never built here."""
    compiler = find_compiler(env)
    target = cache_root(env) / key_of(source_bytes(), compiler) / LIBRARY
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():  # another rank may have finished it while we waited
            _compile(compiler, target)
    return target


def _compile(compiler: str, target: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        cmd = [compiler, *CFLAGS, "-o", tmp, str(SOURCE_DIR / "ccltwin_live.c")]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode:
            first = (done.stderr.strip().splitlines() or ["(no output)"])[0]
            raise PluginBuildError(f"{SOURCE_DIR / 'ccltwin_live.c'}: {Path(compiler).name} failed "
                                   f"(exit {done.returncode}): {first}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
