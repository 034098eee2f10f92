"""Seaquest-MinAtar: a submarine shoots fish and enemy subs, rescues divers and surfaces for air."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import struct
from lamella.envs._inputs import integer_setting
from lamella.envs.environment import StepOutput
from lamella.envs.minatar._common import (
    DOWN,
    FIRE,
    FULL_ACTION_SET,
    LEFT,
    RIGHT,
    ROW_IDS,
    UP,
    MinAtarEnv,
    cell_row,
    grid,
    sticky_action,
)

__all__ = ["Seaquest", "SeaquestDraws", "SeaquestParams", "SeaquestState"]

MAX_OXYGEN = 200
INIT_SPAWN_SPEED = 20
DIVER_SPAWN_SPEED = 30
INIT_MOVE_INTERVAL = 5
SHOT_COOL_DOWN = 5
ENEMY_SHOT_INTERVAL = 10
DIVER_MOVE_INTERVAL = 5
MAX_DIVERS = 4  # divers spawn every 30 steps and live at most 61: never more than 3
MAX_BULLETS = 4  # one shot every 5 steps, each lives at most 10: never more than 3
FULL_ROW = (1 << 10) - 1


class SeaquestState(struct.PyTreeNode):
    sub_x: jax.Array  # int32 (): the player's sub, front cell column
    sub_y: jax.Array  # int32 (): its row, 0 (surface) - 8
    sub_right: jax.Array  # bool (): facing right (the back cell is on the left)
    oxygen: jax.Array  # int32 (): 0-200, refilled when surfacing
    diver_count: jax.Array  # int32 (): rescued divers aboard (minatar's count; -1 after a full surfacing)
    bullet_x: jax.Array  # int32 (4,): the player's bullets: column
    bullet_y: jax.Array  # int32 (4,): row
    bullet_right: jax.Array  # bool (4,): moving right
    bullet_alive: jax.Array  # bool (4,): slot in use
    enemy_bullets_right: jax.Array  # int32 (10,): enemy bullets moving right, row masks (bit c = column c)
    enemy_bullets_left: jax.Array  # int32 (10,): enemy bullets moving left, row masks
    enemy_x: jax.Array  # int32 (E,): fish and enemy subs: column
    enemy_y: jax.Array  # int32 (E,): row, 1-8
    enemy_right: jax.Array  # bool (E,): moving right
    enemy_is_sub: jax.Array  # bool (E,): an enemy sub (shoots) rather than a fish
    enemy_alive: jax.Array  # bool (E,): slot in use
    enemy_move_timer: jax.Array  # int32 (E,): steps until it moves (at 0)
    enemy_shot_timer: jax.Array  # int32 (E,): steps until a sub shoots (at 0)
    enemy_order: jax.Array  # int32 (E,): spawn number (minatar's list order: older first)
    diver_x: jax.Array  # int32 (4,): divers: column
    diver_y: jax.Array  # int32 (4,): row, 1-8
    diver_right: jax.Array  # bool (4,): moving right
    diver_alive: jax.Array  # bool (4,): slot in use
    diver_timer: jax.Array  # int32 (4,): steps until it moves (at 0)
    diver_order: jax.Array  # int32 (4,): spawn number
    spawned: jax.Array  # int32 (): enemies and divers spawned so far (the next spawn number)
    enemy_spawn_speed: jax.Array  # int32 (): steps between enemy spawns (ramps 20 -> 1)
    enemy_spawn_timer: jax.Array  # int32 (): steps until the next enemy spawn (at 0)
    diver_spawn_timer: jax.Array  # int32 (): steps until the next diver spawn (at 0)
    move_speed: jax.Array  # int32 (): steps between enemy moves (ramps 5 -> 2)
    ramp_index: jax.Array  # int32 (): difficulty increases so far
    shot_timer: jax.Array  # int32 (): steps until the player can fire again
    surface: jax.Array  # bool (): the sub is at the surface and has already surfaced
    last_action: jax.Array  # int32 (): last action taken, in the full set (sticky actions repeat it)
    time: jax.Array  # int32 (): steps taken in this episode


class SeaquestParams(struct.PyTreeNode):
    sticky_action_prob: float = struct.field(default=0.1, bounds=(0.0, 1.0))
    difficulty_ramping: bool = True
    max_steps_in_episode: int = struct.field(default=1000, bounds=(1, None))


class SeaquestDraws(struct.PyTreeNode):
    sticky: jax.Array  # float32 (): the action sticks when below sticky_action_prob
    enemy_right: jax.Array  # float32 (): a spawned enemy moves right when below 1/2
    enemy_sub: jax.Array  # float32 (): it is a sub when below 1/3
    enemy_row: jax.Array  # float32 (): its row is 1 + floor(8 u)
    diver_right: jax.Array  # float32 (): a spawned diver moves right when below 1/2
    diver_row: jax.Array  # float32 (): its row is 1 + floor(8 u)


def _row(u: jax.Array) -> jax.Array:
    return 1 + jnp.minimum(jnp.floor(u * 8.0).astype(jnp.int32), 7)


def _first_free(alive: jax.Array) -> jax.Array:
    """Bool mask of the first free slot (all False when every slot is in use)."""
    free = ~alive
    return free & (jnp.cumsum(free, dtype=jnp.int32) == 1)


def _row_masks(x: jax.Array, y: jax.Array, present: jax.Array) -> jax.Array:
    """``(10,)`` int32 row masks with bit ``x`` of row ``y`` set for every present entity."""
    bits = jnp.where(present & (x >= 0) & (x <= 9), jnp.int32(1) << jnp.clip(x, 0, 9), 0)
    return jnp.bitwise_or.reduce(jnp.where(ROW_IDS[:, None] == y, bits, 0), axis=1)


def _step(x: jax.Array, right: jax.Array) -> jax.Array:
    return x + jnp.where(right, 1, -1)


class Seaquest(MinAtarEnv):
    """Seaquest on MinAtar's 10 x 10 grid (the ``minatar`` package's rules).

    The player's sub (two cells: front and back, so its heading shows) moves in
    rows 0-8 and fires sideways (once every 5 steps). Fish and enemy subs
    enter from the sides of rows 1-8 (never against the direction of an enemy
    already in that row), move one cell every ``move_speed`` + 1 steps, and
    enemy subs shoot every 11 steps. Divers drift across and are picked up by
    touching them (up to 6 aboard). Oxygen runs down below the surface; coming
    up with divers refills it and drops one diver (or all six, for a bonus), and
    raises the difficulty (faster spawns, and every other time faster enemies).

    Observation: bool ``(10, 10, 10)``: 0 sub front, 1 sub back, 2 friendly
    bullet, 3 trail (the cell behind a fish, enemy sub or diver), 4 enemy
    bullet, 5 fish, 6 enemy sub, 7 oxygen gauge (row 9, one cell per 20
    oxygen), 8 diver gauge (row 9, right side), 9 diver.
    Action: Discrete(6) int32 ``()`` = ``n l u r d f`` (the minimal set is the
    full set in Seaquest).
    Sticky actions: with probability ``params.sticky_action_prob`` (0.1) the
    previous action is taken instead of the chosen one.
    Reward: +1.0 per fish or enemy sub shot; surfacing with six divers gives
    ``oxygen * 10 // 200`` more.
    Terminated: touching a fish, an enemy sub or an enemy bullet; running out
    of oxygen; surfacing with no diver aboard.
    Truncated: after ``params.max_steps_in_episode`` (1000, as gymnax) steps.
    Reset: sub at row 0, column 5 facing left, full oxygen, nothing else.
    State: :class:`SeaquestState`; entities live in fixed-size slot arrays
    with an ``alive`` mask and a spawn number that reproduces minatar's list
    order (which fish a bullet hits when two share a cell, which diver is
    picked up first).
    Params: ``difficulty_ramping`` (True) as minatar's constructor flag.
    Randomness: the step draws the sticky action and the enemy and diver
    spawns (side, kind, row); ``stochastic_step`` is True.

    Args:
        use_minimal_action_set: accepted for symmetry; Seaquest's minimal set is all six actions.
        max_enemies: slots for fish and enemy subs together (32); a spawn that
            finds them all in use is dropped. At the hardest difficulty about
            30 are alive at once.
    """

    channels = (
        "sub_front",
        "sub_back",
        "friendly_bullet",
        "trail",
        "enemy_bullet",
        "enemy_fish",
        "enemy_sub",
        "oxygen_guage",
        "diver_guage",
        "diver",
    )
    minimal_actions = FULL_ACTION_SET

    def __init__(self, use_minimal_action_set: bool = True, max_enemies: int = 32):
        self.max_enemies = integer_setting(max_enemies, "max_enemies", "Seaquest", minimum=1)
        super().__init__(use_minimal_action_set)

    @property
    def default_params(self) -> SeaquestParams:
        return SeaquestParams()

    def start(self, key: jax.Array, params: SeaquestParams) -> tuple[jax.Array, SeaquestState]:
        return jnp.asarray(self._start_obs), self._start_state()

    @functools.cached_property
    def _start_obs(self) -> np.ndarray:
        with jax.ensure_compile_time_eval():
            return np.asarray(self.get_obs(self._start_state()))

    def _start_state(self) -> SeaquestState:
        zero = jnp.zeros((), jnp.int32)
        ints = lambda n: jnp.zeros((n,), jnp.int32)  # noqa: E731
        bools = lambda n: jnp.zeros((n,), bool)  # noqa: E731
        e = self.max_enemies
        return SeaquestState(
            sub_x=zero + 5,
            sub_y=zero,
            sub_right=jnp.zeros((), bool),
            oxygen=zero + MAX_OXYGEN,
            diver_count=zero,
            bullet_x=ints(MAX_BULLETS),
            bullet_y=ints(MAX_BULLETS),
            bullet_right=bools(MAX_BULLETS),
            bullet_alive=bools(MAX_BULLETS),
            enemy_bullets_right=ints(10),
            enemy_bullets_left=ints(10),
            enemy_x=ints(e),
            enemy_y=ints(e),
            enemy_right=bools(e),
            enemy_is_sub=bools(e),
            enemy_alive=bools(e),
            enemy_move_timer=ints(e),
            enemy_shot_timer=ints(e),
            enemy_order=ints(e),
            diver_x=ints(MAX_DIVERS),
            diver_y=ints(MAX_DIVERS),
            diver_right=bools(MAX_DIVERS),
            diver_alive=bools(MAX_DIVERS),
            diver_timer=ints(MAX_DIVERS),
            diver_order=ints(MAX_DIVERS),
            spawned=zero,
            enemy_spawn_speed=zero + INIT_SPAWN_SPEED,
            enemy_spawn_timer=zero + INIT_SPAWN_SPEED,
            diver_spawn_timer=zero + DIVER_SPAWN_SPEED,
            move_speed=zero + INIT_MOVE_INTERVAL,
            ramp_index=zero,
            shot_timer=zero,
            surface=jnp.ones((), bool),
            last_action=zero,
            time=zero,
        )

    def draw(self, key: jax.Array, params: SeaquestParams) -> SeaquestDraws:
        u = fast_random.uniform(key, (6,))
        return SeaquestDraws(*(u[i] for i in range(6)))

    def transition(
        self, state: SeaquestState, action: Any, draws: SeaquestDraws, params: SeaquestParams
    ) -> StepOutput:
        s = state
        a = sticky_action(action, s.last_action, draws.sticky, params.sticky_action_prob, self.action_set)

        # Spawns. An enemy is not spawned into a row holding an enemy that moves the other way.
        spawn_enemy = s.enemy_spawn_timer == 0
        new_right = draws.enemy_right < 0.5
        new_row = _row(draws.enemy_row)
        blocked = jnp.any(s.enemy_alive & (s.enemy_y == new_row) & (s.enemy_right != new_right))
        slot = _first_free(s.enemy_alive) & spawn_enemy & ~blocked
        enemy_x = jnp.where(slot, jnp.where(new_right, 0, 9), s.enemy_x)
        enemy_y = jnp.where(slot, new_row, s.enemy_y)
        enemy_right = jnp.where(slot, new_right, s.enemy_right)
        enemy_is_sub = jnp.where(slot, draws.enemy_sub < 1.0 / 3.0, s.enemy_is_sub)
        enemy_alive = s.enemy_alive | slot
        enemy_move_timer = jnp.where(slot, s.move_speed, s.enemy_move_timer)
        enemy_shot_timer = jnp.where(slot, ENEMY_SHOT_INTERVAL, s.enemy_shot_timer)
        enemy_order = jnp.where(slot, s.spawned, s.enemy_order)
        spawned = s.spawned + jnp.any(slot)
        enemy_spawn_timer = jnp.where(spawn_enemy, s.enemy_spawn_speed, s.enemy_spawn_timer)

        spawn_diver = s.diver_spawn_timer == 0
        dslot = _first_free(s.diver_alive) & spawn_diver
        diver_new_right = draws.diver_right < 0.5
        diver_x = jnp.where(dslot, jnp.where(diver_new_right, 0, 9), s.diver_x)
        diver_y = jnp.where(dslot, _row(draws.diver_row), s.diver_y)
        diver_right = jnp.where(dslot, diver_new_right, s.diver_right)
        diver_alive = s.diver_alive | dslot
        diver_timer = jnp.where(dslot, DIVER_MOVE_INTERVAL, s.diver_timer)
        diver_order = jnp.where(dslot, spawned, s.diver_order)
        spawned = spawned + jnp.any(dslot)
        diver_spawn_timer = jnp.where(spawn_diver, DIVER_SPAWN_SPEED, s.diver_spawn_timer)

        # The player's move, or a shot.
        fire = (a == FIRE) & (s.shot_timer == 0)
        bslot = _first_free(s.bullet_alive) & fire
        bullet_x = jnp.where(bslot, s.sub_x, s.bullet_x)
        bullet_y = jnp.where(bslot, s.sub_y, s.bullet_y)
        bullet_right = jnp.where(bslot, s.sub_right, s.bullet_right)
        bullet_alive = s.bullet_alive | bslot
        shot_timer = jnp.where(fire, SHOT_COOL_DOWN, s.shot_timer)
        sub_x = jnp.where(a == LEFT, jnp.maximum(s.sub_x - 1, 0), s.sub_x)
        sub_x = jnp.where(a == RIGHT, jnp.minimum(sub_x + 1, 9), sub_x)
        sub_right = jnp.where(a == LEFT, False, jnp.where(a == RIGHT, True, s.sub_right))
        sub_y = jnp.where(a == UP, jnp.maximum(s.sub_y - 1, 0), s.sub_y)
        sub_y = jnp.where(a == DOWN, jnp.minimum(sub_y + 1, 8), sub_y)

        # Friendly bullets move; each hits the oldest fish in its new cell, else the oldest sub.
        bullet_x = jnp.where(bullet_alive, _step(bullet_x, bullet_right), bullet_x)
        bullet_alive = bullet_alive & (bullet_x >= 0) & (bullet_x <= 9)
        same = (
            bullet_alive[:, None]
            & enemy_alive[None, :]
            & (bullet_x[:, None] == enemy_x[None, :])
            & (bullet_y[:, None] == enemy_y[None, :])
        )
        big = jnp.int32(1 << 30)
        fish_hit = same & ~enemy_is_sub[None, :]
        sub_hit = same & enemy_is_sub[None, :]
        oldest_fish = jnp.min(jnp.where(fish_hit, enemy_order[None, :], big), axis=1)
        oldest_sub = jnp.min(jnp.where(sub_hit, enemy_order[None, :], big), axis=1)
        has_fish = jnp.any(fish_hit, axis=1)
        target = jnp.where(has_fish, oldest_fish, oldest_sub)  # (bullets,): big when none
        killed = jnp.any(
            same & (enemy_order[None, :] == target[:, None]) & (has_fish[:, None] != enemy_is_sub[None, :]),
            axis=0,
        )
        reward = jnp.sum(killed, dtype=jnp.int32)
        bullet_alive = bullet_alive & ~jnp.any(same, axis=1)
        enemy_alive = enemy_alive & ~killed

        # Divers, newest first: picked up where they are or after their move, while fewer than 6.
        at_sub = lambda x, y: (x == sub_x) & (y == sub_y)  # noqa: E731
        before = diver_alive & at_sub(diver_x, diver_y)
        diver_moves = diver_timer == 0
        moved_x = _step(diver_x, diver_right)
        after = diver_alive & ~before & diver_moves & at_sub(moved_x, diver_y)
        candidate = before | after
        newer = jnp.sum(
            candidate[None, :] & (diver_order[None, :] > diver_order[:, None]), axis=1, dtype=jnp.int32
        )
        picked = candidate & (s.diver_count + newer < 6)
        diver_count = s.diver_count + jnp.sum(picked, dtype=jnp.int32)
        stays = diver_alive & ~picked
        diver_x = jnp.where(stays & diver_moves, moved_x, diver_x)
        diver_timer = jnp.where(diver_moves, DIVER_MOVE_INTERVAL, diver_timer - 1)
        diver_alive = stays & (diver_x >= 0) & (diver_x <= 9)

        # Enemy subs, then (after the enemy bullets) fish: touch = game over; a moving enemy is
        # hit by a bullet in its new cell (the newest enemy that reaches a bullet takes it).
        def enemies_move(
            kind: jax.Array, alive: jax.Array, x: jax.Array, timer: jax.Array, bullets: Any
        ) -> Any:
            b_x, b_y, b_alive = bullets
            members = alive & kind
            touch = jnp.any(members & at_sub(x, enemy_y))
            moves = members & (timer == 0)
            new_x = jnp.where(moves, _step(x, enemy_right), x)
            inside = (new_x >= 0) & (new_x <= 9)
            touch |= jnp.any(moves & inside & at_sub(new_x, enemy_y))
            can_hit = moves & inside & ~at_sub(new_x, enemy_y)
            meet = (
                b_alive[:, None]
                & can_hit[None, :]
                & (b_x[:, None] == new_x[None, :])
                & (b_y[:, None] == enemy_y[None, :])
            )
            newest = jnp.max(jnp.where(meet, enemy_order[None, :], -1), axis=1)
            hit = jnp.any(meet & (enemy_order[None, :] == newest[:, None]), axis=0)
            b_alive = b_alive & ~jnp.any(meet, axis=1)
            alive = alive & ~(moves & ~inside) & ~hit
            timer = jnp.where(moves, s.move_speed, jnp.where(members, timer - 1, timer))
            return alive, new_x, timer, (b_x, b_y, b_alive), touch, jnp.sum(hit, dtype=jnp.int32)

        bullets = (bullet_x, bullet_y, bullet_alive)
        subs = enemy_alive & enemy_is_sub  # before the move: a sub removed this step still shoots
        enemy_alive, enemy_x, enemy_move_timer, bullets, touch_sub, sub_reward = enemies_move(
            enemy_is_sub, enemy_alive, enemy_x, enemy_move_timer, bullets
        )
        shoots = subs & (enemy_shot_timer == 0)
        enemy_shot_timer = jnp.where(
            shoots, ENEMY_SHOT_INTERVAL, jnp.where(subs, enemy_shot_timer - 1, enemy_shot_timer)
        )
        # Enemy bullets: new ones start in the shooter's cell; all move one cell, touch = game over.
        fired_right = _row_masks(enemy_x, enemy_y, shoots & enemy_right)
        fired_left = _row_masks(enemy_x, enemy_y, shoots & ~enemy_right)
        eb_right = s.enemy_bullets_right | fired_right
        eb_left = s.enemy_bullets_left | fired_left
        sub_row = jnp.arange(10) == sub_y
        sub_bit = jnp.int32(1) << sub_x
        touch_bullet = jnp.any(sub_row & (((eb_right | eb_left) & sub_bit) != 0))
        eb_right = (eb_right << 1) & FULL_ROW
        eb_left = eb_left >> 1
        touch_bullet |= jnp.any(sub_row & (((eb_right | eb_left) & sub_bit) != 0))

        enemy_alive, enemy_x, enemy_move_timer, bullets, touch_fish, fish_reward = enemies_move(
            ~enemy_is_sub, enemy_alive, enemy_x, enemy_move_timer, bullets
        )
        bullet_x, bullet_y, bullet_alive = bullets
        reward = reward + sub_reward + fish_reward
        terminated = touch_sub | touch_bullet | touch_fish

        # Timers, oxygen and surfacing.
        enemy_spawn_timer = enemy_spawn_timer - (enemy_spawn_timer > 0)
        diver_spawn_timer = diver_spawn_timer - (diver_spawn_timer > 0)
        shot_timer = shot_timer - (shot_timer > 0)
        terminated |= s.oxygen <= 0
        below = sub_y > 0
        surfacing = ~below & ~s.surface
        terminated |= surfacing & (diver_count == 0)
        surfaces = surfacing & (diver_count != 0)
        full = surfaces & (diver_count == 6)
        reward = reward + jnp.where(full, s.oxygen * 10 // MAX_OXYGEN, 0)
        oxygen = jnp.where(below, s.oxygen - 1, jnp.where(surfaces, MAX_OXYGEN, s.oxygen))
        diver_count = jnp.where(surfaces, jnp.where(full, 0, diver_count) - 1, diver_count)
        ramps = surfaces & params.difficulty_ramping & ((s.enemy_spawn_speed > 1) | (s.move_speed > 2))
        move_speed = jnp.where(
            ramps & (s.move_speed > 2) & (s.ramp_index % 2 == 1), s.move_speed - 1, s.move_speed
        )
        enemy_spawn_speed = jnp.where(
            ramps & (s.enemy_spawn_speed > 1), s.enemy_spawn_speed - 1, s.enemy_spawn_speed
        )
        surface = jnp.where(below, False, s.surface | surfaces)

        time = s.time + 1
        state = SeaquestState(
            sub_x=sub_x,
            sub_y=sub_y,
            sub_right=sub_right,
            oxygen=oxygen,
            diver_count=diver_count,
            bullet_x=bullet_x,
            bullet_y=bullet_y,
            bullet_right=bullet_right,
            bullet_alive=bullet_alive,
            enemy_bullets_right=eb_right,
            enemy_bullets_left=eb_left,
            enemy_x=enemy_x,
            enemy_y=enemy_y,
            enemy_right=enemy_right,
            enemy_is_sub=enemy_is_sub,
            enemy_alive=enemy_alive,
            enemy_move_timer=enemy_move_timer,
            enemy_shot_timer=enemy_shot_timer,
            enemy_order=enemy_order,
            diver_x=diver_x,
            diver_y=diver_y,
            diver_right=diver_right,
            diver_alive=diver_alive,
            diver_timer=diver_timer,
            diver_order=diver_order,
            spawned=spawned,
            enemy_spawn_speed=enemy_spawn_speed,
            enemy_spawn_timer=enemy_spawn_timer,
            diver_spawn_timer=diver_spawn_timer,
            move_speed=move_speed,
            ramp_index=s.ramp_index + ramps,
            shot_timer=shot_timer,
            surface=surface,
            last_action=a,
            time=time,
        )
        truncated = time >= params.max_steps_in_episode
        return self.get_obs(state), state, reward.astype(jnp.float32), terminated, truncated, {}

    def get_obs(self, state: SeaquestState) -> jax.Array:
        s = state
        back_x = s.sub_x + jnp.where(s.sub_right, -1, 1)
        back_x = jnp.where(back_x < 0, back_x + 10, back_x)  # numpy's negative index, as minatar
        fish = s.enemy_alive & ~s.enemy_is_sub
        subs = s.enemy_alive & s.enemy_is_sub
        trail = _row_masks(_step(s.enemy_x, ~s.enemy_right), s.enemy_y, s.enemy_alive) | _row_masks(
            _step(s.diver_x, ~s.diver_right), s.diver_y, s.diver_alive
        )
        oxygen_cells = jnp.maximum(s.oxygen, 0) // (MAX_OXYGEN // 10)  # = max(0, oxygen) * 10 // 200
        bottom = ROW_IDS == 9
        oxygen = jnp.where(bottom, (jnp.int32(1) << jnp.minimum(oxygen_cells, 10)) - 1, 0)
        # Columns 9 - count .. 8 (none when the count is negative, as minatar's empty slice).
        count = jnp.clip(s.diver_count, 0, 9)
        divers_aboard = jnp.where(bottom, ((jnp.int32(1) << count) - 1) << (9 - count), 0)
        return grid(
            [
                cell_row(s.sub_y, s.sub_x),
                cell_row(s.sub_y, back_x),
                _row_masks(s.bullet_x, s.bullet_y, s.bullet_alive),
                trail,
                s.enemy_bullets_right | s.enemy_bullets_left,
                _row_masks(s.enemy_x, s.enemy_y, fish),
                _row_masks(s.enemy_x, s.enemy_y, subs),
                oxygen,
                divers_aboard,
                _row_masks(s.diver_x, s.diver_y, s.diver_alive),
            ]
        )
