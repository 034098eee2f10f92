"""How far to unroll the sequential loops of a training iteration (a rollout's steps, GAE's
backward pass).

On a GPU each iteration of a compiled ``while`` loop costs tens of microseconds besides its
kernels (measured on an H200: about 60 us per rollout step, and 33 us per step of a GAE pass left
outside XLA's command buffers), as much as a small env's step itself; unrolling ``k`` steps into
one iteration pays that once per ``k``. On the CPU a loop iteration costs next to nothing and
unrolling only multiplies compile time, so loops stay rolled there.
"""

from __future__ import annotations

import jax

ACCELERATOR_UNROLL = 8


def loop_unroll(length: int) -> int:
    """``lax.scan``'s ``unroll`` for a sequential loop of ``length`` steps: 1 on the CPU, else
    ``ACCELERATOR_UNROLL`` (at most ``length``). Decided at trace time, from JAX's default backend."""
    if jax.default_backend() == "cpu":
        return 1
    return max(1, min(ACCELERATOR_UNROLL, int(length)))
