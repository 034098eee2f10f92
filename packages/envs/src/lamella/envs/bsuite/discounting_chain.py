"""DiscountingChain-bsuite: choose a chain by how far away its reward is (bsuite's discounting_chain)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import spaces, struct
from lamella.envs.bsuite import _render
from lamella.envs.environment import Environment, StepOutput

__all__ = ["REWARD_TIMESTEPS", "DiscountingChain", "DiscountingChainParams", "DiscountingChainState"]

REWARD_TIMESTEPS = (1, 3, 10, 30, 100)  # the step on which chain i pays its reward
EPISODE_LENGTH = 100
# time / 100 as bsuite rounds it to float32 (get_obs computes it; a test holds it to this table).
# XLA would turn a division by the constant 100 into a multiplication by 0.01, one ulp off for
# some steps.
_TIME_FRACTION = np.arange(EPISODE_LENGTH + 1, dtype=np.float32) / np.float32(EPISODE_LENGTH)


class DiscountingChainState(struct.PyTreeNode):
    context: jax.Array  # int32 (): the chosen chain (the first action), -1 before the first step
    time: jax.Array  # int32 (): steps taken in this episode


class DiscountingChainParams(struct.PyTreeNode):
    mapping_seed: int = 0  # chain ``mapping_seed % 5`` pays 1.1 instead of 1.0


class DiscountingChain(Environment[DiscountingChainState, DiscountingChainParams]):
    """The first action picks one of 5 chains; chain i pays its reward after 1, 3, 10, 30 or 100 steps.

    Follows ``bsuite.environments.discounting_chain.DiscountingChain`` step for step.

    Observation: float32 ``(2,)`` (bsuite's ``(1, 2)`` without the leading
    singleton axis): ``[0]`` the chosen chain (-1 before the first step),
    ``[1]`` ``time / 100``.
    Action: Discrete(5), int32 ``()``: the first action chooses the chain;
    later actions have no effect.
    Reward: on step ``REWARD_TIMESTEPS[chain]`` (1, 3, 10, 30, 100) the chain's
    reward, 1.0, or 1.1 for chain ``mapping_seed % 5``; 0 on every other step.
    Terminated: after 100 steps (bsuite ends with discount 0).
    Truncated: never.
    Reset: chain -1, time 0 (deterministic; neither reset nor step uses its key).
    State: :class:`DiscountingChainState` (``context``, ``time``).

    bsuite draws the bonus chain at random when ``mapping_seed`` is None; here
    the default is 0 (as gymnax), and the seed is a traced param so a batch
    of envs can differ in it.
    """

    stochastic_step = False
    cheap_done = True  # done is `time == 100`: recomputing it beats storing it (see Environment)

    @property
    def default_params(self) -> DiscountingChainParams:
        return DiscountingChainParams()

    def reset_env(
        self, key: jax.Array, params: DiscountingChainParams
    ) -> tuple[jax.Array, DiscountingChainState]:
        state = DiscountingChainState(context=jnp.full((), -1, jnp.int32), time=jnp.zeros((), jnp.int32))
        return self.get_obs(state), state

    def step_env(
        self, key: jax.Array, state: DiscountingChainState, action: Any, params: DiscountingChainParams
    ) -> StepOutput:
        context = jnp.where(state.time == 0, jnp.asarray(action, jnp.int32), state.context)
        time = state.time + 1
        # A chain of selects over the five chains: a gather from a table is scalarised on CPU.
        paid_at = jnp.full((), REWARD_TIMESTEPS[0], jnp.int32)
        for chain, paid in enumerate(REWARD_TIMESTEPS[1:], start=1):
            paid_at = jnp.where(context == chain, paid, paid_at)
        bonus = context == jnp.asarray(params.mapping_seed) % len(REWARD_TIMESTEPS)
        reward = jnp.where(time == paid_at, jnp.where(bonus, 1.1, 1.0), 0.0).astype(jnp.float32)
        state = DiscountingChainState(context=context, time=time)
        terminated = time == EPISODE_LENGTH
        return self.get_obs(state), state, reward, terminated, jnp.zeros((), jnp.bool_), {}

    def get_obs(
        self, state: DiscountingChainState, params: DiscountingChainParams | None = None
    ) -> jax.Array:
        """``[chain, time / 100]``."""
        # float32(time) / float32(100), correctly rounded as bsuite's (_TIME_FRACTION), computed
        # instead of gathered (a gather is scalarised on CPU). The divisor is a 100 XLA cannot
        # see: it would multiply by 0.01 instead, one ulp off for some steps.
        # Built elementwise over the two entries (selects on the entry's index) rather than as a
        # stack: under vmap a stack is built as (2, envs) and transposed into (envs, 2), a
        # strided copy per step. The division runs on both entries (the chain's is kept
        # undivided) so that its divisor is not a broadcast, which XLA would turn into a
        # multiplication by a reciprocal (one ulp off, as above).
        first = jnp.arange(2) == 0
        time = jnp.clip(state.time, 0, EPISODE_LENGTH).astype(jnp.float32)
        entries = jnp.where(first, state.context.astype(jnp.float32), time)
        return jnp.where(first, entries, entries / (EPISODE_LENGTH + 0.0 * entries))

    def observation_of(
        self, state: DiscountingChainState, params: DiscountingChainParams | None = None
    ) -> jax.Array:
        """The observation of ``state`` (:meth:`get_obs`): ``AutoReset`` builds the returned
        observation from the selected state (2 numbers per env) instead of selecting between the
        step's and the reset's observations; at 1024 envs 1.4x as many steps per second."""
        return self.get_obs(state, params)

    def observation_space(self, params: DiscountingChainParams | None = None) -> spaces.Box:
        return spaces.Box(
            np.array([-1.0, 0.0]), np.array([len(REWARD_TIMESTEPS) - 1.0, 1.0]), (2,), jnp.float32
        )

    def action_space(self, params: DiscountingChainParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(len(REWARD_TIMESTEPS))

    def render(self, state: DiscountingChainState, params: DiscountingChainParams | None = None) -> jax.Array:
        """Row 1: the 5 chains (chosen blue, bonus chain yellow outline row). Row 2: time used.

        Shape ``(72, 240, 3)`` uint8.
        """
        params = self.default_params if params is None else params
        chains = jnp.arange(10)
        chosen = jnp.where(chains == state.context, 3, jnp.where(chains < len(REWARD_TIMESTEPS), 4, 0))
        bonus = jnp.where(chains == jnp.asarray(params.mapping_seed) % len(REWARD_TIMESTEPS), 2, 0)
        progress = 3 * _render.progress_row(state.time / np.float32(EPISODE_LENGTH), 10)
        table = _render.palette(
            [_render.BACKGROUND, _render.BAD, _render.TARGET, _render.AGENT, _render.NEUTRAL]
        )
        return _render.cells_to_frame(table[jnp.stack([chosen, bonus, progress])], 24)
