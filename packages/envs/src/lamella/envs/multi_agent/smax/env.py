"""SMAX: StarCraft-like unit micromanagement with the rules of JaxMARL 0.2.0's ``HeuristicEnemySMAX``."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import spaces
from lamella.envs._inputs import bool_setting, check_one_state, integer_setting
from lamella.envs.environment import Environment, StepOutput
from lamella.envs.multi_agent.smax import render as smax_render
from lamella.envs.multi_agent.smax.types import SMAXNoise, SMAXParams, SMAXState

__all__ = [
    "ATTACK_MODES",
    "NUM_MOVE_ACTIONS",
    "SCENARIOS",
    "SMAX",
    "STOP",
    "UNIT_SHORTHANDS",
    "UNIT_STATS",
    "UNIT_TYPES",
]

UNIT_TYPES = ("marine", "marauder", "stalker", "zealot", "zergling", "hydralisk")
UNIT_SHORTHANDS = "mMsZzh"
# One row per unit type: speed (map units per second), damage per shot, attack range, sight
# range, radius, hit points, seconds between shots (SMAX's unit table).
UNIT_STATS = np.array(
    [
        [3.15, 9.0, 5.0, 9.0, 0.375, 45.0, 0.61],
        [2.25, 10.0, 6.0, 10.0, 0.5625, 125.0, 1.07],
        [4.13, 13.0, 6.0, 10.0, 0.625, 160.0, 1.87],
        [3.15, 8.0, 2.0, 9.0, 0.5, 150.0, 0.86],
        [4.13, 5.0, 2.0, 8.0, 0.375, 35.0, 0.5],
        [3.15, 12.0, 5.0, 9.0, 0.625, 80.0, 0.59],
    ],
    np.float32,
)
_SPEED, _DAMAGE, _RANGE, _SIGHT, _RADIUS, _HEALTH, _COOLDOWN = range(7)

# Scenario name -> (ally units, enemy units), one shorthand letter per unit (UNIT_SHORTHANDS):
# the SMAC maps JaxMARL 0.2.0's SMAX defines (its random-position smacv2 ones excepted).
SCENARIOS = {
    "3m": ("mmm", "mmm"),
    "8m": ("m" * 8, "m" * 8),
    "25m": ("m" * 25, "m" * 25),
    "5m_vs_6m": ("m" * 5, "m" * 6),
    "10m_vs_11m": ("m" * 10, "m" * 11),
    "27m_vs_30m": ("m" * 27, "m" * 30),
    "2s3z": ("ssZZZ", "ssZZZ"),
    "3s5z": ("sssZZZZZ", "sssZZZZZ"),
    "3s5z_vs_3s6z": ("sssZZZZZ", "sssZZZZZZ"),
    "3s_vs_5z": ("sss", "ZZZZZ"),
    "6h_vs_8z": ("hhhhhh", "ZZZZZZZZ"),
}

NORTH, EAST, SOUTH, WEST, STOP = range(5)
NUM_MOVE_ACTIONS = 5  # four moves and stop; attack actions follow
ATTACK_MODES = ("closest", "random")
_OTHER_FEATURES = 7 + len(UNIT_TYPES)  # health, dx, dy, last move x, y, last target, cooldown, type
_OWN_FEATURES = 4 + len(UNIT_TYPES)  # health, x, y, cooldown, type


def _units(value: str | Sequence[Any], side: str) -> tuple[int, ...]:
    """Unit type indices from shorthand letters (``"ssZZZ"``) or type names / indices."""
    if isinstance(value, Mapping) or not isinstance(value, (str, Sequence, np.ndarray)):
        # A dict iterates over its keys (one unit of each type); counts are not a team.
        raise ValueError(
            f"SMAX: the {side} team must be unit letters such as 'ssZZZ' or a sequence of unit names "
            f"or indices, got {type(value).__name__} {value!r:.60}; write each unit once, e.g. "
            "('mmm', 'zz') for 3 marines against 2 zerglings."
        )
    types = []
    for item in list(value):
        if isinstance(item, str) and item in UNIT_SHORTHANDS and len(item) == 1:
            types.append(UNIT_SHORTHANDS.index(item))
        elif isinstance(item, str) and item in UNIT_TYPES:
            types.append(UNIT_TYPES.index(item))
        elif (
            isinstance(item, (int, np.integer)) and not isinstance(item, bool) and 0 <= item < len(UNIT_TYPES)
        ):
            types.append(int(item))
        else:
            raise ValueError(
                f"SMAX: unknown {side} unit {item!r}; use the letters {UNIT_SHORTHANDS!r} "
                f"({', '.join(f'{s}={n}' for s, n in zip(UNIT_SHORTHANDS, UNIT_TYPES))}), the names or 0..5."
            )
    if not types:
        raise ValueError(f"SMAX: the {side} team needs at least one unit.")
    return tuple(types)


class SMAX(Environment[SMAXState, SMAXParams]):
    """SMAX: a team of ``A`` allied units (the agents) fights ``E`` enemy units driven by a heuristic.

    The rules are those of JaxMARL 0.2.0's ``HeuristicEnemySMAX`` (the env JaxMARL's and Mava's
    SMAX baselines train on), checked step by step against it by state injection
    (``tests/test_smax.py``). ``U = A + E`` units, allies first; the map is ``map_width x
    map_height`` (32 x 32), ``+y`` north. One env step is ``W = 8`` world steps of ``dt = 1/16``
    seconds. Unit types and their statistics: :data:`UNIT_TYPES`, :data:`UNIT_STATS`.

    Agents: ``A`` (leading agent axis on everything below).

    Action: int32 ``(A,)``, ``MultiDiscrete([E + 5] * A)``: 0 north, 1 east, 2 south, 3 west,
    4 stop, ``5 + e`` attack enemy ``e``. A move goes ``speed * dt`` per world step, clipped to
    the map; an attack fires at every world step whose weapon cooldown is ``<= 0`` while the
    target lives and is within attack range (the attacker does not move). An action that is
    illegal under the action mask (a move or attack by a dead unit, an attack on a dead or
    out-of-range enemy) or out of range acts as stop (4), as JaxMARL's step treats it except
    that the unit's ``last_action`` records stop.

    Observation: float32 ``(A, 13 (U - 1) + 10)``, JaxMARL's ``unit_list`` observation. Row
    ``i`` holds ``U - 1`` slots of 13 features, the other allies in index order then the enemies
    in index order: health / max health, ``(dx, dy) / sight``, the unit's last move
    ``(x, y)`` (a unit vector or 0), its last attack action / (its action count - 1), weapon
    cooldown / its period clipped to [0, 1], a one-hot unit type (6); all zero unless the unit
    lives, the observer lives and the unit is closer than the observer's sight range (enemy
    moves and targets also zero with ``see_enemy_actions=False``). Then 10 own features: health
    / max, ``(x / map_width, y / map_height)``, cooldown fraction, one-hot type; zero when dead.

    Reward: float32 ``(A,)``, the team reward for every ally alive when the step began, 0 for the
    dead (so the team reward is ``reward.max()``): the enemies' lost hit points this step, each
    as a fraction of its maximum, summed and divided by ``E``, plus ``won_battle_bonus`` (1) when
    the last enemy dies and an ally lives. JaxMARL gives the team reward to dead agents too.

    Terminated: bool ``(A,)``, True for a dead ally; all True once either team is dead.

    Truncated: bool ``(A,)``, all True once ``time >= max_episode_steps`` (100; JaxMARL's
    ``max_steps=100`` runs 101 steps, ``max_episode_steps=101`` here).

    Info: ``action_mask``, bool ``(A, E + 5)``, the legal actions in the returned state (also
    :meth:`action_mask`): moves while alive, stop always, attacks on living enemies closer than
    the ally's attack range; ``won``, bool ``()``, True on the step the last enemy dies while an
    ally lives (the step that pays the bonus; a draw, both teams dead, is not won). Its value on
    an episode's last step says whether the episode was won (the win rate is its mean over
    episodes: ``evaluate_agent(final_info=("won",))``, lamella-marl's ``eval_info=("won",)``).
    JaxMARL's SMAX has no such entry (its log wrapper counts a step reward >= 1 as a win).

    Global state (:meth:`global_state`): float32 ``(12 U,)``, JaxMARL's ``world_state``: per unit
    ``(health / max, x, y, weapon cooldown, one-hot type)`` (zeros when dead), then the teams
    (0 ally, 1 enemy) and the type indices.

    Enemies (JaxMARL's heuristic, ``attack_mode="closest"``): an enemy with an ally in attack
    range attacks it (the ally it attacked last while still in range, else the closest, or a
    random one with ``attack_mode="random"``); otherwise it walks in the cardinal direction
    closest to a random visible ally (drawn anew each step) or, seeing none, to its start
    position reflected through the map centre. Enemy ``e`` numbers allies in reverse (its
    attack ``5 + k`` hits ally ``A - 1 - k``), as its own observation would.

    Dynamics, per world step: every living unit moves, then the shots of the step resolve
    simultaneously from the positions before the move (damage summed, hit points floored at
    0; a unit that fires gets a new cooldown ``period - dt + 3 dt u``, ``u`` uniform, the others
    lose ``dt``); a unit on or beyond the map edge dies (``walls_cause_death``); then each pair
    of living units closer than the sum of their radii is pushed apart, each by half the overlap
    along the line between them. Reset puts the allies uniformly within 2 of ``(W/4, H/2)`` and
    the enemies within 2 of ``(3W/4, H/2)`` (per coordinate), pushed apart once.

    State: :class:`~lamella.envs.multi_agent.smax.SMAXState`. Params:
    :class:`~lamella.envs.multi_agent.smax.SMAXParams`. Random numbers:
    :class:`~lamella.envs.multi_agent.smax.SMAXNoise` (lamella's hashed uniforms, not JaxMARL's
    Threefry draws); :meth:`transition` takes them explicitly.

    Args:
        scenario: a name of :data:`SCENARIOS` (``"3m"``, ``"2s3z"``, ``"6h_vs_8z"``, ...), or a
            pair ``(allies, enemies)`` of unit letters (``("ssZZZ", "ssZZZ")``, letters of
            :data:`UNIT_SHORTHANDS`) or type names.
        attack_mode: ``"closest"`` (JaxMARL's default) or ``"random"``: how an enemy picks a
            new target among the allies in range.
        map_width, map_height: the map's size (32).
        world_steps_per_env_step: ``W`` (8).
        time_per_step: ``dt`` in seconds (1/16).
        max_episode_steps, won_battle_bonus, walls_cause_death, see_enemy_actions,
            enemy_shoots: defaults of the params (:class:`SMAXParams`).
    """

    stochastic_step = True
    sparse_reset = True  # a reset places every unit; a battle lasts tens of steps

    def __init__(
        self,
        scenario: str | tuple[Any, Any] = "3m",
        attack_mode: str = "closest",
        map_width: float = 32.0,
        map_height: float = 32.0,
        world_steps_per_env_step: int = 8,
        time_per_step: float = 1.0 / 16,
        max_episode_steps: int = 100,
        won_battle_bonus: float = 1.0,
        walls_cause_death: bool = True,
        see_enemy_actions: bool = True,
        enemy_shoots: bool = True,
    ):
        if isinstance(scenario, str):
            if scenario not in SCENARIOS:
                raise ValueError(
                    f"SMAX: unknown scenario {scenario!r}; choose one of {sorted(SCENARIOS)}, or pass "
                    "(allies, enemies) unit letters such as ('ssZZZ', 'ssZZZ')."
                )
            self.scenario_name = scenario
            allies, enemies = SCENARIOS[scenario]
        else:
            if len(scenario) != 2:
                raise ValueError(f"SMAX: a custom scenario is (allies, enemies), got {scenario!r}.")
            allies, enemies = scenario
            self.scenario_name = "custom"
        ally_types, enemy_types = _units(allies, "ally"), _units(enemies, "enemy")
        if attack_mode not in ATTACK_MODES:
            raise ValueError(f"SMAX: attack_mode must be one of {ATTACK_MODES}, got {attack_mode!r}.")
        for name, value in (("map_width", map_width), ("map_height", map_height)):
            if not 8.0 < float(value) < np.inf:  # inf put the units at inf and NaN in every observation
                raise ValueError(
                    f"SMAX: {name} must be a finite number > 8 (the teams start 2 units around a quarter), "
                    f"got {value!r}."
                )
        integer_setting(world_steps_per_env_step, "world_steps_per_env_step", "SMAX", minimum=1)
        if not 0.0 < float(time_per_step) < np.inf:
            raise ValueError(f"SMAX: time_per_step must be a finite number > 0, got {time_per_step!r}.")
        integer_setting(max_episode_steps, "max_episode_steps", "SMAX", minimum=1)
        self.num_allies, self.num_enemies = len(ally_types), len(enemy_types)
        self.num_units = self.num_allies + self.num_enemies
        self.num_agents = self.num_allies  # type: ignore[misc]
        self.attack_mode = attack_mode
        self.map_width, self.map_height = float(map_width), float(map_height)
        self.world_steps = int(world_steps_per_env_step)
        self.time_per_step = float(time_per_step)
        self.unit_types = np.asarray(ally_types + enemy_types, np.int32)
        self.num_actions = self.num_enemies + NUM_MOVE_ACTIONS
        self.agent_names = tuple(f"ally_{i}" for i in range(self.num_allies))
        self._defaults = SMAXParams(
            int(max_episode_steps),
            float(won_battle_bonus),
            bool_setting(walls_cause_death, "walls_cause_death", "SMAX"),
            bool_setting(see_enemy_actions, "see_enemy_actions", "SMAX"),
            bool_setting(enemy_shoots, "enemy_shoots", "SMAX"),
        )
        # Per-unit constants (static: the unit types of a scenario never change).
        stats = UNIT_STATS[self.unit_types]
        self._step_length = stats[:, _SPEED] * np.float32(self.time_per_step)  # exact: dt = 2^-k
        self._damage = stats[:, _DAMAGE]
        self._range = stats[:, _RANGE]
        self._sight = stats[:, _SIGHT]
        self._radius = stats[:, _RADIUS]
        self._max_health = stats[:, _HEALTH]
        self._period = stats[:, _COOLDOWN]
        self._radius_sum = self._radius[:, None] + self._radius[None, :]
        self._type_onehot = np.eye(len(UNIT_TYPES), dtype=np.float32)[self.unit_types]
        self._is_enemy = np.arange(self.num_units) >= self.num_allies
        # Each unit's own action count minus one: the denominator of its "last target" feature.
        self._action_scale = np.where(
            self._is_enemy, self.num_allies + NUM_MOVE_ACTIONS - 1, self.num_enemies + NUM_MOVE_ACTIONS - 1
        ).astype(np.float32)
        # Worst-case push per world step: half of each neighbour's radius sum (the bound of the
        # observation space's own-position features, which a push can carry past the edge).
        self._push_margin = float((self.num_units - 1) * self._radius.max())

    # Sizes and spaces ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"SMAX-{self.scenario_name}-v0"

    @property
    def default_params(self) -> SMAXParams:
        return self._defaults

    @property
    def observation_size(self) -> int:
        return _OTHER_FEATURES * (self.num_units - 1) + _OWN_FEATURES

    def observation_space(self, params: SMAXParams | None = None) -> spaces.Box:
        num_types = len(UNIT_TYPES)
        other_low = [0.0, -1.0, -1.0, -1.0, -1.0, 0.0, 0.0] + [0.0] * num_types
        other_high = [1.0] * _OTHER_FEATURES
        margin_x = self._push_margin / self.map_width
        margin_y = self._push_margin / self.map_height
        own_low = [0.0, -margin_x, -margin_y, 0.0] + [0.0] * num_types
        own_high = [1.0, 1.0 + margin_x, 1.0 + margin_y, 1.0] + [1.0] * num_types
        low = other_low * (self.num_units - 1) + own_low
        high = other_high * (self.num_units - 1) + own_high
        shape = (self.num_allies, self.observation_size)
        return spaces.Box(np.broadcast_to(low, shape), np.broadcast_to(high, shape), shape)

    def action_space(self, params: SMAXParams | None = None) -> spaces.MultiDiscrete:
        return spaces.MultiDiscrete([self.num_actions] * self.num_allies)

    def global_state_space(self, params: SMAXParams | None = None) -> spaces.Box:
        """The space of :meth:`global_state`: float32 ``(12 U,)``. Cooldowns fall without bound."""
        m = self._push_margin
        per_unit_low = [0.0, -m, -m, -np.inf] + [0.0] * len(UNIT_TYPES)
        per_unit_high = [
            1.0,
            self.map_width + m,
            self.map_height + m,
            float(self._period.max()) + 2 * self.time_per_step,
        ]
        per_unit_high += [1.0] * len(UNIT_TYPES)
        u = self.num_units
        low = per_unit_low * u + [0.0] * u + [0.0] * u
        high = per_unit_high * u + [1.0] * u + [len(UNIT_TYPES) - 1.0] * u
        return spaces.Box(np.asarray(low), np.asarray(high), (len(low),))

    # Observations ---------------------------------------------------------------------------

    def _unit_features(self, state: SMAXState, params: SMAXParams) -> list[jax.Array]:
        """Per unit, the features another unit observes after the relative position: last move
        x, y, last target, cooldown fraction (four ``(U,)`` arrays)."""
        action = state.last_action
        move_x = (action == EAST).astype(jnp.float32) - (action == WEST).astype(jnp.float32)
        move_y = (action == NORTH).astype(jnp.float32) - (action == SOUTH).astype(jnp.float32)
        attack = jnp.where(action >= NUM_MOVE_ACTIONS, action, 0).astype(jnp.float32) / self._action_scale
        seen = jnp.where(self._is_enemy, jnp.asarray(params.see_enemy_actions), True)
        move_x, move_y, attack = (jnp.where(seen, v, 0.0) for v in (move_x, move_y, attack))
        cooldown = jnp.clip(state.weapon_cooldown / self._period, 0.0, 1.0)
        return [move_x, move_y, attack, cooldown]

    def get_obs(self, state: SMAXState, params: SMAXParams | None = None) -> jax.Array:
        """Every ally's observation, float32 ``(A, 13 (U - 1) + 10)`` (see the class docs)."""
        check_one_state(self, state, "get_obs")
        params = self.default_params if params is None else params
        a, u = self.num_allies, self.num_units
        alive = state.health > 0
        x, y = state.positions[:, 0], state.positions[:, 1]
        # Pairwise features as separate (A, U) arrays (unit j seen by ally i), stacked once at
        # the end: (A, U, 13) arrays with a short minor axis do not vectorise on CPU.
        dx = x[None, :] - x[:a, None]
        dy = y[None, :] - y[:a, None]
        distance = jnp.sqrt(dx * dx + dy * dy)
        sight = self._sight[:a, None]
        visible = (distance < sight) & alive[:a, None] & alive[None, :]
        health = state.health / self._max_health
        per_unit = [health, *self._unit_features(state, params)]
        columns = [per_unit[0][None, :], dx / sight, dy / sight, *(f[None, :] for f in per_unit[1:])]
        columns += [jnp.asarray(self._type_onehot[:, t])[None, :] for t in range(len(UNIT_TYPES))]
        # Drop each ally's own column: slot k is unit k before the observer, unit k + 1 after.
        before = np.arange(u - 1)[None, :] < np.arange(a)[:, None]
        visible_slots = jnp.where(before, visible[:, :-1], visible[:, 1:])
        slots = []
        for column in columns:
            column = jnp.broadcast_to(column, (a, u))
            column = jnp.where(before, column[:, :-1], column[:, 1:])
            slots.append(jnp.where(visible_slots, column, 0.0))
        others = jnp.stack(slots, -1).reshape(a, -1)
        own = jnp.stack(
            [
                health[:a],
                x[:a] / np.float32(self.map_width),
                y[:a] / np.float32(self.map_height),
                per_unit[4][:a],
            ],
            -1,
        )
        own = jnp.concatenate([own, jnp.asarray(self._type_onehot[:a])], -1)
        own = jnp.where(alive[:a, None], own, 0.0)
        return jnp.concatenate([others, own], -1)

    def observation_of(self, state: SMAXState, params: SMAXParams | None = None) -> jax.Array:
        check_one_state(self, state, "observation_of")
        return self.get_obs(state, params)

    def global_state(self, state: SMAXState, params: SMAXParams | None = None) -> jax.Array:
        """JaxMARL's ``world_state``, float32 ``(12 U,)`` (see the class docs)."""
        check_one_state(self, state, "global_state")
        alive = state.health > 0
        per_unit = jnp.concatenate(
            [
                (state.health / self._max_health)[:, None],
                state.positions,
                state.weapon_cooldown[:, None],
                jnp.asarray(self._type_onehot),
            ],
            -1,
        )
        per_unit = jnp.where(alive[:, None], per_unit, 0.0)
        static = np.concatenate([self._is_enemy.astype(np.float32), self.unit_types.astype(np.float32)])
        return jnp.concatenate([per_unit.reshape(-1), jnp.asarray(static)])

    def action_mask(self, state: SMAXState, params: SMAXParams | None = None) -> jax.Array:
        """Legal actions in ``state``, bool ``(A, E + 5)`` (JaxMARL's ``get_avail_actions``)."""
        check_one_state(self, state, "action_mask")
        a = self.num_allies
        alive = state.health > 0
        delta = state.positions[None, a:, :] - state.positions[:a, None, :]  # (A, E, 2)
        distance = jnp.sqrt(delta[..., 0] * delta[..., 0] + delta[..., 1] * delta[..., 1])
        in_range = (distance < self._range[:a, None]) & alive[None, a:] & alive[:a, None]
        moves = jnp.broadcast_to(alive[:a, None], (a, 4))
        return jnp.concatenate([moves, jnp.ones((a, 1), jnp.bool_), in_range], -1)

    # The heuristic enemy ----------------------------------------------------------------------

    def _enemy_policy(
        self, state: SMAXState, noise: SMAXNoise, params: SMAXParams
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(actions (E,), enemy_target, enemy_last_attacked)``: JaxMARL's heuristic, computed from
        the quantities its observation holds (positions scaled by the sight range and back)."""
        a = self.num_allies
        alive = state.health > 0
        pos = state.positions
        scale = np.array([self.map_width, self.map_height], np.float32)
        own = (pos[a:] / scale) * scale  # (E, 2), as decoded from the observation
        sight = self._sight[a:, None, None]
        # Allies in the enemy's slot order: the last ally first.
        delta = pos[None, a - 1 :: -1, :] - pos[a:, None, :]  # (E, A, 2)
        distance = jnp.sqrt(delta[..., 0] * delta[..., 0] + delta[..., 1] * delta[..., 1])
        ally_alive = alive[a - 1 :: -1]
        visible = (distance < sight[..., 0]) & alive[a:, None] & ally_alive[None, :]
        relative = (delta / sight) * sight
        reach = jnp.sqrt(relative[..., 0] * relative[..., 0] + relative[..., 1] * relative[..., 1])
        shootable = (reach < self._range[a:, None]) & visible
        can_shoot = jnp.any(shootable, -1)
        slots = np.arange(a)
        if self.attack_mode == "closest":
            far = np.float32(np.sqrt(self.map_width**2 + self.map_height**2))
            new_slot = jnp.argmin(jnp.where(shootable, reach, far), -1)
        else:
            new_slot = _pick(shootable, noise.enemy_attack)
        last = state.enemy_last_attacked
        keep = (last != -1) & jnp.any(shootable & (slots == last[:, None]), -1)
        slot = jnp.where(keep, last, new_slot)
        last = jnp.where(jnp.any(shootable & (slots == slot[:, None]), -1), slot, -1)

        chosen = _pick(visible, noise.enemy_target)
        chase = jnp.sum(jnp.where((slots == chosen[:, None])[..., None], relative, 0.0), 1) + own
        first_step = jnp.all(state.enemy_target == 0.0, -1) & (state.enemy_last_attacked == -1)
        centre = scale / 2
        home = jnp.where(first_step[:, None], centre - (own - centre), state.enemy_target)
        goal = jnp.where(jnp.any(visible, -1)[:, None], chase, home)
        way = goal - own
        move = jnp.argmax(jnp.stack([way[:, 1], way[:, 0], -way[:, 1], -way[:, 0]], -1), -1)
        shoot = can_shoot & jnp.asarray(params.enemy_shoots)
        action = jnp.where(shoot, slot + NUM_MOVE_ACTIONS, move).astype(jnp.int32)
        return action, home, last.astype(jnp.int32)

    # Reset and step ---------------------------------------------------------------------------

    def _push_apart(self, x: jax.Array, y: jax.Array, alive: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Each pair of living units closer than their radius sum pushed apart by half the overlap.

        The coordinates are separate ``(U,)`` arrays: pairwise arrays with a minor axis of 2
        (``(U, U, 2)``) do not vectorise on CPU, and this runs ``W`` times per step.
        """
        dx = x[:, None] - x[None, :]
        dy = y[:, None] - y[None, :]
        distance = jnp.sqrt(dx * dx + dy * dy) + np.eye(self.num_units, dtype=np.float32) + np.float32(1e-6)
        overlap = jax.nn.relu(self._radius_sum / distance - 1.0)
        overlap = jnp.where(alive[:, None] & alive[None, :], overlap, 0.0)
        pushed_x = x + jnp.sum(dx * overlap, 1) / 2
        pushed_y = y + jnp.sum(dy * overlap, 1) / 2
        return jnp.where(alive, pushed_x, x), jnp.where(alive, pushed_y, y)

    def _initial_state(self, offsets: jax.Array) -> SMAXState:
        """The state whose units start at the team centres plus ``offsets`` (``(U, 2)``), pushed apart."""
        a, e = self.num_allies, self.num_enemies
        start = np.array(
            [[self.map_width / 4, self.map_height / 2]] * a
            + [[self.map_width / 4 * 3, self.map_height / 2]] * e,
            np.float32,
        )
        placed = jnp.asarray(start) + offsets
        x, y = self._push_apart(placed[:, 0], placed[:, 1], jnp.ones((self.num_units,), jnp.bool_))
        return SMAXState(
            positions=jnp.stack([x, y], -1),
            health=jnp.asarray(self._max_health),
            weapon_cooldown=jnp.zeros((self.num_units,), jnp.float32),
            last_action=jnp.full((self.num_units,), STOP, jnp.int32),
            enemy_target=jnp.zeros((e, 2), jnp.float32),
            enemy_last_attacked=jnp.full((e,), -1, jnp.int32),
            time=jnp.zeros((), jnp.int32),
        )

    def reset_env(self, key: jax.Array, params: SMAXParams) -> tuple[jax.Array, SMAXState]:
        # One compiled program even when called eagerly (op by op, a reset is dozens of tiny
        # programs); inside an outer jit or vmap the inner jit is inlined.
        return self._reset_compiled(key, params)

    @functools.partial(jax.jit, static_argnums=0)
    def _reset_compiled(self, key: jax.Array, params: SMAXParams) -> tuple[jax.Array, SMAXState]:
        u = fast_random.uniform(key, (self.num_units, 2), vector=True)
        state = self._initial_state(4.0 * u - 2.0)
        return self.get_obs(state, params), state

    def draw_noise(self, key: jax.Array) -> SMAXNoise:
        """The random numbers of one step from ``key`` (lamella's hashed uniforms)."""
        w, u, e = self.world_steps, self.num_units, self.num_enemies
        draws = fast_random.uniform(key, (w * u + 2 * e,), vector=True)
        return SMAXNoise(
            cooldown=draws[: w * u].reshape(w, u),
            enemy_target=draws[w * u : w * u + e],
            enemy_attack=draws[w * u + e :],
        )

    def step_env(self, key: jax.Array, state: SMAXState, action: Any, params: SMAXParams) -> StepOutput:
        return self.transition(state, action, self.draw_noise(key), params)

    def transition(self, state: SMAXState, action: Any, noise: SMAXNoise, params: SMAXParams) -> StepOutput:
        """One step with the given random numbers: what :meth:`step` returns for ``draw_noise(key)``."""
        a, u = self.num_allies, self.num_units
        action = jnp.asarray(action)
        if action.shape != (a,) or not jnp.issubdtype(action.dtype, jnp.integer):
            raise ValueError(
                f"{self.name}: action must be int32 of shape ({a},) (one action per ally), "
                f"got {action.dtype} {action.shape}."
            )
        action = action.astype(jnp.int32)
        mask = self.action_mask(state, params)
        in_range = (action >= 0) & (action < self.num_actions)
        clipped = jnp.clip(action, 0, self.num_actions - 1)
        legal = in_range & jnp.take_along_axis(mask, clipped[:, None], 1)[:, 0]
        ally_action = jnp.where(legal, clipped, STOP)
        health_before = state.health
        alive_before = health_before > 0
        enemy_action, enemy_target, enemy_last = self._enemy_policy(state, noise, params)
        enemy_action = jnp.where(alive_before[a:], enemy_action, STOP)
        actions = jnp.concatenate([ally_action, enemy_action])

        move = jnp.stack(
            [
                (actions == EAST).astype(jnp.float32) - (actions == WEST).astype(jnp.float32),
                (actions == NORTH).astype(jnp.float32) - (actions == SOUTH).astype(jnp.float32),
            ],
            -1,
        )
        # Each unit's target unit (-1: none). Enemies number the allies in reverse.
        k = actions - NUM_MOVE_ACTIONS
        target = jnp.where(k >= 0, jnp.where(self._is_enemy, a - 1 - k, a + k), -1)
        targets = target[:, None] == np.arange(u)[None, :]  # (U, U) one-hot rows
        step_x = move[:, 0] * self._step_length
        step_y = move[:, 1] * self._step_length
        width, height = np.float32(self.map_width), np.float32(self.map_height)
        dt = np.float32(self.time_per_step)
        walls_kill = jnp.asarray(params.walls_cause_death)

        Carry = tuple[jax.Array, jax.Array, jax.Array, jax.Array]

        def world_step(carry: Carry, jitter: jax.Array) -> tuple[Carry, None]:
            x, y, health, cooldown = carry
            alive = health > 0
            moved_x = jnp.where(alive, jnp.clip(x + step_x, 0.0, width), x)
            moved_y = jnp.where(alive, jnp.clip(y + step_y, 0.0, height), y)
            # Shots, from the positions before the move.
            aim_x = jnp.sum(jnp.where(targets, x[None, :], 0.0), 1) - x
            aim_y = jnp.sum(jnp.where(targets, y[None, :], 0.0), 1) - y
            distance = jnp.sqrt(aim_x * aim_x + aim_y * aim_y)
            target_alive = jnp.any(targets & alive[None, :], 1)
            fires = target_alive & alive & (distance < self._range) & (cooldown <= 0.0)
            damage = jnp.sum(jnp.where(targets & fires[:, None], self._damage[:, None], 0.0), 0)
            health = jnp.maximum(health - damage, 0.0)
            deviation = jnp.maximum(-dt, jitter * (3 * dt) + (-dt))
            cooldown = cooldown + jnp.where(fires, (self._period + deviation) - cooldown, -dt)
            touching = (moved_x <= 0.0) | (moved_y <= 0.0) | (moved_x >= width) | (moved_y >= height)
            health = jnp.where(touching & walls_kill, 0.0, health)
            x, y = self._push_apart(moved_x, moved_y, health > 0)
            return (x, y, health, cooldown), None

        start = (state.positions[:, 0], state.positions[:, 1], state.health, state.weapon_cooldown)
        (x, y, health, cooldown), _ = jax.lax.scan(world_step, start, noise.cooldown)
        positions = jnp.stack([x, y], -1)
        alive = health > 0
        lost_fraction = (health - health_before) / self._max_health
        team_reward = jnp.abs(jnp.sum(lost_fraction[a:])) / self.num_enemies
        won, lost = ~jnp.any(alive[a:]), ~jnp.any(alive[:a])
        team_reward = team_reward + jnp.where(
            won & ~lost, jnp.asarray(params.won_battle_bonus, jnp.float32), 0.0
        )
        state = SMAXState(
            positions=positions,
            health=health,
            weapon_cooldown=cooldown,
            last_action=actions,
            enemy_target=enemy_target,
            enemy_last_attacked=enemy_last,
            time=state.time + 1,
        )
        reward = jnp.where(alive_before[:a], team_reward, 0.0).astype(jnp.float32)
        terminated = ~alive[:a] | won | lost
        truncated = jnp.broadcast_to(state.time >= params.max_episode_steps, (a,))
        # The battle is won (and the bonus paid) when every enemy is dead and an ally still lives.
        info = {"action_mask": self.action_mask(state, params), "won": won & ~lost}
        return self.get_obs(state, params), state, reward, terminated, truncated, info

    def render(self, state: SMAXState, params: SMAXParams | None = None) -> jax.Array:
        """The battle, uint8 ``(256, 256, 3)``: see :func:`~lamella.envs.multi_agent.smax.render.render`."""
        check_one_state(self, state, "render")
        return smax_render.render(self, state)

    def __repr__(self) -> str:
        allies = "".join(UNIT_SHORTHANDS[t] for t in self.unit_types[: self.num_allies])
        enemies = "".join(UNIT_SHORTHANDS[t] for t in self.unit_types[self.num_allies :])
        return f"SMAX({self.scenario_name!r}, allies={allies!r}, enemies={enemies!r}, attack_mode={self.attack_mode!r})"


def _pick(mask: jax.Array, u: jax.Array) -> jax.Array:
    """Per row, the ``ceil(count (1 - u))``-th True entry of ``mask`` (``(R, K)``; ``u`` ``(R,)``):
    a uniform choice among the True entries by the inverse CDF, as ``jax.random.choice`` with
    ``p = mask / count`` draws it."""
    count = jnp.sum(mask, -1).astype(jnp.float32)
    cumulative = jnp.cumsum(mask, -1).astype(jnp.float32)
    chosen = mask & (cumulative >= (count * (1.0 - u))[:, None])
    return jnp.argmax(chosen, -1)
