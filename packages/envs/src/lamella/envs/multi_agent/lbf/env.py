"""Level-Based Foraging with the rules of ``lbforaging==2.0.0``."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import spaces
from lamella.envs._inputs import bool_setting, check_one_state, integer_setting
from lamella.envs.environment import Environment, StepOutput
from lamella.envs.multi_agent.lbf import levels as lbf_levels
from lamella.envs.multi_agent.lbf import render as lbf_render
from lamella.envs.multi_agent.lbf.types import LevelBasedForagingParams, LevelBasedForagingState

__all__ = ["ACTION_NAMES", "NUM_ACTIONS", "LevelBasedForaging"]

NONE, NORTH, SOUTH, WEST, EAST, LOAD = range(6)
NUM_ACTIONS = 6
ACTION_NAMES = ("NONE", "NORTH", "SOUTH", "WEST", "EAST", "LOAD")
# (row, column) offset of each action; NONE and LOAD stay.
_DELTAS = np.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1], [0, 0]], np.int32)


def _near_food(row: jax.Array, col: jax.Array, food_row: jax.Array, food_col: jax.Array) -> jax.Array:
    """Cells where lbforaging refuses a new food: the 3x3 block of a food, and 2 cells along its row and column."""
    d_row, d_col = jnp.abs(row - food_row), jnp.abs(col - food_col)
    return jnp.where(d_row == 0, d_col <= 2, jnp.where(d_col == 0, d_row <= 2, (d_row <= 1) & (d_col <= 1)))


def _adjacent_food(row: jax.Array, col: jax.Array, food_row: jax.Array, food_col: jax.Array) -> jax.Array:
    """Cells where Jumanji refuses a new food: a food's own cell and its 4 neighbours."""
    return jnp.abs(row - food_row) + jnp.abs(col - food_col) <= 1


RULES = ("lbforaging", "jumanji")


def _positive_int(value: Any, name: str, minimum: int) -> int:
    return integer_setting(value, name, "LevelBasedForaging", minimum)


def _rejection_candidates(interior: int, players: int, num_food: int, excluded_per_food: int = 13) -> int:
    """Candidates per food for rejection sampling, or 0 where one pass over the grid is cheaper.

    At worst every agent stands in the interior and every earlier food excludes
    ``excluded_per_food`` cells (13 for lbforaging, 5 for Jumanji, whose agents come after the
    food), so at least ``interior - players - excluded_per_food (num_food - 1)`` cells are
    allowed; K is the fewest candidates that all miss them with probability below 1e-6.
    """
    allowed = interior - players - excluded_per_food * (num_food - 1)
    if allowed <= 0:
        return 0
    miss = 1.0 - allowed / interior
    candidates = 1 if miss <= 0 else int(np.ceil(np.log(1e-6) / np.log(miss)))
    # Measured on CPU (1024 envs, 8x8): one agent or food test of a candidate costs about a third
    # of a cell of the exact pass, whose running count (a cumulative sum) is the expensive part.
    return candidates if candidates * (players + num_food) < 3 * interior * num_food else 0


class LevelBasedForaging(Environment[LevelBasedForagingState, LevelBasedForagingParams]):
    """Level-Based Foraging: agents with levels load food whose level their group reaches.

    The rules, observation, reward and ids are those of ``lbforaging==2.0.0``
    (Papoudakis et al.'s EPyMARL benchmark), checked step by step against it
    (``tests/test_lbf.py``). ``n`` = ``players``, ``F`` = ``max_num_food``,
    ``L = 3F + 3n`` (``3F + 2n`` with ``observe_agent_levels=False``).
    Coordinates are ``(row, column)`` with row 0 at the top, as lbforaging's
    ``(y, x)``.

    Agents: ``n`` (leading agent axis on everything below).

    Action: int32 ``(n,)``, ``MultiDiscrete([6] * n)``: 0 NONE, 1 NORTH (row - 1),
    2 SOUTH (row + 1), 3 WEST (column - 1), 4 EAST (column + 1), 5 LOAD.
    An action that is illegal under the action mask (a move off the grid or
    onto food, LOAD with no food 4-adjacent) or out of range is NONE, as in
    lbforaging. Legal moves ignore other agents: two agents aiming at the same
    cell both stay; swaps and following into a vacated cell succeed; an agent
    moving onto a standing agent's cell stays. As in lbforaging, agents can end
    up stacked on one cell (A moves onto B's cell while B's own move is blocked
    by a third agent).

    Observation: float32 ``(n, L)``, lbforaging's vector observation, one row
    per agent: ``F`` food slots ``(row, column, level)`` then ``n`` agent slots
    ``(row, column, level)``. Food slots hold the foods within ``sight``
    (``|Δrow|, |Δcol| <= sight``) in row-major order, then ``(-1, -1, 0)``.
    Agent slots hold the agent itself first, then the other visible agents in
    index order, then ``(-1, -1, 0)``. Coordinates are relative to the top-left
    corner of the observer's view clipped to the grid, ``max(position - sight,
    0)`` (absolute coordinates with full sight). lbforaging's visibility quirk
    is kept: another agent is visible when its relative coordinates lie in
    ``[0, 2 * sight]``, so near the top or left edge an agent up to
    ``2 * sight`` cells away is seen.

    Reward: float32 ``(n,)``, individual. When the loading agents 4-adjacent to
    a food have levels summing to at least its level, the food is eaten and
    each of them gets ``level * food_level / (group_level * food_spawned)``
    (``level * food_level`` with ``normalize_reward=False``), so clearing every
    food pays 1.0 in total; a group that falls short gets ``-penalty`` each.
    Everyone else gets 0. A team reward is ``reward.sum()``.

    Terminated: bool ``(n,)``, all True once no food is left.

    Truncated: bool ``(n,)``, all True once ``time >= max_episode_steps`` (50).
    lbforaging returns its time limit as ``done`` (terminated) and
    ``truncated=False``; lamella reports it as truncation, so
    ``terminated | truncated`` is lbforaging's ``done``.

    Info: ``action_mask``, bool ``(n, 6)``: the legal actions in the returned
    state (also :meth:`action_mask`, which serves reset states).

    Global state (:meth:`global_state`): float32 ``(3F + 3n,)``, every food slot
    ``(row, column, level)`` (``(-1, -1, 0)`` once eaten) then every agent
    ``(row, column, level)`` in absolute coordinates.

    State: :class:`~lamella.envs.multi_agent.lbf.LevelBasedForagingState`
    (agent positions and levels, food positions and levels, ``food_spawned``,
    ``time``). Params: :class:`~lamella.envs.multi_agent.lbf.LevelBasedForagingParams`
    (``max_episode_steps``, ``penalty``, ``normalize_reward``).

    Reset (lbforaging's distribution, lamella's random numbers): agents on
    distinct uniform cells (border included), levels uniform in
    ``[min_player_level, max_player_level]``; then foods one at a time on a
    uniform interior cell that holds no agent, is not in the 3x3 block of a food
    and not within 2 cells of one in its row or column. A food's level is
    uniform in ``[min_food_level, cap]``, where ``cap`` is ``max_food_level``
    or, when that is None, the sum of the three lowest agent levels;
    ``force_coop`` makes every food exactly ``cap``; a draw whose ``cap`` is below
    ``min_food_level`` gives ``cap`` (lbforaging fails there), and a ``min_food_level`` above
    every ``cap`` reset can draw is refused at construction. Food that does not fit
    leaves its slot empty (level 0), as lbforaging's 1000 attempts do (a 5x5
    grid holds at most 2 foods). Wherever the grid leaves room (8x8 with 2 agents
    and 2 foods and anything roomier) a food is the first allowed of ``K``
    uniform candidates (``K`` fixed at construction so that all miss with
    probability below 1e-6; the slot then stays empty), on crowded grids exactly
    uniform over the allowed cells. The step is deterministic.

    ``rules="jumanji"`` gives the rules of Jumanji 1.1.2's ``LevelBasedForaging``
    (the LBF Mava trains on), checked step by step against it
    (``tests/test_lbf_jumanji.py``), and a default of 100 steps; everything
    else above stands:

    - Moves: a move onto another agent's cell is illegal (masked, so NONE),
      even when that agent moves away: no swaps, no following, no stacking.
      Two agents aiming at one free cell both stay, as above.
    - Penalty: a group that falls short costs *every* agent ``penalty``
      (``penalty / (group_level * food_spawned)`` with normalised rewards),
      once per such food.
    - Observation: fixed slots. Food slot ``f`` is food ``f`` while it is
      uneaten and within ``sight``; agent slots are the agent itself, then
      every other agent in index order, each ``(-1, -1, 0)`` when farther than
      ``sight`` on either axis (no compaction, no visibility quirk).
    - Reset: foods first, each uniform among the interior cells that are
      neither a food nor 4-adjacent to one (Manhattan distance 2 is allowed,
      so an agent can touch two foods and counts for both); then agents on
      distinct uniform cells without food. Jumanji's own generator also keeps
      agents off every row whose index is a food's row *or column* (a
      row-indexing slip); lamella does not copy that.
    - Time limit: reported as ``truncated`` as always (Jumanji reports a
      step that both clears the food and hits the limit as termination only;
      here both flags are True).

    Args:
        players: number of agents, >= 2.
        field_size: grid side, or ``(rows, columns)``; >= 3 each.
        max_num_food: food slots, >= 1.
        sight: view radius; None means the larger grid side (full view).
        force_coop: every food's level is the cap (needs a group to load).
        min_player_level, max_player_level: agent level range.
        min_food_level, max_food_level: food level range (None: the cap above).
        observe_agent_levels: include agent levels in the observation.
        max_episode_steps, penalty, normalize_reward: defaults of the params
            (``max_episode_steps`` None: 50, or 100 with ``rules="jumanji"``).
        rules: ``"lbforaging"`` (lbforaging 2.0) or ``"jumanji"`` (Jumanji 1.1.2).
    """

    stochastic_step = False
    sparse_reset = True  # resets draw layouts by rejection; episodes end tens of steps apart
    # On a GPU the branch (a conditional with pass-through copies of the state) costs more than
    # the resets it skips: IPPO on an H200 1.13x faster without it with 16 envs, the same with 1024.
    sparse_reset_on_accelerators = False

    def __init__(
        self,
        players: int = 2,
        field_size: int | tuple[int, int] = 8,
        max_num_food: int = 2,
        sight: int | None = None,
        force_coop: bool = False,
        min_player_level: int = 1,
        max_player_level: int = 2,
        min_food_level: int = 1,
        max_food_level: int | None = None,
        observe_agent_levels: bool = True,
        max_episode_steps: int | None = None,
        penalty: float = 0.0,
        normalize_reward: bool = True,
        rules: str = "lbforaging",
    ):
        if rules not in RULES:
            raise ValueError(
                f"LevelBasedForaging: rules must be 'lbforaging' (lbforaging 2.0) or 'jumanji' "
                f"(Jumanji 1.1.2), got {rules!r}."
            )
        self.rules = rules
        self.jumanji = rules == "jumanji"
        self.num_agents = _positive_int(players, "players", 2)  # type: ignore[misc]
        size = (field_size, field_size) if np.ndim(field_size) == 0 else tuple(field_size)  # type: ignore[arg-type]
        if len(size) != 2:
            raise ValueError(
                f"LevelBasedForaging: field_size must be an int or (rows, columns), got {field_size!r}."
            )
        self.rows = _positive_int(size[0], "field_size rows", 3)
        self.cols = _positive_int(size[1], "field_size columns", 3)
        self.max_num_food = _positive_int(max_num_food, "max_num_food", 1)
        if self.num_agents + self.max_num_food > self.rows * self.cols:
            raise ValueError(
                f"LevelBasedForaging: a {self.rows}x{self.cols} grid cannot hold {self.num_agents} agents "
                f"and {self.max_num_food} food; use a larger field_size or fewer players/food."
            )
        self.sight = max(self.rows, self.cols) if sight is None else _positive_int(sight, "sight", 1)
        self.force_coop = bool_setting(force_coop, "force_coop", "LevelBasedForaging")
        self.min_player_level = _positive_int(min_player_level, "min_player_level", 1)
        self.max_player_level = _positive_int(max_player_level, "max_player_level", self.min_player_level)
        self.min_food_level = _positive_int(min_food_level, "min_food_level", 1)
        self.max_food_level = (
            None
            if max_food_level is None
            else _positive_int(max_food_level, "max_food_level", self.min_food_level)
        )
        highest_cap = self.max_player_level * min(3, self.num_agents)
        if self.max_food_level is None and not self.force_coop and self.min_food_level > highest_cap:
            # Reset clamps a draw to the cap: every food would be the cap, below min_food_level.
            raise ValueError(
                f"LevelBasedForaging: min_food_level ({self.min_food_level}) is above every food level "
                f"reset can draw: with max_food_level=None a food's level is at most the sum of the three "
                f"lowest agent levels, at most {highest_cap} here ({self.num_agents} players of level "
                f"<= {self.max_player_level}); lower min_food_level or pass max_food_level >= "
                f"{self.min_food_level}."
            )
        self.observe_agent_levels = bool_setting(
            observe_agent_levels, "observe_agent_levels", "LevelBasedForaging"
        )
        self._food_candidates = _rejection_candidates(
            (self.rows - 2) * (self.cols - 2),
            0 if self.jumanji else self.num_agents,
            self.max_num_food,
            5 if self.jumanji else 13,
        )
        if max_episode_steps is None:
            max_episode_steps = 100 if self.jumanji else 50
        _positive_int(max_episode_steps, "max_episode_steps", 1)
        normalize = bool_setting(normalize_reward, "normalize_reward", "LevelBasedForaging")
        self._defaults = (int(max_episode_steps), float(penalty), normalize)

    # Sizes ---------------------------------------------------------------------------------

    @property
    def default_params(self) -> LevelBasedForagingParams:
        return LevelBasedForagingParams(*self._defaults)

    @property
    def food_level_bound(self) -> int:
        """The highest food level reset can draw (the observation space's bound)."""
        if self.max_food_level is not None:
            return self.max_food_level
        return self.max_player_level * min(3, self.num_agents)

    @property
    def agent_features(self) -> int:
        return 3 if self.observe_agent_levels else 2

    @property
    def observation_size(self) -> int:
        return 3 * self.max_num_food + self.agent_features * self.num_agents

    def observation_space(self, params: LevelBasedForagingParams | None = None) -> spaces.Box:
        row, col = self.rows - 1, self.cols - 1
        food_high = [row, col, self.food_level_bound] * self.max_num_food
        agent_high = (
            [row, col, self.max_player_level] if self.observe_agent_levels else [row, col]
        ) * self.num_agents
        low = ([-1, -1, 0] * self.max_num_food) + ([-1, -1, 0][: self.agent_features] * self.num_agents)
        shape = (self.num_agents, self.observation_size)
        return spaces.Box(np.broadcast_to(low, shape), np.broadcast_to(food_high + agent_high, shape), shape)

    def action_space(self, params: LevelBasedForagingParams | None = None) -> spaces.MultiDiscrete:
        return spaces.MultiDiscrete([NUM_ACTIONS] * self.num_agents)

    def global_state_space(self, params: LevelBasedForagingParams | None = None) -> spaces.Box:
        """The space of :meth:`global_state`: float32 ``(3F + 3n,)``."""
        low = [-1, -1, 0] * (self.max_num_food + self.num_agents)
        high = [self.rows - 1, self.cols - 1, self.food_level_bound] * self.max_num_food + [
            self.rows - 1,
            self.cols - 1,
            self.max_player_level,
        ] * self.num_agents
        return spaces.Box(np.asarray(low), np.asarray(high), (len(low),))

    # Pieces of the dynamics ----------------------------------------------------------------

    def _check_action(self, action: Any) -> jax.Array:
        action = jnp.asarray(action)
        if action.shape != (self.num_agents,):
            raise ValueError(
                f"{self.name}.step: action must have shape ({self.num_agents},) (one int per agent, "
                f"agent axis first), got shape {action.shape}."
            )
        if not jnp.issubdtype(action.dtype, jnp.integer):
            raise TypeError(
                f"{self.name}.step: actions must be integers 0..5 (NONE, NORTH, SOUTH, WEST, EAST, LOAD), "
                f"got dtype {action.dtype}; cast with .astype(jnp.int32)."
            )
        return action.astype(jnp.int32)

    def _food_distance(self, state: LevelBasedForagingState) -> jax.Array:
        """Manhattan distance from each agent to each food, int32 ``(n, F)``."""
        delta = state.agent_positions[:, None, :] - state.food_positions[None, :, :]
        return jnp.abs(delta[..., 0]) + jnp.abs(delta[..., 1])

    def action_mask(
        self, state: LevelBasedForagingState, params: LevelBasedForagingParams | None = None
    ) -> jax.Array:
        """Legal actions in ``state``, bool ``(n, 6)`` (lbforaging's ``_valid_actions``).

        NONE is always legal; a move is legal when its target is on the grid and
        holds no food (other agents do not block it; with ``rules="jumanji"``
        they do, as Jumanji's action mask has it); LOAD is legal when a food
        is 4-adjacent.
        """
        check_one_state(self, state, "action_mask")
        position = state.agent_positions
        food_present = state.food_levels > 0
        target = position[:, None, :] + _DELTAS[None, 1:5, :]  # (n, 4, 2)
        on_grid = (target[..., 0] >= 0) & (target[..., 0] < self.rows)
        on_grid &= (target[..., 1] >= 0) & (target[..., 1] < self.cols)
        hits_food = jnp.all(target[:, :, None, :] == state.food_positions[None, None, :, :], -1)
        hits_food = jnp.any(hits_food & food_present[None, None, :], -1)
        if self.jumanji:  # Jumanji: another agent's cell is blocked too
            hits_agent = jnp.all(target[:, :, None, :] == position[None, None, :, :], -1)  # (n, 4, n)
            hits_food |= jnp.any(hits_agent & ~jnp.eye(self.num_agents, dtype=jnp.bool_)[:, None, :], -1)
        can_load = jnp.any((self._food_distance(state) == 1) & food_present[None, :], -1)
        none = jnp.ones((self.num_agents, 1), jnp.bool_)
        return jnp.concatenate([none, on_grid & ~hits_food, can_load[:, None]], axis=1)

    def get_obs(
        self, state: LevelBasedForagingState, params: LevelBasedForagingParams | None = None
    ) -> jax.Array:
        """Every agent's vector observation, float32 ``(n, L)`` (see the class docs)."""
        check_one_state(self, state, "get_obs")
        n, num_food = self.num_agents, self.max_num_food
        position, food_position = state.agent_positions, state.food_positions
        origin = jnp.maximum(position - self.sight, 0)  # (n, 2) top-left of each clipped view
        if self.jumanji:
            return self._jumanji_obs(state, origin)

        # Food slots: visible foods in row-major order.
        near = jnp.abs(food_position[None, :, :] - position[:, None, :]) <= self.sight
        seen_food = jnp.all(near, -1) & (state.food_levels > 0)[None, :]  # (n, F)
        order = food_position[:, 0] * self.cols + food_position[:, 1]
        earlier = seen_food[:, None, :] & (order[None, None, :] < order[None, :, None])  # (n, F, F)
        food_slot = jnp.sum(earlier, -1)
        food_onehot = seen_food[..., None] & (food_slot[..., None] == jnp.arange(num_food))  # (n, F, slot)
        food_values = jnp.concatenate(
            [
                food_position[None, :, :] - origin[:, None, :],
                jnp.broadcast_to(state.food_levels, (n, num_food))[..., None],
            ],
            -1,
        ).astype(jnp.float32)
        # Broadcast-and-sum rather than einsum: XLA on CPU fuses it, while tiny batched dots are slow.
        food_obs = jnp.sum(jnp.where(food_onehot[..., None], food_values[:, :, None, :], 0.0), 1)
        empty_food = ~jnp.any(food_onehot, 1)[..., None]  # (n, slot, 1)
        food_obs = jnp.where(empty_food, jnp.array([-1.0, -1.0, 0.0]), food_obs)

        # Agent slots: self first, then the visible others in index order.
        relative = position[None, :, :] - origin[:, None, :]  # (observer, other, 2)
        visible = jnp.all((relative >= 0) & (relative <= 2 * self.sight), -1)
        me = jnp.eye(n, dtype=jnp.bool_)
        others = visible & ~me
        # 1 + the number of visible others before each one: a compare-and-sum over a static
        # triangle (a cumulative sum is a slow reduce-window on CPU).
        before = np.arange(n)[None, :] < np.arange(n)[:, None]  # (other, earlier other)
        agent_slot = jnp.where(me, 0, jnp.sum(others[:, None, :] & before[None], -1) + 1)
        agent_onehot = (visible | me)[..., None] & (agent_slot[..., None] == jnp.arange(n))
        features = [relative, jnp.broadcast_to(state.agent_levels, (n, n))[..., None]]
        agent_values = jnp.concatenate(features[: 1 + self.observe_agent_levels], -1).astype(jnp.float32)
        agent_obs = jnp.sum(jnp.where(agent_onehot[..., None], agent_values[:, :, None, :], 0.0), 1)
        empty_agent = ~jnp.any(agent_onehot, 1)[..., None]
        agent_obs = jnp.where(empty_agent, jnp.array([-1.0, -1.0, 0.0][: self.agent_features]), agent_obs)
        return jnp.concatenate([food_obs.reshape(n, -1), agent_obs.reshape(n, -1)], -1)

    def observation_of(
        self, state: LevelBasedForagingState, params: LevelBasedForagingParams | None = None
    ) -> jax.Array:
        # The observation is a function of the state: under auto-reset the wrapper selects the
        # (small) state and builds one observation from it, rather than the step's and the reset's
        # and a select (the step's is then built only when info["final_observation"] is read).
        check_one_state(self, state, "observation_of")
        return self.get_obs(state, params)

    def _jumanji_obs(self, state: LevelBasedForagingState, origin: jax.Array) -> jax.Array:
        """Jumanji's vector observation: fixed slots, ``(-1, -1, 0)`` for what is eaten or unseen."""
        n, num_food = self.num_agents, self.max_num_food
        position, food_position = state.agent_positions, state.food_positions
        empty = jnp.array([-1.0, -1.0, 0.0])
        near = jnp.all(jnp.abs(food_position[None, :, :] - position[:, None, :]) <= self.sight, -1)
        seen_food = near & (state.food_levels > 0)[None, :]  # (n, F)
        food_values = jnp.concatenate(
            [
                food_position[None, :, :] - origin[:, None, :],
                jnp.broadcast_to(state.food_levels, (n, num_food))[..., None],
            ],
            -1,
        ).astype(jnp.float32)
        food_obs = jnp.where(seen_food[..., None], food_values, empty)

        seen = jnp.all(jnp.abs(position[None, :, :] - position[:, None, :]) <= self.sight, -1)  # (obs, other)
        agent_values = jnp.concatenate(
            [
                position[None, :, :] - origin[:, None, :],
                jnp.broadcast_to(state.agent_levels, (n, n))[..., None],
            ],
            -1,
        ).astype(jnp.float32)
        agent_values = jnp.where(seen[..., None], agent_values, empty)
        # Slot order per observer i: i itself, then the others in index order (a fixed permutation).
        source = np.array([[i] + [j for j in range(n) if j != i] for i in range(n)])
        slots = np.arange(n)[None, :, None] == source[:, None, :]  # (observer, other, slot), static
        agent_obs = jnp.sum(jnp.where(slots[..., None], agent_values[:, :, None, :], 0.0), 1)
        agent_obs = agent_obs[..., : self.agent_features]
        return jnp.concatenate([food_obs.reshape(n, -1), agent_obs.reshape(n, -1)], -1)

    def global_state(
        self, state: LevelBasedForagingState, params: LevelBasedForagingParams | None = None
    ) -> jax.Array:
        """The whole state for a centralised critic, float32 ``(3F + 3n,)`` (see the class docs)."""
        check_one_state(self, state, "global_state")
        present = (state.food_levels > 0)[:, None]
        food = jnp.concatenate([state.food_positions, state.food_levels[:, None]], -1)
        food = jnp.where(present, food, jnp.array([-1, -1, 0]))
        agents = jnp.concatenate([state.agent_positions, state.agent_levels[:, None]], -1)
        return jnp.concatenate([food.reshape(-1), agents.reshape(-1)]).astype(jnp.float32)

    # Reset and step ------------------------------------------------------------------------

    def reset_env(
        self, key: jax.Array, params: LevelBasedForagingParams
    ) -> tuple[jax.Array, LevelBasedForagingState]:
        # One compiled program even when called eagerly (op by op, the spawn loop takes seconds);
        # inside an outer jit or vmap the inner jit is inlined.
        return self._reset_compiled(key, params)

    @functools.partial(jax.jit, static_argnums=0)
    def _reset_compiled(
        self, key: jax.Array, params: LevelBasedForagingParams
    ) -> tuple[jax.Array, LevelBasedForagingState]:
        n, rows, cols, num_food = self.num_agents, self.rows, self.cols, self.max_num_food
        cells = rows * cols
        # One 16-bit uniform per draw: a fresh key's own bits give the first four unhashed.
        u = fast_random.uniform16(key, (2 * n + 2 * num_food,))
        u_cell, u_level, u_food, u_food_level = jnp.split(u, np.cumsum([n, n, num_food]))

        level_span = self.max_player_level - self.min_player_level + 1
        agent_levels = self.min_player_level + jnp.minimum(
            jnp.floor(u_level * level_span).astype(jnp.int32), level_span - 1
        )

        cap = (
            jnp.asarray(self.max_food_level, jnp.int32)
            if self.max_food_level is not None
            else jnp.sum(jnp.sort(agent_levels)[: min(3, n)])
        )
        low = cap if self.force_coop else jnp.asarray(self.min_food_level, jnp.int32)
        food_levels_drawn = low + jnp.floor(u_food_level * (cap - low + 1).astype(jnp.float32)).astype(
            jnp.int32
        )
        food_levels_drawn = jnp.minimum(food_levels_drawn, cap)

        if self.jumanji:  # Jumanji: foods first, then agents on cells without food
            no_agents = jnp.zeros((0, 2), jnp.int32)
            food_positions, food_levels = self._spawn_food(key, u_food, no_agents, food_levels_drawn)
            food_cells = [
                jnp.where(level > 0, p[0] * cols + p[1], cells)
                for p, level in zip(food_positions, food_levels)
            ]
            taken = jnp.stack(food_cells).astype(jnp.int32)
            agent_cells = self._spawn_agents(u_cell, taken, jnp.sum((taken < cells).astype(jnp.int32)))
            agent_positions = jnp.stack([agent_cells // cols, agent_cells % cols], -1).astype(jnp.int32)
        else:
            agent_cells = self._spawn_agents(u_cell, jnp.zeros((0,), jnp.int32), 0)
            agent_positions = jnp.stack([agent_cells // cols, agent_cells % cols], -1).astype(jnp.int32)
            food_positions, food_levels = self._spawn_food(key, u_food, agent_positions, food_levels_drawn)
        food_level_array = jnp.stack(food_levels).astype(jnp.int32)
        state = LevelBasedForagingState(
            agent_positions=agent_positions,
            agent_levels=agent_levels.astype(jnp.int32),
            food_positions=jnp.stack(food_positions).astype(jnp.int32),
            food_levels=food_level_array,
            food_spawned=jnp.sum(food_level_array).astype(jnp.float32),
            time=jnp.zeros((), jnp.int32),
        )
        # XLA on CPU would copy the cheap spawn arithmetic into every reader of the new state
        # (observation, auto-reset selects); the barrier makes it compute the state once.
        state = jax.lax.optimization_barrier(state)
        return self.get_obs(state), state

    def _spawn_agents(self, u_cell: jax.Array, taken: jax.Array, num_taken: Any) -> jax.Array:
        """Agents one at a time, each uniform among the cells not taken yet (flat indices).

        ``taken`` holds the flat cells already occupied (entries ``>= rows * cols`` are
        ignored; ``num_taken`` counts the others). Draw the rank r among the free cells, then
        the cell c with c = r + #{taken cells <= c}: a fixed point reached in at most
        (number taken) rounds; exact, and a few scalar operations per agent rather than a pass
        over the grid.
        """
        n, cells = self.num_agents, self.rows * self.cols
        free = cells - num_taken - np.arange(n)
        ranks = jnp.minimum(jnp.floor(u_cell * free).astype(jnp.int32), free - 1)
        agent_cells = jnp.zeros((0,), jnp.int32)
        for i in range(n):
            occupied = jnp.concatenate([taken, agent_cells])
            cell = ranks[i]
            for _ in range(occupied.shape[0]):
                cell = ranks[i] + jnp.sum((occupied <= cell).astype(jnp.int32))
            agent_cells = jnp.concatenate([agent_cells, cell[None].astype(jnp.int32)])
        return agent_cells

    def _spawn_food(
        self, key: jax.Array, u_food: jax.Array, agent_positions: jax.Array, levels: jax.Array
    ) -> tuple[list[jax.Array], list[jax.Array]]:
        if self._food_candidates:
            return self._spawn_food_by_rejection(key, agent_positions, levels)
        return self._spawn_food_exactly(u_food, agent_positions, levels)

    def _spawn_food_exactly(
        self, u_food: jax.Array, agent_positions: jax.Array, levels: jax.Array
    ) -> tuple[list[jax.Array], list[jax.Array]]:
        """Foods one at a time, each uniform among the allowed interior cells (what lbforaging's
        rejection sampling converges to): the k-th allowed cell, by a cumulative sum."""
        inner_rows, inner_cols = self.rows - 2, self.cols - 2
        cell_row = jnp.asarray(1 + np.arange(inner_rows * inner_cols) // inner_cols, jnp.int32)
        cell_col = jnp.asarray(1 + np.arange(inner_rows * inner_cols) % inner_cols, jnp.int32)
        allowed = jnp.ones((inner_rows * inner_cols,), jnp.bool_)
        near = _adjacent_food if self.jumanji else _near_food
        for i in range(agent_positions.shape[0]):
            allowed &= (cell_row != agent_positions[i, 0]) | (cell_col != agent_positions[i, 1])
        food_positions: list[jax.Array] = []
        food_levels: list[jax.Array] = []
        for f in range(self.max_num_food):
            count = jnp.sum(allowed.astype(jnp.int32))
            k = jnp.minimum(jnp.floor(u_food[f] * count.astype(jnp.float32)).astype(jnp.int32), count - 1)
            index = jnp.argmax(jnp.cumsum(allowed.astype(jnp.int32)) > k)
            row, col = cell_row[index], cell_col[index]
            food_positions.append(jnp.stack([row, col]))
            food_levels.append(jnp.where(count > 0, levels[f], 0))
            if f + 1 < self.max_num_food:
                allowed &= ~near(cell_row, cell_col, row, col)
        return food_positions, food_levels

    def _spawn_food_by_rejection(
        self, key: jax.Array, agent_positions: jax.Array, levels: jax.Array
    ) -> tuple[list[jax.Array], list[jax.Array]]:
        """Foods one at a time, each the first allowed one of K uniform interior candidates.

        Used wherever a pass over every cell per food costs more than K candidates (all but
        crowded grids); K is chosen at construction so that all K are rejected with probability
        below 1e-6 even on the most crowded grid the settings allow (the slot then stays
        empty, as it does when lbforaging runs out of attempts).
        """
        inner_cols = self.cols - 2
        candidates = self._food_candidates
        u = fast_random.uniform(key, (self.max_num_food, candidates), stream=5, vector=True)
        index = jnp.floor(u * ((self.rows - 2) * inner_cols)).astype(jnp.int32)
        cand_row, cand_col = 1 + index // inner_cols, 1 + index % inner_cols  # (F, K)
        food_positions: list[jax.Array] = []
        food_levels: list[jax.Array] = []
        placed: list[jax.Array] = []
        for f in range(self.max_num_food):
            row, col = cand_row[f], cand_col[f]
            ok = jnp.all(
                (row[:, None] != agent_positions[None, :, 0]) | (col[:, None] != agent_positions[None, :, 1]),
                -1,
            )
            for g in range(f):
                near = _adjacent_food if self.jumanji else _near_food
                ok &= ~(near(row, col, food_positions[g][0], food_positions[g][1]) & placed[g])
            first = jnp.argmax(ok)
            food_positions.append(jnp.stack([row[first], col[first]]))
            placed.append(ok[first])
            food_levels.append(jnp.where(ok[first], levels[f], 0))
        return food_positions, food_levels

    def step_env(
        self,
        key: jax.Array,
        state: LevelBasedForagingState,
        action: Any,
        params: LevelBasedForagingParams,
    ) -> StepOutput:
        action = self._check_action(action)
        mask = self.action_mask(state)
        in_range = (action >= 0) & (action < NUM_ACTIONS)
        clipped = jnp.clip(action, 0, NUM_ACTIONS - 1)
        legal = in_range & jnp.take_along_axis(mask, clipped[:, None], 1)[:, 0]
        action = jnp.where(legal, clipped, NONE)

        # Movement: an agent moves unless another agent has the same target cell.
        target = state.agent_positions + jnp.asarray(_DELTAS)[action]
        same_target = jnp.all(target[:, None, :] == target[None, :, :], -1)
        blocked = jnp.sum(same_target, 1) > 1
        positions = jnp.where(blocked[:, None], state.agent_positions, target)

        # Loading: loaders never move, so their adjacency is that of the old positions.
        food_levels = state.food_levels
        loaders = (action == LOAD)[:, None] & (self._food_distance(state) == 1) & (food_levels > 0)[None, :]
        levels = state.agent_levels
        group_level = jnp.sum(jnp.where(loaders, levels[:, None], 0), 0)  # (F,)
        eaten = (food_levels > 0) & (group_level >= food_levels)
        share = (levels[:, None] * food_levels[None, :]).astype(jnp.float32)
        scale = jnp.where(params.normalize_reward, group_level.astype(jnp.float32) * state.food_spawned, 1.0)
        gain = share / jnp.maximum(scale, 1e-30)[None, :]
        penalty = jnp.asarray(params.penalty, jnp.float32)
        if self.jumanji:
            # A group that falls short costs every agent, scaled like a gain.
            short = (group_level > 0) & ~eaten
            loss = jnp.sum(jnp.where(short, penalty / jnp.maximum(scale, 1e-30), 0.0))
            reward = jnp.sum(jnp.where(loaders & eaten[None, :], gain, 0.0), 1) - loss
        else:
            reward = jnp.sum(jnp.where(loaders, jnp.where(eaten[None, :], gain, -penalty), 0.0), 1)
        food_levels = jnp.where(eaten, 0, food_levels)

        state = state.replace(agent_positions=positions, food_levels=food_levels, time=state.time + 1)
        # Computed once, not once per reader (observation, mask, flags, auto-reset selects).
        state, reward = jax.lax.optimization_barrier((state, reward))
        n = self.num_agents
        terminated = jnp.broadcast_to(jnp.all(food_levels == 0), (n,))
        truncated = jnp.broadcast_to(state.time >= params.max_episode_steps, (n,))
        info = {"action_mask": self.action_mask(state)}
        return self.get_obs(state), state, reward.astype(jnp.float32), terminated, truncated, info

    # Levels (UED) ---------------------------------------------------------------------------

    def reset_to_level(
        self, key: jax.Array, level: lbf_levels.ForagingLevel, params: LevelBasedForagingParams
    ) -> tuple[jax.Array, LevelBasedForagingState]:
        """Start an episode on ``level`` (:class:`~lamella.envs.multi_agent.lbf.ForagingLevel`):
        ``(obs, state)``; deterministic (``key`` is unused).

        Raises:
            EnvInputError: ``level`` is not a ForagingLevel of this env's agent and food counts.
        """
        lbf_levels.check_level_fits(self, level)
        state = lbf_levels.state_of_level(level)
        return self.get_obs(state, params), state

    def sample_level(self, key: jax.Array, params: LevelBasedForagingParams) -> lbf_levels.ForagingLevel:
        """A random level from this env's reset distribution (the DR generator)."""
        return lbf_levels.sample_level(self, key, params)

    def mutate_level(
        self,
        key: jax.Array,
        level: lbf_levels.ForagingLevel,
        params: LevelBasedForagingParams | None = None,
        num_edits: Any = 1,
    ) -> lbf_levels.ForagingLevel:
        """``level`` after ``num_edits`` random edits (:func:`~lamella.envs.multi_agent.lbf.levels.mutate_level`)."""
        return lbf_levels.mutate_level(self, key, level, params, num_edits)

    @staticmethod
    def levels_equal(a: lbf_levels.ForagingLevel, b: lbf_levels.ForagingLevel) -> jax.Array:
        """bool ``()``: the same layout (:func:`~lamella.envs.multi_agent.lbf.levels.levels_equal`)."""
        return lbf_levels.levels_equal(a, b)

    def render_level(
        self, level: lbf_levels.ForagingLevel, params: LevelBasedForagingParams | None = None
    ) -> jax.Array:
        """The picture of an episode's start on ``level``, as :meth:`render` draws a state."""
        lbf_levels.check_level_fits(self, level)
        return self.render(lbf_levels.state_of_level(level), params)

    def render(
        self, state: LevelBasedForagingState, params: LevelBasedForagingParams | None = None
    ) -> jax.Array:
        """The grid, uint8 ``(32 * rows, 32 * columns, 3)``: see :func:`~lamella.envs.multi_agent.lbf.render.render`."""
        check_one_state(self, state, "render")
        return lbf_render.render(self, state)

    def __repr__(self) -> str:
        return (
            f"LevelBasedForaging(players={self.num_agents}, field_size=({self.rows}, {self.cols}), "
            f"max_num_food={self.max_num_food}, sight={self.sight}, force_coop={self.force_coop})"
        )
