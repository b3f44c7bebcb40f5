"""The one place bad input becomes a message: every command of ``ccltwin`` runs under ``App``.

A ``CcltwinError`` (a file, an option or a value the user can fix) or an ``OSError`` (a file
that cannot be read or written) becomes ``error: <message>`` on stderr and exit status 2;
anything else is a bug and keeps its traceback. A ``CcltwinWarning`` becomes ``warning: <message>``.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import typer

from traces.errors import CcltwinError, CcltwinWarning

__all__ = ["App", "one_line_errors"]


def one_line_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """``command`` with bad input turned into one line on stderr and exit status 2."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CcltwinWarning)
            try:
                return command(*args, **kwargs)
            except (CcltwinError, OSError) as err:
                typer.echo(f"error: {err}", err=True)
                raise typer.Exit(2) from None
            finally:
                for warning in caught:
                    if issubclass(warning.category, CcltwinWarning):
                        typer.echo(f"warning: {warning.message}", err=True)
                    else:
                        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)

    return run


class App(typer.Typer):
    """A Typer app whose every command runs under ``one_line_errors``."""

    def command(self, *args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        register = super().command(*args, **kwargs)

        def decorator(command: Callable[..., Any]) -> Callable[..., Any]:
            register(one_line_errors(command))
            return command

        return decorator
