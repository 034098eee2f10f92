"""Frozen dataclasses registered as JAX pytrees (buffers imports no other lamella package)."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar, dataclass_transform

import jax

T = TypeVar("T")


def field(*, static: bool = False, **kwargs: Any) -> Any:
    """A dataclass field; ``static=True`` keeps it out of the traced leaves."""
    metadata = dict(kwargs.pop("metadata", {}) or {})
    metadata["static"] = static
    return dataclasses.field(metadata=metadata, **kwargs)


def _replace(self: T, **changes: Any) -> T:
    return dataclasses.replace(self, **changes)  # type: ignore[type-var]


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def dataclass(cls: type[T]) -> type[T]:
    """Make ``cls`` a frozen dataclass registered as a pytree, with ``.replace(**changes)``."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    data_fields: list[str] = []
    meta_fields: list[str] = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        (meta_fields if f.metadata.get("static", False) else data_fields).append(f.name)
    if not hasattr(cls, "replace"):
        cls.replace = _replace  # type: ignore[attr-defined]
    return jax.tree_util.register_dataclass(cls, data_fields=data_fields, meta_fields=meta_fields)
