"""Keep a value computed once per env under ``vmap`` on CPU (integer and bool state).

XLA's CPU fusion copies cheap integer arithmetic into every fusion that reads it; a step whose
new state is read by a large elementwise consumer (an observation grid) then runs once per cell.
:func:`computed_once` stops that without changing a bit of the values.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["computed_once"]


def computed_once(*trees: Any) -> tuple[Any, ...]:
    """``trees`` unchanged, bit for bit, with each integer or bool array computed by one fusion.

    XLA's CPU fusion treats integer arithmetic, compares and selects as cheap, and copies a
    cheap value into every loop fusion that reads it instead of storing it once. A MinAtar step
    is a few hundred such operations per env; under ``vmap`` its new state is read by the
    auto-reset selects and by the observation, a ``(10, 10, C)`` expansion, so without this the
    whole step ran once per observation cell (400 times per step in Breakout) whenever the
    observation was the step's only large reader (a training loop that ignores
    ``info["final_observation"]``).

    An integer division is one of the operations XLA does not copy, so ``x // 1`` keeps ``x`` (and
    everything computed only for it) in one fusion whose result the readers load. The divisor is
    a 1 XLA cannot see is 1 (``1 + 0 * x`` in float32, from an integer of the tree, always
    finite); dividing by it returns every integer unchanged. Bools go through int32 and back.
    """
    leaves, treedef = jax.tree.flatten(trees)
    if not leaves:
        return trees
    first = leaves[0]
    if not (jnp.issubdtype(first.dtype, jnp.integer) or first.dtype == jnp.bool_):
        raise TypeError(f"computed_once takes integer and bool arrays, got {first.dtype}.")
    one = (1.0 + 0.0 * jnp.ravel(first)[0].astype(jnp.float32)).astype(jnp.int32)
    out = []
    for x in leaves:
        if x.dtype == jnp.bool_:
            out.append(jax.lax.div(x.astype(jnp.int32), one) != 0)
        elif jnp.issubdtype(x.dtype, jnp.integer):
            out.append(jax.lax.div(x, one.astype(x.dtype)))
        else:
            raise TypeError(f"computed_once takes integer and bool arrays, got {x.dtype}.")
    return tuple(jax.tree.unflatten(treedef, out))
