"""MemoryChain-bsuite: remember a context bit from the first step until the last (bsuite's memory_chain)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import spaces, struct
from lamella.envs.bsuite import _render, _time
from lamella.envs.environment import Environment, StepOutput

__all__ = ["MemoryChain", "MemoryChainParams", "MemoryChainState"]


class MemoryChainState(struct.PyTreeNode):
    context: jax.Array  # int32 (num_bits,): the bits to remember, each 0 or 1
    query: jax.Array  # int32 (): index of the bit asked for at the end
    time: jax.Array  # int32 (): steps taken in this episode (bsuite's ``_timestep``)


class MemoryChainParams(struct.PyTreeNode):
    memory_length: int = struct.field(
        default=5, bounds=(1, None)
    )  # steps between seeing the context and being asked; >= 1


class MemoryChain(Environment[MemoryChainState, MemoryChainParams]):
    """See ``num_bits`` random bits once, answer a query about one of them at the end.

    Follows ``bsuite.environments.memory_chain.MemoryChain`` step for step.

    Observation: float32 ``(num_bits + 2,)``, computed from the step count
    *before* the step (as bsuite does, so the first step repeats the reset
    observation):

    * ``[0]`` time left, ``1 - time / memory_length``, in [0, 1];
    * ``[1]`` the query index, shown only when ``time == memory_length - 1``,
      else 0;
    * ``[2:]`` the context as ``2 * bit - 1`` (+1 or -1), shown only when
      ``time == 0``, else 0.

    bsuite's observation has shape ``(1, num_bits + 2)``; the leading singleton
    axis is dropped here (as in gymnax).

    Action: Discrete(2), int32 ``()``: the answer; only the last action counts.
    Reward: 0 on the first ``memory_length`` steps; on step ``memory_length + 1``
    +1 if the action equals ``context[query]``, else -1.
    Terminated: after ``memory_length + 1`` steps (bsuite ends with discount 0).
    Truncated: never.
    Reset: context bits i.i.d. fair coins, query uniform in ``0 .. num_bits - 1``,
    drawn from the reset key; ``time = 0``. The step ignores its key.
    State: :class:`MemoryChainState` (``context``, ``query``, ``time``).

    Args:
        num_bits: number of context bits (static: it sets the observation shape).
    """

    stochastic_step = False

    def __init__(self, num_bits: int = 1):
        if int(num_bits) < 1:
            raise ValueError(f"MemoryChain(num_bits={num_bits}): num_bits must be at least 1.")
        self.num_bits = int(num_bits)

    @property
    def default_params(self) -> MemoryChainParams:
        return MemoryChainParams()

    def reset_env(self, key: jax.Array, params: MemoryChainParams) -> tuple[jax.Array, MemoryChainState]:
        context = fast_random.bernoulli(key, 0.5, (self.num_bits,), stream=0).astype(jnp.int32)
        query = fast_random.randint(key, (), 0, self.num_bits, stream=1)
        state = MemoryChainState(context=context, query=query, time=jnp.zeros((), jnp.int32))
        return self.get_obs(state, params), state

    def step_env(
        self, key: jax.Array, state: MemoryChainState, action: Any, params: MemoryChainParams
    ) -> StepOutput:
        obs = self.get_obs(state, params)
        time = state.time + 1
        terminated = time > params.memory_length
        correct = jnp.asarray(action) == state.context[state.query]
        reward = jnp.where(terminated, jnp.where(correct, 1.0, -1.0), 0.0).astype(jnp.float32)
        state = MemoryChainState(context=state.context, query=state.query, time=time)
        return obs, state, reward, terminated, jnp.zeros((), jnp.bool_), {}

    def get_obs(self, state: MemoryChainState, params: MemoryChainParams) -> jax.Array:
        """The observation for ``state.time`` (see the class docstring)."""
        memory_length = jnp.asarray(params.memory_length)
        time_left = _time.time_left(memory_length, state.time)
        query = jnp.where(state.time == memory_length - 1, state.query, 0)
        context = jnp.where(state.time == 0, 2 * state.context - 1, 0)
        parts = [time_left[None], query[None], context]
        return jnp.concatenate([p.astype(jnp.float32) for p in parts])

    def observation_space(self, params: MemoryChainParams | None = None) -> spaces.Box:
        low = np.concatenate([[0.0, 0.0], -np.ones(self.num_bits)])
        high = np.concatenate([[1.0, self.num_bits - 1], np.ones(self.num_bits)])
        return spaces.Box(low, high, (self.num_bits + 2,), jnp.float32)

    def action_space(self, params: MemoryChainParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(2)

    def render(self, state: MemoryChainState, params: MemoryChainParams | None = None) -> jax.Array:
        """Three rows of cells: context bits (green 1, red 0), the queried bit (yellow), time used.

        The frame shows the hidden state (the context stays visible after the
        first step). Shape ``(72, 24 * max(num_bits, 8), 3)`` uint8.
        """
        params = self.default_params if params is None else params
        columns = max(self.num_bits, 8)
        pad = columns - self.num_bits
        table = _render.palette(
            [_render.BACKGROUND, _render.BAD, _render.GOOD, _render.TARGET, _render.AGENT]
        )
        bits = jnp.pad(1 + state.context, (0, pad))
        queried = jnp.pad(jnp.where(jnp.arange(self.num_bits) == state.query, 3, 0), (0, pad))
        progress = 4 * _render.progress_row(state.time / (jnp.asarray(params.memory_length) + 1), columns)
        labels = jnp.stack([bits, queried, progress])
        return _render.cells_to_frame(table[labels], 24)
