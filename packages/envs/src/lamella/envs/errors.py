"""The user-error family of the ``lamella`` command.

A *user error* is a mistake the user can fix (a wrong argument, a file in the wrong shape, a
checkpoint that does not fit an env): the ``lamella`` command prints its message as one line on
stderr and exits with status 2, without a traceback (``lamella --debug ...`` shows it). Every other
exception is a bug and keeps its traceback.

The family is :class:`UserError` and its subclasses. A package that cannot depend on lamella-envs
(lamella-eval's core, for one) joins the family without importing it by setting the class
attribute ``lamella_user_error = True`` on its error class: ``isinstance(error, UserError)`` is
then true. ``except UserError`` does not see such classes (Python's ``except`` ignores virtual
subclasses), so code that handles the family catches ``Exception`` and tests
:func:`is_user_error`.

Messages name the problem and the fix, in one sentence or two: ``Unknown metric 'retrun' in
runs/ppo/metrics.json; available: mean_episode_return, episode_length.``
"""

from __future__ import annotations

import abc
from typing import Any

__all__ = ["MissingExtraError", "UserError", "is_user_error"]


class UserError(Exception, metaclass=abc.ABCMeta):
    """A mistake the user can fix; the ``lamella`` command prints the message and exits with 2.

    Subclass it together with the builtin the error would otherwise be (``class
    ConfigError(UserError, ValueError)``), so code catching ``ValueError`` keeps working.
    """

    @classmethod
    def __subclasshook__(cls, subclass: type) -> Any:
        if cls is UserError and any(
            getattr(k, "lamella_user_error", False) is True for k in subclass.__mro__
        ):
            return True
        return NotImplemented


class MissingExtraError(UserError, ImportError):
    """An optional dependency is not installed; the message names the extra that installs it
    (``pip install 'lamella-envs[render]'``)."""


def is_user_error(error: BaseException) -> bool:
    """Whether ``error`` belongs to the family (a :class:`UserError` subclass or a marked class)."""
    return isinstance(error, UserError)
