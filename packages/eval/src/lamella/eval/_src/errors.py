"""lamella-eval's user errors.

:class:`EvalError` is a ``ValueError`` marked as a member of the ``lamella`` command's
user-error family (``lamella.envs.errors.UserError``) by the class attribute
``lamella_user_error``, because lamella-eval's core does not depend on lamella-envs: run from
``lamella eval ...`` (or ``python -m lamella.eval ...``), it prints one line naming the problem
and the fix and exits with status 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

__all__ = ["EvalError", "EvalFileNotFoundError", "MissingExtraError", "one_or_many"]


class EvalError(ValueError):
    """Input lamella-eval cannot use (a run log, an option, a checkpoint); the message says how to fix it."""

    lamella_user_error = True


class EvalFileNotFoundError(EvalError, FileNotFoundError):
    """A path that does not exist or holds nothing lamella-eval can read."""


class MissingExtraError(EvalError, ImportError):
    """A feature whose optional dependencies are not installed; the message names the extra."""


def one_or_many(items: Any, where: str) -> list[Any]:
    """``items`` as a list, where one path or one text (``"runs/ppo"``, ``Path("runs/ppo")``) is a
    list of one: iterating over a string would read it one character at a time."""
    if isinstance(items, (str, os.PathLike)):
        return [items]
    if isinstance(items, bytes) or not isinstance(items, Iterable):
        raise EvalError(
            f"{where}: give a path or text, or a list of them, got {type(items).__name__} {items!r:.80}."
        )
    return list(items)
