"""How far to unroll the sequential loops of a training iteration (a rollout's steps, GAE's
backward pass).

On a GPU each iteration of a compiled ``while`` loop costs tens of microseconds besides its
kernels (measured on an H200: about 60 us per rollout step, and 33 us per step of a GAE pass left
outside XLA's command buffers), as much as a small env's step itself; unrolling ``k`` steps into
one iteration pays that once per ``k``. On the CPU a loop iteration costs next to nothing and
unrolling only multiplies compile time, so loops stay rolled there.

How a loop stores its per-step outputs (:func:`packed_scan`): as one array a step, on every
backend (on the CPU it changes nothing measurable; on an H200 it is what let the env's sparse-reset
branch go, see lamella-marl's docs/speed-ippo.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

ACCELERATOR_UNROLL = 8


def loop_unroll(length: int) -> int:
    """``lax.scan``'s ``unroll`` for a sequential loop of ``length`` steps: 1 on the CPU, else
    ``ACCELERATOR_UNROLL`` (at most ``length``). Decided at trace time, from JAX's default backend."""
    if jax.default_backend() == "cpu":
        return 1
    return max(1, min(ACCELERATOR_UNROLL, int(length)))


# Steps per loop iteration of a recurrent core's scan over a sequence (``RecurrentCore``: the BPTT
# update's 128-step passes, forward and backward) on an accelerator. 1, a rolled loop, until it is
# measured there: ``benchmarks/marl_ippo_gpu_loops.py --recurrent-unroll 1,8`` times rec_ippo with
# each value. On the CPU the scan stays rolled whatever this says.
RECURRENT_UNROLL = 1


def recurrent_unroll() -> int:
    """``lax.scan``'s ``unroll`` for a recurrent core's scan: 1 on the CPU, else ``RECURRENT_UNROLL``
    (a scan shorter than that is unrolled whole). Decided at trace time, from JAX's default backend."""
    if jax.default_backend() == "cpu":
        return 1
    return max(1, int(RECURRENT_UNROLL))


# Whether ``packed_scan`` packs a loop's per-step outputs into one array (a switch for A/B
# measurements; the shipped programs pack).
PACK_OUTPUTS = True

_PACKABLE = (jnp.dtype(bool), jnp.dtype(jnp.int32), jnp.dtype(jnp.uint32), jnp.dtype(jnp.float32))


def packed_scan(
    body: Callable[[Any, Any], tuple[Any, Any]], init: Any, xs: Any, *, batch: int, unroll: int = 1
) -> tuple[Any, Any]:
    """``lax.scan(body, init, xs, unroll=unroll)`` whose per-step outputs are written as one array.

    A scan stacks each output leaf into its own buffer, one write per leaf and step; on a GPU each
    write is a copy of its own (about 1 us, a dozen a rollout step: a quarter of a small env's
    step). Here every output leaf with leading axis ``batch`` and a 32-bit or bool dtype is
    flattened to ``(batch, n)``, reinterpreted bit for bit as uint32 (bools as 0/1) and
    concatenated, so a step writes one ``(batch, sum n)`` slice; after the loop the stack is cut
    back into the leaves. Other leaves are stacked as ``lax.scan`` stacks them. The result is the
    same pytree, bit for bit.
    """
    if not PACK_OUTPUTS:
        return jax.lax.scan(body, init, xs, unroll=unroll)
    layout: list[Any] = []

    def step(carry: Any, x: Any) -> tuple[Any, Any]:
        carry, out = body(carry, x)
        leaves, treedef = jax.tree.flatten(out)
        packable = [_packable(leaf, batch) for leaf in leaves]
        layout[:] = [treedef, [(leaf.shape, leaf.dtype) for leaf in leaves], packable]
        parts = [_to_words(leaf, batch) for leaf, ok in zip(leaves, packable, strict=True) if ok]
        words = jnp.concatenate(parts, axis=1) if parts else jnp.zeros((batch, 0), jnp.uint32)
        return carry, (words, [leaf for leaf, ok in zip(leaves, packable, strict=True) if not ok])

    carry, (words, others) = jax.lax.scan(step, init, xs, unroll=unroll)
    treedef, specs, packable = layout
    leaves, start, rest = [], 0, iter(others)
    for (shape, dtype), ok in zip(specs, packable, strict=True):
        if not ok:
            leaves.append(next(rest))
            continue
        size = math.prod(shape[1:])
        leaves.append(_from_words(words[..., start : start + size], words.shape[:1] + tuple(shape), dtype))
        start += size
    return carry, jax.tree.unflatten(treedef, leaves)


def _packable(leaf: jax.Array, batch: int) -> bool:
    return leaf.ndim >= 1 and leaf.shape[0] == batch and jnp.dtype(leaf.dtype) in _PACKABLE


def _to_words(leaf: jax.Array, batch: int) -> jax.Array:
    flat = leaf.reshape((batch, -1))
    if flat.dtype == jnp.bool_:
        return flat.astype(jnp.uint32)
    return jax.lax.bitcast_convert_type(flat, jnp.uint32)


def _from_words(words: jax.Array, shape: tuple[int, ...], dtype: Any) -> jax.Array:
    if jnp.dtype(dtype) == jnp.bool_:
        return (words != 0).reshape(shape)
    return jax.lax.bitcast_convert_type(words, dtype).reshape(shape)
