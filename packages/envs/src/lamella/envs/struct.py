"""Frozen dataclasses that are JAX pytrees.

Every state and params container in lamella.envs is one of these: a frozen
``dataclasses.dataclass`` registered with ``jax.tree_util.register_dataclass``.
Fields are pytree leaves unless marked ``field(static=True)``, which makes them
part of the tree structure (hashable, never traced).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, TypeVar, dataclass_transform

import jax

__all__ = ["PyTreeNode", "dataclass", "field"]

T = TypeVar("T")


def field(
    *,
    static: bool = False,
    bounds: tuple[float | None, float | None] | None = None,
    above: float | None = None,
    below: float | None = None,
    finite: bool = False,
    **kwargs: Any,
) -> Any:
    """A dataclass field; ``static=True`` keeps it out of the traced leaves.

    ``bounds=(low, high)`` (either end None for no limit, both ends included) is the range a
    params field accepts; ``above`` and ``below`` are ends it must not reach (``above=0.0``:
    a length the step divides by; ``bounds=(0.0, None), below=1.0``: a discount in [0, 1)).
    :func:`lamella.envs.make` refuses an override outside the range, and
    :meth:`Environment.reset` concrete params outside it (``params.replace(length=0.0)``),
    naming the field and the range (``max_steps_in_episode: int = field(default=500,
    bounds=(1, None))``). ``finite=True`` closes the ends left open with -inf and inf, not
    reached (``field(default=0.05, above=0.0, finite=True)``: a time step, where inf makes the
    state NaN). It costs nothing in compiled code; traced values are not checked.
    """
    metadata = dict(kwargs.pop("metadata", {}) or {})
    metadata["static"] = static
    low, high = (None, None) if bounds is None else bounds
    if finite:
        above = -math.inf if above is None and low is None else above
        below = math.inf if below is None and high is None else below
    if (above is not None and low is not None) or (below is not None and high is not None):
        raise TypeError("field: give each end of the range once, in bounds or as above/below.")
    if bounds is not None or above is not None or below is not None:
        metadata["bounds"] = (low if above is None else above, high if below is None else below)
        metadata["open_bounds"] = (above is not None, below is not None)
    return dataclasses.field(metadata=metadata, **kwargs)


def _replace(self: T, **changes: Any) -> T:
    return dataclasses.replace(self, **changes)  # type: ignore[type-var]


@dataclass_transform(frozen_default=True, field_specifiers=(field, dataclasses.field))
def dataclass(cls: type[T] | None = None) -> Any:
    """Make ``cls`` a frozen dataclass registered as a pytree, with ``.replace(**changes)``."""

    def wrap(cls: type[T]) -> type[T]:
        cls = dataclasses.dataclass(frozen=True)(cls)
        data_fields: list[str] = []
        meta_fields: list[str] = []
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            (meta_fields if f.metadata.get("static", False) else data_fields).append(f.name)
        if not hasattr(cls, "replace"):
            cls.replace = _replace  # type: ignore[attr-defined]
        return jax.tree_util.register_dataclass(cls, data_fields=data_fields, meta_fields=meta_fields)

    if cls is None:
        return wrap
    return wrap(cls)


@dataclass_transform(frozen_default=True, field_specifiers=(field, dataclasses.field))
class PyTreeNode:
    """Base class form of :func:`dataclass`: ``class EnvState(struct.PyTreeNode): ...``.

    Subclasses are frozen dataclasses registered as pytrees, with a typed ``replace``.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclass(cls)

    def replace(self: T, **changes: Any) -> T:
        """A copy with ``changes`` applied (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]
