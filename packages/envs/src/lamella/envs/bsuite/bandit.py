"""SimpleBandit-bsuite: an 11-armed bandit with deterministic rewards (bsuite's bandit)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import spaces, struct
from lamella.envs.bsuite import _render
from lamella.envs.environment import Environment, StepOutput

__all__ = ["SimpleBandit", "SimpleBanditParams", "SimpleBanditState"]


class SimpleBanditState(struct.PyTreeNode):
    last_action: jax.Array  # int32 (): the arm pulled on the last step, -1 after a reset (for render)


class SimpleBanditParams(struct.PyTreeNode):
    rewards: jax.Array  # float32 (num_actions,): the deterministic reward of each arm


class SimpleBandit(Environment[SimpleBanditState, SimpleBanditParams]):
    """One-step episodes: pull an arm, get its fixed reward.

    Follows ``bsuite.environments.bandit.SimpleBandit``. The arm rewards are
    ``linspace(0, 1, num_actions)`` in a random order; the default params hold
    exactly bsuite's order for the same ``mapping_seed``
    (``np.random.RandomState(mapping_seed).choice(num_actions, num_actions,
    replace=False)``), and ``params.rewards`` can be replaced (or vmapped).

    Observation: float32 ``(1,)``, always 1.0 (bsuite's ``(1, 1)`` without the
    leading singleton axis).
    Action: Discrete(num_actions), int32 ``()``: the arm.
    Reward: ``params.rewards[action]``.
    Terminated: after every step (bsuite ends with discount 0).
    Truncated: never.
    Reset: deterministic; neither reset nor step uses its key.
    State: :class:`SimpleBanditState` (``last_action``, only for rendering).

    Args:
        num_actions: number of arms (static), >= 1.
        mapping_seed: NumPy seed of the default reward order (bsuite's
            ``mapping_seed``; bsuite's default None draws an unseeded one).
    """

    stochastic_step = False

    def __init__(self, num_actions: int = 11, mapping_seed: int = 0):
        if int(num_actions) < 1:
            raise ValueError(f"SimpleBandit(num_actions={num_actions}): need at least one arm.")
        self.num_actions = int(num_actions)
        self.mapping_seed = mapping_seed

    @property
    def default_params(self) -> SimpleBanditParams:
        order = np.random.RandomState(self.mapping_seed).choice(
            range(self.num_actions), size=self.num_actions, replace=False
        )
        return SimpleBanditParams(
            rewards=jnp.asarray(np.linspace(0, 1, self.num_actions)[order], jnp.float32)
        )

    def reset_env(self, key: jax.Array, params: SimpleBanditParams) -> tuple[jax.Array, SimpleBanditState]:
        return self.get_obs(), SimpleBanditState(last_action=jnp.full((), -1, jnp.int32))

    def step_env(
        self, key: jax.Array, state: SimpleBanditState, action: Any, params: SimpleBanditParams
    ) -> StepOutput:
        action = jnp.asarray(action, jnp.int32)
        reward = jnp.asarray(params.rewards, jnp.float32)[action]
        return (
            self.get_obs(),
            SimpleBanditState(last_action=action),
            reward,
            jnp.ones((), jnp.bool_),
            jnp.zeros((), jnp.bool_),
            {},
        )

    def get_obs(self, state: Any = None, params: Any = None) -> jax.Array:
        """The constant observation ``[1.0]``."""
        return jnp.ones((1,), jnp.float32)

    def observation_space(self, params: SimpleBanditParams | None = None) -> spaces.Box:
        return spaces.Box(1.0, 1.0, (1,), jnp.float32)

    def action_space(self, params: SimpleBanditParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(self.num_actions)

    def render(self, state: SimpleBanditState, params: SimpleBanditParams | None = None) -> jax.Array:
        """A bar per arm, height = its reward; the last pulled arm in blue.

        Shape ``(240, 24 * num_actions, 3)`` uint8.
        """
        params = self.default_params if params is None else params
        heights = jnp.round(jnp.asarray(params.rewards) * 10)
        levels = 9 - jnp.arange(10)[:, None]
        bar = levels < heights[None, :]
        pulled = jnp.arange(self.num_actions)[None, :] == state.last_action
        labels = jnp.where(bar, jnp.where(pulled, 2, 1), 0)
        table = _render.palette([_render.BACKGROUND, _render.NEUTRAL, _render.AGENT])
        return _render.cells_to_frame(table[labels], 24)
