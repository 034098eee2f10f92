"""State and params of :class:`~lamella.envs.multi_agent.lbf.LevelBasedForaging`."""

from __future__ import annotations

import jax

from lamella.envs import struct

__all__ = ["LevelBasedForagingParams", "LevelBasedForagingState"]


class LevelBasedForagingState(struct.PyTreeNode):
    """State of :class:`~lamella.envs.multi_agent.lbf.LevelBasedForaging`.

    ``n`` is the number of agents (players), ``F`` the number of food slots
    (``max_num_food``). Coordinates are ``(row, column)``, row 0 at the top.

    Attributes:
        agent_positions: int32 ``(n, 2)``, each agent's cell. Two agents may share
            a cell (lbforaging's stacking quirk, see the class docs).
        agent_levels: int32 ``(n,)``, each agent's level.
        food_positions: int32 ``(F, 2)``, each food slot's cell (meaningful only
            while its level is > 0).
        food_levels: int32 ``(F,)``, each food's level; 0 once eaten, or for a
            slot whose food could not be placed at reset.
        food_spawned: float32 ``()``, the sum of the food levels at reset: the
            reward normaliser (lbforaging's ``_food_spawned``).
        time: int32 ``()``, steps taken in this episode (lbforaging's
            ``current_step``).
    """

    agent_positions: jax.Array
    agent_levels: jax.Array
    food_positions: jax.Array
    food_levels: jax.Array
    food_spawned: jax.Array
    time: jax.Array


class LevelBasedForagingParams(struct.PyTreeNode):
    """Traced parameters of :class:`~lamella.envs.multi_agent.lbf.LevelBasedForaging`.

    Attributes:
        max_episode_steps: int, steps after which the episode is truncated
            (lbforaging: 50 for every registered id).
        penalty: float, subtracted from the reward of each agent of a loading
            group whose levels sum to less than the food's level (lbforaging:
            0.0 for every registered id).
        normalize_reward: bool, divide rewards by ``group level * food spawned``
            so that a fully cleared episode pays 1.0 in total (lbforaging's
            default, True).
    """

    max_episode_steps: int = struct.field(default=50, bounds=(1, None))
    penalty: float = 0.0
    normalize_reward: bool = True
