"""DeepSea-bsuite: a deep-exploration chain on an N x N grid (bsuite's deep_sea)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import spaces, struct
from lamella.envs.bsuite import _render
from lamella.envs.environment import Environment, StepOutput

__all__ = ["DeepSea", "DeepSeaParams", "DeepSeaState"]


class DeepSeaState(struct.PyTreeNode):
    row: jax.Array  # int32 (): depth, 0 at the top; equals size once the episode is over
    column: jax.Array  # int32 (): 0 at the left
    bad_episode: jax.Array  # bool (): left the optimal (diagonal) path this episode (bsuite's logging flag)


class DeepSeaParams(struct.PyTreeNode):
    action_mapping: jax.Array  # int32 (size, size): the action that moves right in each cell
    unscaled_move_cost: float = 0.01  # cost of moving right, times size


class DeepSea(Environment[DeepSeaState, DeepSeaParams]):
    """Descend an N x N grid from the top-left corner; the treasure is bottom-right.

    Follows ``bsuite.environments.deep_sea.DeepSea`` step for step.

    Every step moves one row down and one column left or right (clipped at the
    walls). Which action means "right" differs per cell: the
    ``params.action_mapping`` array (int32 ``(size, size)``) holds, for each
    cell, the action that moves right; the other action moves left. The mapping
    lives in params, not in the state: it is fixed for the env (as in bsuite,
    which draws it once at construction), and a batch of envs with different
    mappings is one ``vmap`` over params. The default params hold exactly the
    mapping bsuite draws for the same ``mapping_seed``
    (``np.random.RandomState(mapping_seed).binomial(1, 0.5, (size, size))``);
    :meth:`sample_action_mapping` draws a fresh one from a JAX key.

    Observation: float32 ``(size, size)``, 1.0 at the agent's cell; all zeros
    after the last step (the agent has left the grid), as bsuite.
    Action: Discrete(2), int32 ``()``; meaning per cell set by the mapping.
    Reward: ``-unscaled_move_cost / size`` on every step that chooses right;
    +1 on top when choosing right in the last column. In the stochastic
    variant, a standard normal noise is added when the step starts on the last
    row in the first or last column.
    Terminated: after ``size`` steps (bsuite ends with discount 0).
    Truncated: never.
    Reset: row 0, column 0 (deterministic; the key is unused).
    State: :class:`DeepSeaState` (``row``, ``column``, ``bad_episode``).

    Args:
        size: grid side N (static), >= 1.
        deterministic: if False, "right" fails (the column stays) with
            probability 1 / size and the corner rewards are noisy; the step
            then uses its key.
        mapping_seed: NumPy seed of the default action mapping (bsuite's
            ``mapping_seed``; bsuite's default None draws an unseeded one).
        randomize_actions: if False the default mapping is all ones (action 1
            is right everywhere), bsuite's debugging mode.
    """

    stochastic_step = False

    def __init__(
        self,
        size: int = 8,
        deterministic: bool = True,
        mapping_seed: int = 0,
        randomize_actions: bool = True,
    ):
        if int(size) < 1:
            raise ValueError(f"DeepSea(size={size}): size must be at least 1.")
        self.size = int(size)
        self.deterministic = bool(deterministic)
        self.mapping_seed = mapping_seed
        self.randomize_actions = bool(randomize_actions)
        self.stochastic_step = not self.deterministic  # type: ignore[misc]

    @property
    def default_params(self) -> DeepSeaParams:
        if self.randomize_actions:
            mapping = np.random.RandomState(self.mapping_seed).binomial(1, 0.5, (self.size, self.size))
        else:
            mapping = np.ones((self.size, self.size), np.int64)
        return DeepSeaParams(action_mapping=jnp.asarray(mapping, jnp.int32))

    def sample_action_mapping(self, key: jax.Array) -> jax.Array:
        """A uniformly random action mapping, int32 ``(size, size)``, for ``params.action_mapping``."""
        return jax.random.bernoulli(key, 0.5, (self.size, self.size)).astype(jnp.int32)

    def reset_env(self, key: jax.Array, params: DeepSeaParams) -> tuple[jax.Array, DeepSeaState]:
        zero = jnp.zeros((), jnp.int32)
        state = DeepSeaState(row=zero, column=zero, bad_episode=jnp.zeros((), jnp.bool_))
        return self.get_obs(state), state

    def step_env(self, key: jax.Array, state: DeepSeaState, action: Any, params: DeepSeaParams) -> StepOutput:
        size = self.size
        last = size - 1
        action_right = jnp.asarray(action) == params.action_mapping[state.row, state.column]
        reward = jnp.where(action_right & (state.column == last), 1.0, 0.0)
        moved_right = action_right
        if not self.deterministic:
            corner = (state.row == last) & ((state.column == 0) | (state.column == last))
            reward = reward + jnp.where(corner, fast_random.normal(key, stream=0), 0.0)
            moved_right = action_right & (fast_random.uniform(key, stream=2) > 1.0 / size)
        reward = reward - jnp.where(action_right, params.unscaled_move_cost / size, 0.0)
        column = jnp.where(
            action_right,
            jnp.where(moved_right, jnp.minimum(state.column + 1, last), state.column),
            jnp.maximum(state.column - 1, 0),
        )
        bad_episode = state.bad_episode | (~action_right & (state.row == state.column))
        state = DeepSeaState(row=state.row + 1, column=column, bad_episode=bad_episode)
        terminated = state.row == size
        return (
            self.get_obs(state),
            state,
            reward.astype(jnp.float32),
            terminated,
            jnp.zeros((), jnp.bool_),
            {},
        )

    def get_obs(self, state: DeepSeaState, params: DeepSeaParams | None = None) -> jax.Array:
        """One-hot grid of the agent's cell (all zeros once ``row == size``)."""
        # One compare per cell with the flat index (row * size + column, past the grid once
        # row == size; column is always in [0, size)) instead of two compares and an and: each
        # cell recomputes the new column, so fewer per-cell operations are what counts (pattern b
        # of benchmarks/envs_throughput.py: 1.88x -> 2.16x gymnax by CPU time).
        cells = jnp.arange(self.size * self.size, dtype=jnp.int32).reshape(self.size, self.size)
        return (cells == state.row * self.size + state.column).astype(jnp.float32)

    def observation_space(self, params: DeepSeaParams | None = None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (self.size, self.size), jnp.float32)

    def action_space(self, params: DeepSeaParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(2)

    def render(self, state: DeepSeaState, params: DeepSeaParams | None = None) -> jax.Array:
        """The grid: agent (blue), treasure (yellow), the optimal diagonal (grey).

        Shape ``(c * size, c * size, 3)`` uint8 with cell size ``c = max(4, 192 // size)``.
        """
        rows = jnp.arange(self.size)[:, None]
        columns = jnp.arange(self.size)[None, :]
        agent = (rows == state.row) & (columns == state.column)
        treasure = (rows == self.size - 1) & (columns == self.size - 1)
        labels = jnp.where(agent, 3, jnp.where(treasure, 2, jnp.where(rows == columns, 1, 0)))
        table = _render.palette([_render.BACKGROUND, _render.PATH, _render.TARGET, _render.AGENT])
        return _render.cells_to_frame(table[labels], max(4, 192 // self.size))
