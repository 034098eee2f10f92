"""MinAtar games: conformance, exact parity with the ``minatar`` package, statistics of the random parts.

Parity: the ``minatar`` package plays real episodes (a random policy, from
start states perturbed to reach rare situations: few bricks, late ramping,
crowded boards). Before every step its internal state is copied into a
lamella state; both then take the same action with the same random draws
(minatar's ``RandomState`` is replaced by a stub that returns, in minatar's
order of calls, the values lamella's ``draw`` produced from a key), and
the next observation (every channel), reward, terminal flag and the next
state are compared exactly. All transitions of a game run as one jitted vmap.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs as le
from lamella.envs import minatar as lm
from lamella.envs.environment import Wrapper
from lamella.envs.testing import check_env, fast_compile_options
from lamella.envs.wrappers import AutoReset

minatar = pytest.importorskip("minatar")

MINATAR_IDS = [
    "Breakout-MinAtar",
    "Freeway-MinAtar",
    "Asterix-MinAtar",
    "SpaceInvaders-MinAtar",
    "Seaquest-MinAtar",
]


@pytest.mark.parametrize("env_id", MINATAR_IDS)
@pytest.mark.parametrize("autoreset", [False, True])
def test_check_env(env_id: str, autoreset: bool) -> None:
    env, params = le.make(env_id, autoreset=autoreset)
    check_env(env, params, num_steps=16, num_envs=2)


@pytest.mark.parametrize("env_id", MINATAR_IDS)
def test_spaces_and_action_sets(env_id: str) -> None:
    env, params = le.make(env_id, autoreset=False)
    reference = minatar.Environment(GAMES[env_id].name)
    assert env.observation_space(params).shape == tuple(reference.state_shape())
    assert env.observation_space(params).dtype == jnp.bool_
    assert env.action_set == tuple(reference.minimal_action_set())
    assert env.action_space(params).n == len(reference.minimal_action_set())
    full, _ = le.make(env_id, autoreset=False, use_minimal_action_set=False)
    assert full.action_space(params).n == 6 and full.action_set == tuple(range(6))


@pytest.mark.parametrize("env_id", MINATAR_IDS)
def test_render_vmaps(env_id: str) -> None:
    """A batch of states renders in one jitted vmap; each frame shows the observation's objects."""
    env, params = le.make(env_id, autoreset=False)
    keys = jax.random.split(jax.random.key(0), 3)
    obs, states = jax.jit(jax.vmap(lambda k: env.reset(k, params)))(keys)
    # Later states show more objects (entities, bullets, trails).
    step = jax.jit(jax.vmap(lambda k, s: env.step(k, s, 0, params)))
    for _ in range(12):
        obs, states, *_ = step(keys, states)
    frames = np.asarray(jax.jit(jax.vmap(lambda s: env.render(s, params)))(states))
    assert frames.shape == (3, 160, 160, 3) and frames.dtype == np.uint8
    for frame, grid in zip(frames, np.asarray(obs)):
        centres = frame[8::16, 8::16]  # one pixel in the middle of each cell
        np.testing.assert_array_equal(centres.any(-1), grid.any(-1))


@pytest.mark.parametrize("env_id", MINATAR_IDS)
def test_step_and_autoreset_paths_are_exact(env_id: str) -> None:
    """The fast paths change no value.

    ``step_env`` (new state stored once, observation rebuilt from it) equals ``transition`` with the
    key's draws; ``observation_of`` gives the observation ``reset_env`` and ``step_env`` return; and
    AutoReset's path for envs with ``observation_of`` (select the state, build one observation)
    returns exactly what its generic path (select between the step's and the reset's
    observations) returns, terminations and truncations included.
    """
    env, params = le.make(env_id)
    bare = env.unwrapped
    generic = AutoReset(Wrapper(bare))  # a plain wrapper has no observation_of: the generic path
    assert getattr(type(env.env), "observation_of", None) is not None
    assert getattr(type(generic.env), "observation_of", None) is None
    n = 64
    keys = jax.random.split(jax.random.key(3), n)
    reset_obs, state = jax.vmap(lambda k: bare.reset(k, params))(keys)
    np.testing.assert_array_equal(reset_obs, jax.vmap(bare.observation_of)(state))
    # Every other env starts one step before truncation, so resets happen on the first step.
    near_end = jnp.where(jnp.arange(n) % 2 == 0, params.max_steps_in_episode - 1, 0).astype(jnp.int32)
    state = state.replace(time=near_end)
    num_actions = bare.action_space(params).n

    # Four vmapped steps in one program, compiled for compile speed: MinAtar's values are
    # integers and bools, which the fast options cannot change.
    @functools.partial(jax.jit, compiler_options=fast_compile_options())
    def compare(key: jax.Array, state: Any) -> Any:
        keys = jax.random.split(key, n)
        actions = jax.random.randint(key, (n,), 0, num_actions)
        fast = jax.vmap(lambda k, s, a: env.step(k, s, a, params))(keys, state, actions)
        slow = jax.vmap(lambda k, s, a: generic.step(k, s, a, params))(keys, state, actions)
        stepped = jax.vmap(lambda k, s, a: bare.step(k, s, a, params))(keys, state, actions)
        reference = jax.vmap(lambda k, s, a: bare.transition(s, a, bare.draw(k, params), params))(
            keys, state, actions
        )
        observed = jax.vmap(bare.observation_of)(stepped[1])
        return fast, slow, stepped, reference, observed

    dones = 0
    for t in range(8):
        fast, slow, stepped, reference, observed = compare(jax.random.key(100 + t), state)
        chex_equal = lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # noqa: E731
        jax.tree.map(chex_equal, fast[:5], slow[:5])
        chex_equal(fast[5]["final_observation"], slow[5]["final_observation"])
        jax.tree.map(chex_equal, stepped[:5], reference[:5])
        chex_equal(stepped[0], observed)
        dones += int(np.sum(np.asarray(fast[3]) | np.asarray(fast[4])))
        state = fast[1]
    assert dones >= n // 2, dones


# Parity harness ---------------------------------------------------------------------------


class StubRandom:
    """Stands in for minatar's ``np.random.RandomState``: returns queued values in call order."""

    def __init__(self) -> None:
        self.queue: list[tuple[str, Any]] = []

    def _pop(self, kind: str) -> Any:
        assert self.queue, f"minatar asked for an unexpected {kind}"
        got, value = self.queue.pop(0)
        assert got == kind, f"minatar asked for {kind}, the stub expected {got}"
        return value

    def rand(self, *size: int) -> Any:
        return self._pop(f"rand{size}")

    def randint(self, low: int, high: int | None = None, size: Any = None) -> Any:
        return self._pop(f"randint{(low, high, size)}")


def uniform_int(u: Any, low: int, high: int) -> int:
    """``lamella.envs.random.randint``'s map of a float32 uniform to [low, high), in NumPy."""
    value = low + int(np.floor(np.float32(u) * np.float32(high - low)))
    return min(value, high - 1)


class Game:
    """How one game's minatar state maps to lamella's, and the draws to minatar's calls."""

    env_id: str
    name: str

    def to_lamella(self, env: Any, last_action: int, time: int) -> dict[str, Any]:
        raise NotImplementedError

    def queue(self, env: Any, draws: dict[str, np.ndarray], action: int) -> list[tuple[str, Any]]:
        """What minatar's game draws this step (given the action taken), from lamella's draws."""
        return []

    def canonical(self, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The state with fields that mean nothing (an empty slot's contents) zeroed, for comparison."""
        return state

    def policy(self, rng: np.random.Generator, num_actions: int, env: Any) -> int:
        """The action index to take (uniform; games override it to reach rewards)."""
        return int(rng.integers(num_actions))

    def perturb(self, env: Any, rng: np.random.Generator) -> None:
        """Change a fresh start state to reach rare situations sooner (a valid game state)."""


def collect(game: Game, num_transitions: int, seed: int, full_actions: bool = False) -> dict[str, Any]:
    """Play minatar with stubbed draws; record lamella-format states before/after, actions, draws, results."""
    env_l, params = le.make(game.env_id, autoreset=False, use_minimal_action_set=not full_actions)
    draw = jax.jit(jax.vmap(lambda k: env_l.unwrapped.draw(k, params)))
    all_draws = jax.tree.map(np.asarray, draw(jax.random.split(jax.random.key(seed), num_transitions)))
    all_draws = {k: v for k, v in vars(all_draws).items()}
    rng = np.random.default_rng(seed)
    reference = minatar.Environment(game.name, sticky_action_prob=0.1)
    inner = reference.env
    stub = StubRandom()
    real = np.random.RandomState(seed)
    records: dict[str, list[Any]] = {
        "before": [],
        "after": [],
        "action": [],
        "obs": [],
        "reward": [],
        "terminal": [],
    }

    def new_episode() -> None:
        inner.random = real
        reference.reset()
        game.perturb(inner, rng)
        reference.last_action = 0

    new_episode()
    time = 0
    num_actions = len(env_l.action_set)
    for t in range(num_transitions):
        draws = {k: v[t] for k, v in all_draws.items()}
        action = game.policy(rng, num_actions, inner)
        records["before"].append(game.to_lamella(inner, reference.last_action, time))
        stub.queue = [("rand()", float(draws["sticky"]))]
        inner.random = stub
        reference.random = stub
        # The game's own draws depend on its state after the action; queue them lazily.
        act = inner.act

        def act_with_queue(a: int, act: Callable[[int], Any] = act) -> Any:
            stub.queue.extend(game.queue(inner, draws, a))
            return act(a)

        inner.act = act_with_queue
        reward, terminal = reference.act(env_l.action_set[action])
        del inner.act
        assert not stub.queue, f"minatar did not use the draws {stub.queue}"
        time += 1
        records["action"].append(action)
        records["obs"].append(reference.state())
        records["reward"].append(float(reward))
        records["terminal"].append(bool(terminal))
        records["after"].append(game.to_lamella(inner, reference.last_action, time))
        if terminal:
            new_episode()
            time = 0
    records["draws"] = all_draws
    return records


def check_parity(game: Game, records: dict[str, Any], full_actions: bool = False) -> None:
    env, params = le.make(game.env_id, autoreset=False, use_minimal_action_set=not full_actions)
    env = env.unwrapped
    state_type = type(env.reset(jax.random.key(0), params)[1])
    draw_type = type(env.draw(jax.random.key(0), params))
    stack = lambda rows: {k: np.stack([r[k] for r in rows]) for k in rows[0]}  # noqa: E731
    before = state_type(**stack(records["before"]))
    draws = draw_type(**records["draws"])
    actions = jnp.asarray(records["action"], jnp.int32)
    transition = jax.jit(jax.vmap(lambda s, a, d: env.transition(s, a, d, params)))
    obs, after, reward, terminated, truncated, _ = transition(before, actions, draws)
    expected_obs = np.stack(records["obs"])
    for i in range(len(actions)):
        ok_obs = np.array_equal(np.asarray(obs[i]), expected_obs[i])
        ok = ok_obs and float(reward[i]) == records["reward"][i]
        ok = ok and bool(terminated[i]) == records["terminal"][i]
        if not ok:
            one_before = {k: v[i] for k, v in stack(records["before"]).items()}
            raise AssertionError(
                f"transition {i} differs: before {one_before}, action {int(actions[i])}, "
                f"draws { {k: v[i] for k, v in records['draws'].items()} }; reward {float(reward[i])} vs "
                f"{records['reward'][i]}, terminal {bool(terminated[i])} vs {records['terminal'][i]}, "
                f"obs differs in channels {np.nonzero((np.asarray(obs[i]) != expected_obs[i]).any((0, 1)))[0]}"
            )
    expected_after = game.canonical(stack(records["after"]))
    got_after = game.canonical({k: np.asarray(getattr(after, k)) for k in records["after"][0]})
    for name, value in expected_after.items():
        np.testing.assert_array_equal(got_after[name], value, err_msg=f"next state field {name}")
    assert not np.any(np.asarray(truncated))


def coverage(records: dict[str, Any]) -> dict[str, int]:
    return {
        "transitions": len(records["action"]),
        "terminal": int(np.sum(records["terminal"])),
        "rewarded": int(np.sum(np.asarray(records["reward"]) > 0)),
    }


# Breakout ---------------------------------------------------------------------------------


class BreakoutGame(Game):
    env_id = "Breakout-MinAtar"
    name = "breakout"

    def to_lamella(self, env: Any, last_action: int, time: int) -> dict[str, Any]:
        mask = 0
        for y in range(1, 4):
            for x in range(10):
                if env.brick_map[y, x]:
                    mask |= 1 << ((y - 1) * 10 + x)
        assert env.brick_map[[0, *range(4, 10)]].sum() == 0
        return {
            "ball_x": np.int32(env.ball_x),
            "ball_y": np.int32(env.ball_y),
            "ball_dir": np.int32(env.ball_dir),
            "pos": np.int32(env.pos),
            "bricks": np.uint32(mask),
            "strike": np.bool_(env.strike),
            "last_x": np.int32(env.last_x),
            "last_y": np.int32(env.last_y),
            "last_action": np.int32(last_action),
            "time": np.int32(time),
        }

    def perturb(self, env: Any, rng: np.random.Generator) -> None:
        # Clear most bricks in some episodes, so clearing the board and the refill happen.
        if rng.random() < 0.5:
            keep = rng.random((3, 10)) < rng.choice([0.0, 0.05, 0.3])
            env.brick_map[1:4] = keep
        env.pos = int(rng.integers(10))


# Freeway ----------------------------------------------------------------------------------


class FreewayGame(Game):
    env_id = "Freeway-MinAtar"
    name = "freeway"

    def to_lamella(self, env: Any, last_action: int, time: int) -> dict[str, Any]:
        cars = np.asarray(env.cars, np.int32)
        np.testing.assert_array_equal(cars[:, 1], np.arange(1, 9))
        return {
            "pos": np.int32(env.pos),
            "car_x": cars[:, 0],
            "car_timer": cars[:, 2],
            "car_speed": cars[:, 3],
            "move_timer": np.int32(env.move_timer),
            "terminate_timer": np.int32(env.terminate_timer),
            "last_action": np.int32(last_action),
            "time": np.int32(time),
        }

    def queue(self, env: Any, draws: dict[str, np.ndarray], action: int) -> list[tuple[str, Any]]:
        crosses = action == 2 and env.move_timer == 0 and env.pos == 1
        if not crosses:
            return []
        directions = np.where(draws["right"], 0.75, 0.25)  # sign(u - 0.5) is the direction
        return [("randint(1, 6, 8)", draws["speeds"].astype(np.int64)), ("rand(8,)", directions)]

    def policy(self, rng: np.random.Generator, num_actions: int, env: Any) -> int:
        up = 1 if num_actions == 3 else 2
        return up if rng.random() < 0.7 else int(rng.integers(num_actions))

    def perturb(self, env: Any, rng: np.random.Generator) -> None:
        env.pos = int(rng.integers(1, 10))
        env.move_timer = int(rng.integers(0, 4))
        for car in env.cars:
            car[0] = int(rng.integers(10))
            car[2] = int(rng.integers(0, abs(car[3]) + 1))
        env.terminate_timer = int(rng.integers(0, 120))  # near the end of the game clock


# Asterix ----------------------------------------------------------------------------------


class AsterixGame(Game):
    env_id = "Asterix-MinAtar"
    name = "asterix"

    def to_lamella(self, env: Any, last_action: int, time: int) -> dict[str, Any]:
        alive = np.array([e is not None for e in env.entities])
        fields = [e if e is not None else [0, i + 1, False, False] for i, e in enumerate(env.entities)]
        for i, e in enumerate(fields):
            assert e[1] == i + 1
        return {
            "player_x": np.int32(env.player_x),
            "player_y": np.int32(env.player_y),
            "entity_x": np.array([e[0] for e in fields], np.int32),
            "entity_right": np.array([bool(e[2]) for e in fields]),
            "entity_gold": np.array([bool(e[3]) for e in fields]),
            "entity_alive": alive,
            "spawn_speed": np.int32(env.spawn_speed),
            "spawn_timer": np.int32(env.spawn_timer),
            "move_speed": np.int32(env.move_speed),
            "move_timer": np.int32(env.move_timer),
            "ramp_timer": np.int32(env.ramp_timer),
            "ramp_index": np.int32(env.ramp_index),
            "last_action": np.int32(last_action),
            "time": np.int32(time),
        }

    def canonical(self, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        state = dict(state)
        for name in ("entity_x", "entity_right", "entity_gold"):
            state[name] = np.where(state["entity_alive"], state[name], 0).astype(state[name].dtype)
        return state

    def queue(self, env: Any, draws: dict[str, np.ndarray], action: int) -> list[tuple[str, Any]]:
        if env.spawn_timer != 0:
            return []
        calls = [("rand()", float(draws["right"])), ("rand()", float(draws["gold"]))]
        free = sum(e is None for e in env.entities)
        if free:
            calls.append((f"randint{(free, None, None)}", uniform_int(draws["slot"], 0, free)))
        return calls

    def perturb(self, env: Any, rng: np.random.Generator) -> None:
        # Start some episodes late in the difficulty ramp, with a crowded board.
        if rng.random() < 0.6:
            env.ramp_index = int(rng.integers(0, 20))
            env.spawn_speed = int(rng.integers(1, 11))
            env.move_speed = int(rng.integers(1, 6))
            env.spawn_timer = int(rng.integers(0, env.spawn_speed + 1))
            env.move_timer = int(rng.integers(0, env.move_speed + 1))
            env.ramp_timer = int(rng.integers(-1, 8))
            for i in range(8):
                if rng.random() < 0.5:
                    env.entities[i] = [
                        int(rng.integers(10)),
                        i + 1,
                        bool(rng.random() < 0.5),
                        bool(rng.random() < 0.4),
                    ]


# SpaceInvaders ----------------------------------------------------------------------------


def _row_masks(grid: np.ndarray) -> np.ndarray:
    grid = np.asarray(grid) != 0
    return (grid * (1 << np.arange(10))).sum(1).astype(np.int32)


class SpaceInvadersGame(Game):
    env_id = "SpaceInvaders-MinAtar"
    name = "space_invaders"

    def to_lamella(self, env: Any, last_action: int, time: int) -> dict[str, Any]:
        return {
            "pos": np.int32(env.pos),
            "aliens": _row_masks(env.alien_map),
            "friendly_bullets": _row_masks(env.f_bullet_map),
            "enemy_bullets": _row_masks(env.e_bullet_map),
            "alien_dir": np.int32(env.alien_dir),
            "enemy_move_interval": np.int32(env.enemy_move_interval),
            "alien_move_timer": np.int32(env.alien_move_timer),
            "alien_shot_timer": np.int32(env.alien_shot_timer),
            "shot_timer": np.int32(env.shot_timer),
            "ramp_index": np.int32(env.ramp_index),
            "last_action": np.int32(last_action),
            "time": np.int32(time),
        }

    def perturb(self, env: Any, rng: np.random.Generator) -> None:
        # Thin, shifted, lowered waves: fast aliens, wall bounces, clearing, aliens at the bottom.
        if rng.random() < 0.7:
            env.alien_map = (rng.random((10, 10)) < rng.choice([0.03, 0.1, 0.3])).astype(float)
            env.alien_map[9] = 0
            if env.alien_map.sum() == 0:
                env.alien_map[int(rng.integers(9)), int(rng.integers(10))] = 1
            env.alien_dir = int(rng.choice([-1, 1]))
            env.enemy_move_interval = int(rng.integers(6, 13))
            env.alien_move_timer = int(rng.integers(0, 4))
            env.alien_shot_timer = int(rng.integers(0, 11))
            env.ramp_index = 12 - env.enemy_move_interval
        env.pos = int(rng.integers(10))


# Seaquest ---------------------------------------------------------------------------------


class SeaquestGame(Game):
    env_id = "Seaquest-MinAtar"
    name = "seaquest"
    capacity = 32

    def to_lamella(self, env: Any, last_action: int, time: int) -> dict[str, Any]:
        e, d, b = self.capacity, 4, 4
        enemies = [(*f[:4], 0, False) for f in env.e_fish] + [(*u[:5], True) for u in env.e_subs]
        assert len(enemies) <= e and len(env.divers) <= d and len(env.f_bullets) <= b

        def column(rows: list[Any], i: int, n: int, dtype: Any) -> np.ndarray:
            out = np.zeros(n, dtype)
            out[: len(rows)] = [r[i] for r in rows]
            return out

        def masks(right: bool) -> np.ndarray:
            out = np.zeros(10, np.int32)
            for x, y, r in env.e_bullets:
                if bool(r) == right:
                    out[y] |= 1 << x
            return out

        return {
            "sub_x": np.int32(env.sub_x),
            "sub_y": np.int32(env.sub_y),
            "sub_right": np.bool_(env.sub_or),
            "oxygen": np.int32(env.oxygen),
            "diver_count": np.int32(env.diver_count),
            "bullet_x": column(env.f_bullets, 0, b, np.int32),
            "bullet_y": column(env.f_bullets, 1, b, np.int32),
            "bullet_right": column(env.f_bullets, 2, b, bool),
            "bullet_alive": np.arange(b) < len(env.f_bullets),
            "enemy_bullets_right": masks(True),
            "enemy_bullets_left": masks(False),
            "enemy_x": column(enemies, 0, e, np.int32),
            "enemy_y": column(enemies, 1, e, np.int32),
            "enemy_right": column(enemies, 2, e, bool),
            "enemy_is_sub": column(enemies, 5, e, bool),
            "enemy_alive": np.arange(e) < len(enemies),
            "enemy_move_timer": column(enemies, 3, e, np.int32),
            "enemy_shot_timer": column(enemies, 4, e, np.int32),
            "enemy_order": np.arange(e, dtype=np.int32),
            "diver_x": column(env.divers, 0, d, np.int32),
            "diver_y": column(env.divers, 1, d, np.int32),
            "diver_right": column(env.divers, 2, d, bool),
            "diver_alive": np.arange(d) < len(env.divers),
            "diver_timer": column(env.divers, 3, d, np.int32),
            "diver_order": np.arange(d, dtype=np.int32),
            "spawned": np.int32(e),
            "enemy_spawn_speed": np.int32(env.e_spawn_speed),
            "enemy_spawn_timer": np.int32(env.e_spawn_timer),
            "diver_spawn_timer": np.int32(env.d_spawn_timer),
            "move_speed": np.int32(env.move_speed),
            "ramp_index": np.int32(env.ramp_index),
            "shot_timer": np.int32(env.shot_timer),
            "surface": np.bool_(env.surface),
            "last_action": np.int32(last_action),
            "time": np.int32(time),
        }

    def canonical(self, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Entities as lists in spawn order (fish, subs, divers) and bullets as sorted sets."""
        state = dict(state)
        n = len(state["time"])
        fish, subs, divers, bullets = [], [], [], []
        for i in range(n):
            alive = state["enemy_alive"][i]
            order = np.argsort(np.where(alive, state["enemy_order"][i], 1 << 30), kind="stable")
            f, u = [], []
            for j in order:
                if not alive[j]:
                    continue
                row = [state[k][i][j] for k in ("enemy_x", "enemy_y", "enemy_right", "enemy_move_timer")]
                if state["enemy_is_sub"][i][j]:
                    u.append((*row, state["enemy_shot_timer"][i][j]))
                else:
                    f.append((*row, 0))
            fish.append(f + [(0,) * 5] * (self.capacity - len(f)))
            subs.append(u + [(0,) * 5] * (self.capacity - len(u)))
            d_alive = state["diver_alive"][i]
            d = [
                tuple(state[k][i][j] for k in ("diver_x", "diver_y", "diver_right", "diver_timer"))
                for j in np.argsort(np.where(d_alive, state["diver_order"][i], 1 << 30), kind="stable")
                if d_alive[j]
            ]
            divers.append(d + [(0,) * 4] * (4 - len(d)))
            b = sorted(
                (
                    int(state["bullet_x"][i][j]),
                    int(state["bullet_y"][i][j]),
                    bool(state["bullet_right"][i][j]),
                )
                for j in range(4)
                if state["bullet_alive"][i][j]
            )
            bullets.append(b + [(0, 0, False)] * (4 - len(b)))
        for prefix in ("enemy_", "diver_", "bullet_"):
            for k in [k for k in state if k.startswith(prefix)]:
                del state[k]
        del state["spawned"]
        state.update(
            fish=np.array(fish, np.int64),
            subs=np.array(subs, np.int64),
            divers=np.array(divers, np.int64),
            bullets=np.array(bullets, np.int64),
        )
        return state

    def queue(self, env: Any, draws: dict[str, np.ndarray], action: int) -> list[tuple[str, Any]]:
        calls: list[tuple[str, Any]] = []
        if env.e_spawn_timer == 0:
            calls += [("rand()", float(draws["enemy_right"])), ("rand()", float(draws["enemy_sub"]))]
            calls.append(("randint(1, 9, None)", uniform_int(draws["enemy_row"], 1, 9)))
        if env.d_spawn_timer == 0:
            calls.append(("rand()", float(draws["diver_right"])))
            calls.append(("randint(1, 9, None)", uniform_int(draws["diver_row"], 1, 9)))
        return calls

    def policy(self, rng: np.random.Generator, num_actions: int, env: Any) -> int:
        # Mostly stay under water (surfacing without divers ends the game) and shoot.
        if env.sub_y <= 1 and env.diver_count == 0:
            return int(rng.choice([0, 1, 3, 4, 5]))
        return int(rng.choice([0, 1, 2, 3, 4, 5], p=[0.1, 0.2, 0.1, 0.2, 0.15, 0.25]))

    def perturb(self, env: Any, rng: np.random.Generator) -> None:
        # Crowded boards late in the ramp, divers aboard, low oxygen.
        if rng.random() < 0.8:
            env.ramp_index = int(rng.integers(0, 25))
            env.e_spawn_speed = int(rng.integers(1, 21))
            env.move_speed = int(rng.integers(2, 6))
            env.e_spawn_timer = int(rng.integers(0, env.e_spawn_speed + 1))
            env.d_spawn_timer = int(rng.integers(0, 31))
            env.diver_count = int(rng.choice([-1, 0, 1, 3, 5, 6]))
            env.oxygen = int(rng.integers(1, 201))
            env.sub_y = int(rng.integers(0, 9))
            env.sub_x = int(rng.integers(1, 9))
            env.surface = env.sub_y == 0
            for y in range(1, 9):
                if rng.random() < 0.5:
                    right = bool(rng.random() < 0.5)
                    for _ in range(int(rng.integers(1, 4))):
                        x = int(rng.integers(10))
                        timer = int(rng.integers(0, env.move_speed + 1))
                        if rng.random() < 0.4:
                            env.e_subs.append([x, y, right, timer, int(rng.integers(0, 11))])
                        else:
                            env.e_fish.append([x, y, right, timer])
            for _ in range(int(rng.integers(0, 3))):
                y, x = int(rng.integers(1, 9)), int(rng.integers(10))
                env.divers.append([x, y, bool(rng.random() < 0.5), int(rng.integers(0, 6))])
            for _ in range(int(rng.integers(0, 4))):
                y, x = int(rng.integers(1, 9)), int(rng.integers(10))
                env.e_bullets.append([x, y, bool(rng.random() < 0.5)])


GAMES: dict[str, Game] = {
    "Breakout-MinAtar": BreakoutGame(),
    "Freeway-MinAtar": FreewayGame(),
    "Asterix-MinAtar": AsterixGame(),
    "SpaceInvaders-MinAtar": SpaceInvadersGame(),
    "Seaquest-MinAtar": SeaquestGame(),
}
PARITY_TRANSITIONS = {
    "Breakout-MinAtar": 1500,
    "Freeway-MinAtar": 1500,
    "Asterix-MinAtar": 1500,
    "SpaceInvaders-MinAtar": 1500,
    "Seaquest-MinAtar": 2000,
}


@functools.cache
def parity_records(env_id: str) -> dict[str, Any]:
    """The parity transitions of one game (collected once per test process)."""
    return collect(GAMES[env_id], PARITY_TRANSITIONS[env_id], seed=1)


@pytest.mark.parametrize("env_id", MINATAR_IDS)
def test_parity(env_id: str) -> None:
    game = GAMES[env_id]
    records = parity_records(env_id)
    check_parity(game, records)
    counts = coverage(records)
    assert counts["terminal"] >= 10 and counts["rewarded"] >= 10, counts
    if "ramp_index" in records["before"][0]:
        ramps = sum(
            int(a["ramp_index"] > b["ramp_index"]) for b, a in zip(records["before"], records["after"])
        )
        assert ramps >= 1, "no difficulty increase among the parity transitions"


def test_parity_full_action_set() -> None:
    """All six actions (the mapping is shared code; Asterix uses five of them and ignores fire)."""
    game = GAMES["Asterix-MinAtar"]
    records = collect(game, 300, seed=2, full_actions=True)
    check_parity(game, records, full_actions=True)


def test_breakout_refill_covered() -> None:
    """The rare branch (board cleared, refilled when the ball reaches the bottom) is in the parity data."""
    records = parity_records("Breakout-MinAtar")
    refills = sum(
        b["bricks"] == 0 and a["bricks"] == lm.breakout.FULL_BRICKS
        for b, a in zip(records["before"], records["after"])
    )
    assert refills >= 1


# Statistics of the random parts ------------------------------------------------------------


# minatar.Environment's default sticky_action_prob, read from its signature (not written here).
MINATAR_STICKY = inspect.signature(minatar.Environment).parameters["sticky_action_prob"].default


class ProbeRandom:
    """Stands in for minatar's ``RandomState`` to read its probabilities from its own code.

    Every ``rand()`` returns ``u``; every ``randint`` records its range and returns its low end.
    """

    def __init__(self, u: float) -> None:
        self.u = u
        self.randint_calls: list[tuple[Any, Any, Any]] = []

    def rand(self, *size: int) -> Any:
        return np.full(size, self.u) if size else self.u

    def randint(self, low: int, high: int | None = None, size: Any = None) -> Any:
        self.randint_calls.append((low, high, size))
        return np.full(size, 0 if high is None else low) if size is not None else (0 if high is None else low)


def minatar_probability(outcome: Callable[[float], bool]) -> float:
    """P(outcome) when minatar's ``rand()`` draws ``u`` uniform in [0, 1): ``outcome(u)`` runs minatar's
    code with every ``rand()`` returning ``u``; minatar decides by ``rand() < p`` (then P = p) or
    ``rand() > p`` (then P = 1 - p). The flip point ``p`` is found by bisection."""
    low_value, high_value = outcome(0.0), outcome(1.0 - 1e-12)
    assert low_value != high_value, "the outcome does not depend on rand()"
    lo, hi = 0.0, 1.0 - 1e-12
    for _ in range(60):
        mid = (lo + hi) / 2
        if outcome(mid) == low_value:
            lo = mid
        else:
            hi = mid
    return hi if low_value else 1.0 - hi


def test_default_sticky_probability_is_minatars() -> None:
    for env_id in MINATAR_IDS:
        _, params = le.make(env_id, autoreset=False)
        assert params.sticky_action_prob == MINATAR_STICKY, env_id
    # minatar.Environment.act repeats the last action when rand() < sticky_action_prob.
    reference = minatar.Environment("breakout")

    def repeats(u: float) -> bool:
        reference.random = ProbeRandom(u)
        reference.env.random = ProbeRandom(0.5)
        reference.last_action = 3
        reference.act(0)
        return reference.last_action == 3

    assert minatar_probability(repeats) == pytest.approx(MINATAR_STICKY, abs=1e-9)


@functools.cache
def sticky_last_actions(env_id: str) -> Callable[..., jax.Array]:
    """``(keys, params) -> last_action`` after one no-op step from a state whose previous action
    is the set's second one, one step per key: one compile per game, shared by every
    ``sticky_action_prob`` (a traced field of ``params``)."""
    env = le.make(env_id, autoreset=False)[0].unwrapped
    noop = env.action_set.index(0)

    @jax.jit
    def last_actions(keys: jax.Array, params: Any) -> jax.Array:
        _, state = env.reset(jax.random.key(0), params)
        state = state.replace(last_action=jnp.int32(env.action_set[1]))
        return jax.vmap(lambda key: env.step(key, state, noop, params)[1].last_action)(keys)

    return last_actions


@pytest.mark.parametrize("env_id", MINATAR_IDS)
@pytest.mark.parametrize("prob", [MINATAR_STICKY, 0.5])
def test_sticky_action_frequency(env_id: str, prob: float) -> None:
    """The previous action repeats with probability ``sticky_action_prob`` (4 standard errors)."""
    env, params = le.make(env_id, autoreset=False, sticky_action_prob=prob)
    env = env.unwrapped
    n = 20_000
    other = 1  # the second action of every set is never the no-op
    assert env.action_set[other] != 0
    taken = np.asarray(sticky_last_actions(env_id)(jax.random.split(jax.random.key(1), n), params))
    frequency = np.mean(taken == env.action_set[other])
    assert abs(frequency - prob) < 4 * np.sqrt(prob * (1 - prob) / n)


def test_breakout_start_side() -> None:
    env, params = le.make("Breakout-MinAtar", autoreset=False)
    n = 20_000
    _, states = jax.jit(jax.vmap(lambda k: env.reset(k, params)))(jax.random.split(jax.random.key(2), n))
    right = np.asarray(states.ball_x) == 9
    assert abs(right.mean() - 0.5) < 4 * np.sqrt(0.25 / n)
    np.testing.assert_array_equal(np.asarray(states.ball_dir), np.where(right, 3, 2))


def _proportion_ok(hits: np.ndarray, p: float) -> bool:
    """The frequency of ``hits`` is within 4 standard errors of ``p``."""
    n = hits.size
    return abs(float(np.mean(hits)) - p) < 4 * np.sqrt(p * (1 - p) / n)


def _step_many(env_id: str, prepare: Callable[[Any], Any], action: int, n: int = 16_000) -> Any:
    env, params = le.make(env_id, autoreset=False)
    env = env.unwrapped
    _, state = env.reset(jax.random.key(0), params)
    state = prepare(state)
    step = jax.jit(jax.vmap(lambda k: env.step(k, state, action, params)[1]))
    return jax.tree.map(np.asarray, step(jax.random.split(jax.random.key(5), n)))


def _asterix_spawn_probabilities(alive: np.ndarray) -> dict[str, Any]:
    """minatar's asterix ``Env._spawn_entity``, probed: P(moves right), P(gold), the free rows' range."""
    inner = minatar.Environment("asterix").env

    def spawn(u: float) -> list[Any]:
        inner.random = ProbeRandom(u)
        inner.entities = [[5, i + 1, True, False] if a else None for i, a in enumerate(alive)]
        inner._spawn_entity()
        (new,) = [e for e, a in zip(inner.entities, alive) if e is not None and not a]
        return new  # [x, row, moves right, gold]

    probe = ProbeRandom(0.5)
    inner.random = probe
    inner.entities = [[5, i + 1, True, False] if a else None for i, a in enumerate(alive)]
    inner._spawn_entity()
    ((slots, _, _),) = probe.randint_calls  # randint(len(free slots)): uniform over the free rows
    return {
        "right": minatar_probability(lambda u: bool(spawn(u)[2])),
        "gold": minatar_probability(lambda u: bool(spawn(u)[3])),
        "row": 1 / slots,
    }


def test_asterix_spawn_statistics() -> None:
    """Side, gold and row frequencies match minatar's spawn (probabilities read from its code)."""
    alive = jnp.array([True, False, True, False, False, False, False, False])
    expected = _asterix_spawn_probabilities(np.asarray(alive))
    states = _step_many(
        "Asterix-MinAtar",
        lambda s: s.replace(
            spawn_timer=jnp.int32(0), entity_alive=alive, entity_x=jnp.zeros(8, jnp.int32) + 5
        ),
        action=0,
    )
    new = states.entity_alive & ~np.asarray(alive)
    assert np.all(new.sum(1) == 1)
    slot = new.argmax(1)
    for row in (1, 3, 4, 5, 6, 7):
        assert _proportion_ok(slot == row, expected["row"]), row
    right = states.entity_right[np.arange(len(slot)), slot]
    gold = states.entity_gold[np.arange(len(slot)), slot]
    assert _proportion_ok(right, expected["right"]) and _proportion_ok(gold, expected["gold"]), expected
    np.testing.assert_array_equal(states.entity_x[np.arange(len(slot)), slot], np.where(right, 0, 9))


def _seaquest_spawn_probabilities() -> dict[str, Any]:
    """minatar's seaquest ``Env._spawn_enemy`` / ``_spawn_diver``, probed: side, sub, row ranges."""
    inner = minatar.Environment("seaquest").env

    def enemy(u: float) -> tuple[list[Any], bool]:
        inner.random = ProbeRandom(u)
        inner.e_subs, inner.e_fish = [], []
        inner._spawn_enemy()
        ((new, is_sub),) = [(e, True) for e in inner.e_subs] + [(e, False) for e in inner.e_fish]
        return new, is_sub  # [x, row, moves right, ...]

    def diver(u: float) -> list[Any]:
        inner.random = ProbeRandom(u)
        inner.divers = []
        inner._spawn_diver()
        (new,) = inner.divers
        return new

    enemy_probe, diver_probe = ProbeRandom(0.5), ProbeRandom(0.5)
    inner.random, inner.e_subs, inner.e_fish = enemy_probe, [], []
    inner._spawn_enemy()
    inner.random, inner.divers = diver_probe, []
    inner._spawn_diver()
    ((enemy_low, enemy_high, _),) = enemy_probe.randint_calls  # randint(low=1, high=9): rows low..high-1
    ((diver_low, diver_high, _),) = diver_probe.randint_calls
    return {
        "enemy_right": minatar_probability(lambda u: bool(enemy(u)[0][2])),
        "enemy_sub": minatar_probability(lambda u: enemy(u)[1]),
        "enemy_rows": range(enemy_low, enemy_high),
        "diver_right": minatar_probability(lambda u: bool(diver(u)[2])),
        "diver_rows": range(diver_low, diver_high),
    }


def test_seaquest_spawn_statistics() -> None:
    """Enemy side, sub and row, diver side and row match minatar's spawns (read from its code)."""
    expected = _seaquest_spawn_probabilities()
    states = _step_many(
        "Seaquest-MinAtar",
        lambda s: s.replace(enemy_spawn_timer=jnp.int32(0), diver_spawn_timer=jnp.int32(0)),
        action=0,
    )
    assert np.all(states.enemy_alive[:, 0]) and np.all(states.diver_alive[:, 0])
    assert set(np.unique(states.enemy_y[:, 0])) == set(expected["enemy_rows"])
    assert set(np.unique(states.diver_y[:, 0])) == set(expected["diver_rows"])
    for row in expected["enemy_rows"]:
        assert _proportion_ok(states.enemy_y[:, 0] == row, 1 / len(expected["enemy_rows"])), row
    for row in expected["diver_rows"]:
        assert _proportion_ok(states.diver_y[:, 0] == row, 1 / len(expected["diver_rows"])), row
    assert _proportion_ok(states.enemy_right[:, 0], expected["enemy_right"]), expected
    assert _proportion_ok(states.enemy_is_sub[:, 0], expected["enemy_sub"]), expected
    assert _proportion_ok(states.diver_right[:, 0], expected["diver_right"]), expected
    # Enemies and divers move only after their timers run out: still at the edge they entered from.
    np.testing.assert_array_equal(states.enemy_x[:, 0], np.where(states.enemy_right[:, 0], 0, 9))


def test_seaquest_spawn_blocked_by_opposite_direction() -> None:
    """No spawn into a row where an enemy moves the other way (minatar's rule)."""
    env, params = le.make("Seaquest-MinAtar", autoreset=False)
    env = env.unwrapped
    _, state = env.reset(jax.random.key(0), params)
    state = state.replace(
        enemy_spawn_timer=jnp.int32(0),
        enemy_alive=state.enemy_alive.at[0].set(True),
        enemy_y=state.enemy_y.at[0].set(3),
        enemy_x=state.enemy_x.at[0].set(5),
        enemy_right=state.enemy_right.at[0].set(True),
        enemy_move_timer=state.enemy_move_timer.at[0].set(4),
    )
    draws = env.draw(jax.random.key(0), params)
    blocked = draws.replace(enemy_right=jnp.float32(0.9), enemy_row=jnp.float32(2.5 / 8))  # left, row 3
    allowed = draws.replace(enemy_right=jnp.float32(0.1), enemy_row=jnp.float32(2.5 / 8))  # right, row 3
    _, after_blocked, *_ = env.transition(state, 0, blocked, params)
    _, after_allowed, *_ = env.transition(state, 0, allowed, params)
    assert int(after_blocked.enemy_alive.sum()) == 1 and int(after_allowed.enemy_alive.sum()) == 2


def _freeway_car_probabilities() -> dict[str, Any]:
    """minatar's freeway ``Env._randomize_cars``, probed: the speed range and P(moves right)."""
    inner = minatar.Environment("freeway").env

    def speeds(u: float) -> np.ndarray:
        inner.random = ProbeRandom(u)
        inner._randomize_cars(initialize=True)
        return np.array([car[3] for car in inner.cars])  # signed speed, + = right

    probe = ProbeRandom(0.5)
    inner.random = probe
    inner._randomize_cars(initialize=True)
    ((low, high, size),) = probe.randint_calls  # randint(1, 6, 8): speeds low..high-1, one per car
    assert size == 8
    return {"speeds": range(low, high), "right": minatar_probability(lambda u: bool(speeds(u)[0] > 0))}


def test_freeway_new_car_statistics() -> None:
    """Crossing redraws every car: speeds and directions as minatar's (read from its code)."""
    expected = _freeway_car_probabilities()
    states = _step_many(
        "Freeway-MinAtar",
        lambda s: s.replace(pos=jnp.int32(1), move_timer=jnp.int32(0), last_action=jnp.int32(2)),
        action=1,  # up
        n=8000,
    )
    assert np.all(states.pos == 9)
    speeds = np.abs(states.car_speed)
    assert set(np.unique(speeds)) == set(expected["speeds"])
    for speed in expected["speeds"]:
        assert _proportion_ok(speeds == speed, 1 / len(expected["speeds"])), speed
    assert _proportion_ok(states.car_speed > 0, expected["right"]), expected
    # The new timers start at the new speeds and count down once this step; no car moves yet.
    np.testing.assert_array_equal(states.car_timer, speeds - 1)
    np.testing.assert_array_equal(states.car_x, 0)
