"""UmbrellaChain-bsuite: credit assignment over a chain with noisy rewards (bsuite's umbrella_chain)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from lamella.envs import random as fast_random
from lamella.envs import spaces, struct
from lamella.envs.bsuite import _render, _time
from lamella.envs.environment import Environment, StepOutput

__all__ = ["UmbrellaChain", "UmbrellaChainParams", "UmbrellaChainState"]


class UmbrellaChainState(struct.PyTreeNode):
    need_umbrella: jax.Array  # int32 (): 1 if it will rain at the end of the chain
    has_umbrella: jax.Array  # int32 (): 1 if the agent holds an umbrella (set by the first action)
    time: jax.Array  # int32 (): steps taken in this episode


class UmbrellaChainParams(struct.PyTreeNode):
    chain_length: int = struct.field(default=10, bounds=(1, None))  # steps per episode; >= 1


class UmbrellaChain(Environment[UmbrellaChainState, UmbrellaChainParams]):
    """Only the first action matters (take the umbrella or not); the reward comes at the end.

    Follows ``bsuite.environments.umbrella_chain.UmbrellaChain`` step for step.

    Observation: float32 ``(3 + n_distractor,)`` (bsuite's ``(1, 3 + n)``
    without the leading singleton axis):

    * ``[0]`` need_umbrella (0 or 1);
    * ``[1]`` has_umbrella (0 or 1);
    * ``[2]`` time left, ``1 - time / chain_length``;
    * ``[3:]`` distractor bits, fresh fair coins on every observation.

    Action: Discrete(2), int32 ``()``: on the first step, 1 takes the umbrella
    and 0 leaves it; later actions have no effect.
    Reward: on the last step +1 if ``has_umbrella == need_umbrella``, else -1;
    on every other step a fair random +1 or -1 (noise).
    Terminated: after ``chain_length`` steps (bsuite ends with discount 0).
    Truncated: never.
    Reset: need_umbrella and has_umbrella fair coins (bsuite draws both; the
    first action overwrites has_umbrella), ``time = 0``; all draws from the
    reset key. The step draws the noise reward and the distractors from its key.
    State: :class:`UmbrellaChainState` (``need_umbrella``, ``has_umbrella``, ``time``).

    Args:
        n_distractor: number of distractor bits (static: sets the observation shape).
    """

    def __init__(self, n_distractor: int = 0):
        if int(n_distractor) < 0:
            raise ValueError(f"UmbrellaChain(n_distractor={n_distractor}): must be >= 0.")
        self.n_distractor = int(n_distractor)

    @property
    def default_params(self) -> UmbrellaChainParams:
        return UmbrellaChainParams()

    def reset_env(self, key: jax.Array, params: UmbrellaChainParams) -> tuple[jax.Array, UmbrellaChainState]:
        coins = fast_random.bernoulli(key, 0.5, (2,), stream=0).astype(jnp.int32)
        state = UmbrellaChainState(
            need_umbrella=coins[0], has_umbrella=coins[1], time=jnp.zeros((), jnp.int32)
        )
        return self._observe(key, state, params), state

    def step_env(
        self, key: jax.Array, state: UmbrellaChainState, action: Any, params: UmbrellaChainParams
    ) -> StepOutput:
        time = state.time + 1
        has_umbrella = jnp.where(time == 1, jnp.asarray(action, jnp.int32), state.has_umbrella)
        terminated = time == params.chain_length
        noise = jnp.where(fast_random.bernoulli(key, 0.5, stream=0), 1.0, -1.0)
        final = jnp.where(has_umbrella == state.need_umbrella, 1.0, -1.0)
        reward = jnp.where(terminated, final, noise).astype(jnp.float32)
        state = UmbrellaChainState(need_umbrella=state.need_umbrella, has_umbrella=has_umbrella, time=time)
        return self._observe(key, state, params), state, reward, terminated, jnp.zeros((), jnp.bool_), {}

    def get_obs(
        self, state: UmbrellaChainState, params: UmbrellaChainParams, distractors: Any = None
    ) -> jax.Array:
        """The observation of ``state`` with the given distractor bits (zeros when None)."""
        if distractors is None:
            distractors = jnp.zeros((self.n_distractor,), jnp.float32)
        time_left = _time.time_left(params.chain_length, state.time)
        head = jnp.stack([state.need_umbrella, state.has_umbrella, time_left]).astype(jnp.float32)
        return jnp.concatenate([head, jnp.asarray(distractors, jnp.float32)])

    def _observe(self, key: jax.Array, state: UmbrellaChainState, params: UmbrellaChainParams) -> jax.Array:
        if self.n_distractor == 0:
            return self.get_obs(state, params)
        distractors = fast_random.bernoulli(key, 0.5, (self.n_distractor,), stream=1)
        return self.get_obs(state, params, distractors)

    def observation_space(self, params: UmbrellaChainParams | None = None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (3 + self.n_distractor,), jnp.float32)

    def action_space(self, params: UmbrellaChainParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(2)

    def render(self, state: UmbrellaChainState, params: UmbrellaChainParams | None = None) -> jax.Array:
        """Row 1: need umbrella, has umbrella (green 1, red 0). Row 2: time used (blue).

        Shape ``(48, 192, 3)`` uint8.
        """
        params = self.default_params if params is None else params
        table = _render.palette([_render.BACKGROUND, _render.BAD, _render.GOOD, _render.AGENT])
        flags = (
            jnp.zeros((8,), jnp.int32).at[0].set(1 + state.need_umbrella).at[1].set(1 + state.has_umbrella)
        )
        progress = 3 * _render.progress_row(state.time / jnp.asarray(params.chain_length), 8)
        return _render.cells_to_frame(table[jnp.stack([flags, progress])], 24)
