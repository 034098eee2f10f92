"""gymnax's misc envs: conformance, step-by-step parity with gymnax, statistics of the random parts.

Parity: gymnax (the reference implementation) is rolled out with random actions
to collect a few thousand varied states; each state is copied into lamella's
state, both libraries step it with the same action (one jitted vmap per side),
and observation, reward, terminated, truncated and the next state must agree.
Steps that draw randomness are made deterministic for this check through their
params (no slip, no reward noise, restart at the centre); the random parts are
then compared statistically, since lamella draws its randomness differently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs as le
from lamella.envs import misc
from lamella.envs.testing import assert_parity_coverage, check_env
from lamella.envs.wrappers import AutoReset

gymnax = pytest.importorskip("gymnax")

MISC_IDS = [
    "FourRooms-misc",
    "MetaMaze-misc",
    "PointRobot-misc",
    "BernoulliBandit-misc",
    "GaussianBandit-misc",
    "Reacher-misc",
    "Swimmer-misc",
    "Pong-misc",
    "FrozenLake-misc",
]

NUM_ENVS, NUM_STEPS = 32, 64  # gymnax rollout that supplies the parity states: 2048 transitions


@pytest.mark.parametrize("env_id", MISC_IDS)
@pytest.mark.parametrize("autoreset", [False, True])
def test_check_env(env_id: str, autoreset: bool) -> None:
    env, params = le.make(env_id, autoreset=autoreset)
    check_env(env, params, num_steps=16, num_envs=2)


def test_registered_under_gymnax_ids() -> None:
    assert set(MISC_IDS) <= set(le.registered())
    assert set(MISC_IDS) <= set(gymnax.registered_envs)


@pytest.mark.parametrize("env_id", MISC_IDS)
def test_render_vmaps(env_id: str) -> None:
    """A batch of states renders in one jitted vmap; frames are RGB uint8 and differ between states."""
    env, params = le.make(env_id, autoreset=False)
    keys = jax.random.split(jax.random.key(0), 3)
    _, states = jax.vmap(lambda k: env.reset(k, params))(keys)
    actions = jax.vmap(env.action_space(params).sample)(keys)
    _, states, *_ = jax.vmap(lambda k, s, a: env.step(k, s, a, params))(keys, states, actions)
    frames = np.asarray(jax.jit(jax.vmap(lambda s: env.render(s, params)))(states))
    assert frames.dtype == np.uint8 and frames.ndim == 4 and frames.shape[0] == 3 and frames.shape[-1] == 3
    assert all(len(np.unique(frame.reshape(-1, 3), axis=0)) >= 3 for frame in frames)


# Parity harness ---------------------------------------------------------------------------


def _gymnax_states(
    env_id: str,
    make_kwargs: dict[str, Any],
    actions: Callable[[jax.Array, int], Any],
    params: dict[str, Any] | None = None,
) -> Any:
    """States visited by gymnax (auto-reset) under random actions, flattened to (N,)."""
    genv, gparams = gymnax.make(env_id, **make_kwargs)
    gparams = gparams.replace(**(params or {}))
    keys = jax.random.split(jax.random.key(7), NUM_ENVS)
    _, state = jax.vmap(genv.reset, in_axes=(0, None))(keys, gparams)

    def body(state: Any, key: jax.Array) -> Any:
        k_act, k_step = jax.random.split(key)
        acts = actions(k_act, NUM_ENVS)
        _, state, *_ = jax.vmap(genv.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k_step, NUM_ENVS), state, acts, gparams
        )
        return state, state

    _, states = jax.jit(lambda s: jax.lax.scan(body, s, jax.random.split(jax.random.key(8), NUM_STEPS)))(
        state
    )
    return jax.tree.map(lambda x: x.reshape((-1, *x.shape[2:])), states)


def _discrete(n: int) -> Callable[[jax.Array, int], jax.Array]:
    return lambda key, size: jax.random.randint(key, (size,), 0, n)


def _box(low: float, high: float, dim: int) -> Callable[[jax.Array, int], jax.Array]:
    return lambda key, size: jax.random.uniform(key, (size, dim), minval=low, maxval=high)


NO_TERMINAL = "the env has no terminal state (gymnax's is_terminated is always False)"
TRUNCATE_EVERY = 16  # every 16th compared state starts one step before the time limit


def run_parity(
    env_id: str,
    copy_state: Callable[[Any], Any],
    actions: Callable[[jax.Array, int], Any],
    params: dict[str, Any] | None = None,
    make_kwargs: dict[str, Any] | None = None,
    compare_mask: Callable[[Any, Any], Any] | None = None,
    atol: float = 0.0,
    rollout_params: dict[str, Any] | None = None,
    prepare: Callable[[Any, Any, Any], tuple[Any, Any]] | None = None,
    **coverage: str,
) -> dict[str, Any]:
    """One step of gymnax and lamella from the same states and actions; returns both sides' outputs.

    ``params`` overrides both sides' params for the compared step, ``rollout_params``
    gymnax's params in the rollout that supplies the states;
    ``compare_mask(gymnax_state, gymnax_next_state)`` limits the next-state/obs/terminated
    comparison to the transitions where it is True (rewards are always compared).
    Every ``TRUNCATE_EVERY``-th state is moved to one step before the time limit, so
    truncation is compared; ``prepare(genv, states, actions)`` may move states and actions
    further (e.g. next to a goal). The lamella step is also taken through ``AutoReset``: its
    final observation must equal gymnax's observation, its returned observation lamella's
    bare step's, or a fresh reset's (same key) where the episode ended. The compared
    transitions must cover terminations, truncations, auto-resets and non-zero rewards
    (:func:`assert_parity_coverage`; ``coverage`` passes its reasons).
    """
    make_kwargs = make_kwargs or {}
    states = _gymnax_states(env_id, make_kwargs, actions, rollout_params)
    genv, gparams = gymnax.make(env_id, **make_kwargs)
    env, lparams = le.make(env_id, autoreset=False, **make_kwargs)
    if params:
        gparams = gparams.replace(**params)
        lparams = lparams.replace(**params)
    n = jax.tree.leaves(states)[0].shape[0]
    acts = actions(jax.random.key(9), n)
    keys = jax.random.split(jax.random.key(10), n)
    max_steps = getattr(gparams, "max_steps_in_episode", None)
    if max_steps is not None:
        near_limit = jnp.arange(n) % TRUNCATE_EVERY == TRUNCATE_EVERY - 1
        states = states.replace(
            time=jnp.where(near_limit, max_steps - 1, states.time).astype(states.time.dtype)
        )
    if prepare is not None:
        states, acts = prepare(genv, states, acts)
    auto = AutoReset(env)

    def gymnax_step(key: jax.Array, state: Any, action: Any) -> Any:
        obs, next_state, reward, done, info = genv.step_env(key, state, action, gparams)
        return obs, next_state, reward, done, genv.is_truncated(next_state, gparams)

    def lamella_step(key: jax.Array, state: Any, action: Any) -> Any:
        obs, next_state, reward, terminated, truncated, _ = env.step(key, copy_state(state), action, lparams)
        auto_obs, _, _, _, _, info = auto.step(key, copy_state(state), action, lparams)
        reset_obs = env.reset(key, lparams)[0]
        return obs, next_state, reward, terminated, truncated, auto_obs, info["final_observation"], reset_obs

    g_obs, g_next, g_reward, g_done, g_trunc = jax.jit(jax.vmap(gymnax_step))(keys, states, acts)
    l_obs, l_next, l_reward, l_term, l_trunc, a_obs, a_final, a_reset = jax.jit(jax.vmap(lamella_step))(
        keys, states, acts
    )
    mask = np.ones(n, bool) if compare_mask is None else np.asarray(compare_mask(states, g_next))
    assert mask.sum() > n // 2, f"too few transitions compared: {mask.sum()} of {n}"
    np.testing.assert_allclose(np.asarray(l_reward), np.asarray(g_reward, np.float32), rtol=1e-5, atol=atol)
    np.testing.assert_allclose(
        np.asarray(l_obs)[mask], np.asarray(g_obs, np.float32)[mask], rtol=1e-5, atol=atol, err_msg="obs"
    )
    np.testing.assert_array_equal(np.asarray(l_term)[mask], np.asarray(g_done)[mask], err_msg="terminated")
    np.testing.assert_array_equal(np.asarray(l_trunc), np.asarray(g_trunc), err_msg="truncated")
    np.testing.assert_allclose(
        np.asarray(a_final)[mask],
        np.asarray(g_obs, np.float32)[mask],
        rtol=1e-5,
        atol=atol,
        err_msg="final obs",
    )
    # Where the episode ended the wrapper returns a fresh reset, elsewhere the bare step's obs. Only
    # where compared: a random step draws from a key the wrapper forks (MetaMaze's teleport, left
    # out by its mask as for gymnax), so there the two steps may differ.
    ended = (np.asarray(l_term) | np.asarray(l_trunc)) & mask
    np.testing.assert_array_equal(
        np.asarray(a_obs)[ended], np.asarray(a_reset)[ended], err_msg="auto-reset obs"
    )
    np.testing.assert_array_equal(np.asarray(a_obs)[mask & ~ended], np.asarray(l_obs)[mask & ~ended])
    expected_next = jax.jit(jax.vmap(copy_state))(g_next)
    for name, got, want in zip(
        [f.name for f in type(l_next).__dataclass_fields__.values()],
        jax.tree.leaves(l_next),
        jax.tree.leaves(expected_next),
    ):
        np.testing.assert_allclose(
            np.asarray(got)[mask], np.asarray(want)[mask], rtol=1e-5, atol=atol, err_msg=f"state.{name}"
        )
    g_ended = np.asarray(g_done) | np.asarray(g_trunc)
    assert_parity_coverage(
        env_id,
        terminated=np.asarray(g_done)[mask],
        truncated=np.asarray(g_trunc)[mask],
        reward=np.asarray(g_reward),
        auto_reset=g_ended[mask],
        **coverage,
    )
    return {"mask": mask, "terminated": np.asarray(g_done), "reward": np.asarray(g_reward), "n": n}


def lake_next_to_goal(genv: Any, states: Any, acts: Any) -> tuple[Any, Any]:
    """FrozenLake: every 8th state moved left of the goal (the last cell of both maps, its left
    neighbour frozen in both) with action 2 (right): random play rarely crosses the 8x8 lake."""
    goal = genv.nrow * genv.ncol - 1
    move = jnp.arange(acts.shape[0]) % 8 == 0
    position = jnp.where(move, goal - 1, states.position).astype(states.position.dtype)
    return states.replace(position=position), jnp.where(move, 2, acts).astype(acts.dtype)


def next_to_goal(genv: Any, states: Any, acts: Any) -> tuple[Any, Any]:
    """FourRooms: every 8th state moved to the free cell from which its action enters the goal."""
    goal = states.goal
    start = goal - genv.directions[acts]
    free = jnp.asarray(genv.env_map)[start[:, 0], start[:, 1]].astype(bool)
    move = (jnp.arange(acts.shape[0]) % 8 == 0) & free
    return states.replace(pos=jnp.where(move[:, None], start, states.pos).astype(states.pos.dtype)), acts


# State copies gymnax -> lamella (one env; vmapped by the harness) ------------------------


def _i32(x: Any) -> jax.Array:
    return jnp.asarray(x).astype(jnp.int32)


def _f32(x: Any) -> jax.Array:
    return jnp.asarray(x).astype(jnp.float32)


def copy_four_rooms(s: Any) -> misc.FourRoomsState:
    return misc.FourRoomsState(_i32(s.pos[0]), _i32(s.pos[1]), _i32(s.goal[0]), _i32(s.goal[1]), _i32(s.time))


def copy_meta_maze(s: Any) -> misc.MetaMazeState:
    return misc.MetaMazeState(
        _i32(s.pos[0]),
        _i32(s.pos[1]),
        _i32(s.goal[0]),
        _i32(s.goal[1]),
        _i32(s.last_action),
        _f32(s.last_reward),
        _i32(s.time),
    )


def copy_point_robot(s: Any) -> misc.PointRobotState:
    return misc.PointRobotState(
        _f32(s.pos[0]),
        _f32(s.pos[1]),
        _f32(s.goal[0]),
        _f32(s.goal[1]),
        _f32(s.last_action),
        _f32(s.last_reward),
        _i32(s.goals_reached),
        _i32(s.time),
    )


def copy_bernoulli(s: Any) -> misc.BernoulliBanditState:
    return misc.BernoulliBanditState(
        _f32(s.reward_probs[0]),
        _f32(s.exp_reward_best),
        _i32(s.last_action),
        _f32(s.last_reward),
        _i32(s.time),
    )


def copy_gaussian(s: Any) -> misc.GaussianBanditState:
    return misc.GaussianBanditState(_f32(s.mu), _i32(s.last_action), _f32(s.last_reward), _i32(s.time))


def copy_reacher(s: Any) -> misc.ReacherState:
    return misc.ReacherState(
        _f32(s.angles), _f32(s.angle_vels), _f32(s.goal_xy[0]), _f32(s.goal_xy[1]), _i32(s.time)
    )


def copy_swimmer(s: Any) -> misc.SwimmerState:
    return misc.SwimmerState(
        _f32(s.urchin_xys),
        _f32(s.xy[0]),
        _f32(s.xy[1]),
        _f32(s.xy_vel[0]),
        _f32(s.xy_vel[1]),
        _f32(s.goal_xy[0]),
        _f32(s.goal_xy[1]),
        _i32(s.time),
    )


def copy_pong(s: Any) -> misc.PongState:
    return misc.PongState(
        _f32(s.paddle_centers[0]),
        _f32(s.paddle_centers[1]),
        _f32(s.ball_position[0]),
        _f32(s.ball_position[1]),
        _f32(s.last_ball_position[0]),
        _f32(s.last_ball_position[1]),
        _i32(s.ball_velocity[0]),
        _i32(s.ball_velocity[1]),
        _i32(s.time),
    )


def copy_frozen_lake(s: Any) -> misc.FrozenLakeState:
    return misc.FrozenLakeState(_i32(s.position), _i32(s.time))


# Parity tests -----------------------------------------------------------------------------


def test_parity_four_rooms() -> None:
    # Random play never reaches the goal in 2048 transitions: every 8th state starts next to it.
    out = run_parity(
        "FourRooms-misc", copy_four_rooms, _discrete(4), params={"fail_prob": 0.0}, prepare=next_to_goal
    )
    assert out["terminated"].sum() >= 100, out["terminated"].sum()


def test_parity_meta_maze() -> None:
    # Where the goal is reached, both sides teleport with their own random draw: compare the rest.
    not_reached = lambda s, g_next: g_next.last_reward < 5.0  # noqa: E731
    out = run_parity(
        "MetaMaze-misc",
        copy_meta_maze,
        _discrete(4),
        compare_mask=not_reached,
        never_terminates="MetaMaze terminates only when the random teleport after reaching the goal "
        "lands on the goal; both libraries draw it differently, so those transitions are masked out",
    )
    assert (out["reward"] == 10.0).any(), "no transition reached the goal"
    assert not out["terminated"][out["mask"]].any()


@pytest.mark.parametrize("dense_reward", [False, True])
def test_parity_point_robot(dense_reward: bool) -> None:
    # center_init makes the restart after reaching the goal deterministic (the origin).
    run_parity(
        "PointRobot-misc",
        copy_point_robot,
        _box(-0.2, 0.2, 2),  # beyond max_force, so clipping is exercised
        params={"center_init": True, "dense_reward": dense_reward},
        atol=1e-6,
        never_terminates="reaching the goal restarts the robot within the episode (meta-RL); " + NO_TERMINAL,
    )


def test_parity_bernoulli_bandit() -> None:
    # reward_prob 0: arms pay with probability 0 and 1, so the draws are deterministic.
    run_parity(
        "BernoulliBandit-misc",
        copy_bernoulli,
        _discrete(2),
        params={"reward_prob": 0.0},
        rollout_params={"reward_prob": 0.0},
        never_terminates="a bandit episode is a fixed number of pulls; " + NO_TERMINAL,
    )


def test_parity_gaussian_bandit() -> None:
    run_parity(
        "GaussianBandit-misc",
        copy_gaussian,
        _discrete(2),
        params={"sigma_l": 0.0},
        atol=1e-6,
        never_terminates="a bandit episode is a fixed number of pulls; " + NO_TERMINAL,
    )


def test_parity_reacher() -> None:
    run_parity("Reacher-misc", copy_reacher, _box(-1.0, 1.0, 2), atol=1e-5, never_terminates=NO_TERMINAL)


def test_parity_swimmer() -> None:
    run_parity("Swimmer-misc", copy_swimmer, _box(-1.0, 1.0, 2), atol=1e-6, never_terminates=NO_TERMINAL)


def test_parity_pong() -> None:
    out = run_parity("Pong-misc", copy_pong, _discrete(3))
    assert out["terminated"].any(), "no transition lost the ball"


@pytest.mark.parametrize("map_name", ["4x4", "8x8"])
def test_parity_frozen_lake(map_name: str) -> None:
    kwargs = {"map_name": map_name, "is_slippery": False}
    out = run_parity(
        "FrozenLake-misc", copy_frozen_lake, _discrete(4), make_kwargs=kwargs, prepare=lake_next_to_goal
    )
    assert out["terminated"].any()


# Statistics of the random parts -----------------------------------------------------------

NUM_DRAWS = 8192
COPY = {
    "FourRooms-misc": copy_four_rooms,
    "MetaMaze-misc": copy_meta_maze,
    "PointRobot-misc": copy_point_robot,
    "BernoulliBandit-misc": copy_bernoulli,
    "GaussianBandit-misc": copy_gaussian,
    "Reacher-misc": copy_reacher,
    "Swimmer-misc": copy_swimmer,
    "Pong-misc": copy_pong,
    "FrozenLake-misc": copy_frozen_lake,
}


def assert_same_distribution(lamella: Any, gymnax_side: Any, what: str) -> None:
    """Per-entry means within 6 standard errors and standard deviations within 10% (+0.01)."""
    for i, (a, b) in enumerate(zip(jax.tree.leaves(lamella), jax.tree.leaves(gymnax_side))):
        a = np.asarray(a, np.float64).reshape(NUM_DRAWS, -1)
        b = np.asarray(b, np.float64).reshape(NUM_DRAWS, -1)
        tolerance = 6 * np.sqrt((a.var(0) + b.var(0)) / NUM_DRAWS) + 1e-6
        np.testing.assert_array_less(
            np.abs(a.mean(0) - b.mean(0)), tolerance, err_msg=f"{what} leaf {i}: mean"
        )
        np.testing.assert_allclose(a.std(0), b.std(0), rtol=0.1, atol=0.01, err_msg=f"{what} leaf {i}: std")


RESET_CASES: list[tuple[str, dict[str, Any]]] = [(env_id, {}) for env_id in MISC_IDS] + [
    ("FourRooms-misc", {"resample_init_pos": True, "resample_goal_pos": True}),
    ("PointRobot-misc", {"center_init": True}),
]


@pytest.mark.parametrize(("env_id", "params"), RESET_CASES)
def test_reset_distribution(env_id: str, params: dict[str, Any]) -> None:
    """Reset observations and states (gymnax's copied into lamella's form) have the same distribution."""
    genv, gparams = gymnax.make(env_id)
    env, lparams = le.make(env_id, autoreset=False)
    gparams, lparams = gparams.replace(**params), lparams.replace(**params)
    keys = jax.random.split(jax.random.key(11), NUM_DRAWS)
    g_obs, g_state = jax.jit(jax.vmap(lambda k: genv.reset_env(k, gparams)))(keys)
    l_obs, l_state = jax.jit(jax.vmap(lambda k: env.reset(k, lparams)))(keys)
    assert_same_distribution(l_obs, g_obs, f"{env_id} reset obs")
    assert_same_distribution(l_state, jax.vmap(COPY[env_id])(g_state), f"{env_id} reset state")
    if params.get("resample_goal_pos"):
        # Every free cell can be the goal, and the start is never on the goal.
        goals = set(zip(np.asarray(l_state.goal_row).tolist(), np.asarray(l_state.goal_col).tolist()))
        assert len(goals) == int(misc.FourRooms().walkable.sum())
        assert not np.any((l_state.row == l_state.goal_row) & (l_state.col == l_state.goal_col))


def _step_from(
    env_id: str, edit: Callable[[Any], Any], action: Any, make_kwargs: dict[str, Any] | None = None
):
    """``NUM_DRAWS`` steps of both libraries from one state (gymnax's reset state edited by ``edit``)."""
    make_kwargs = make_kwargs or {}
    genv, gparams = gymnax.make(env_id, **make_kwargs)
    env, lparams = le.make(env_id, autoreset=False, **make_kwargs)
    _, g_state = genv.reset_env(jax.random.key(0), gparams)
    g_state = edit(g_state)
    l_state = COPY[env_id](g_state)
    keys = jax.random.split(jax.random.key(12), NUM_DRAWS)
    g_out = jax.jit(jax.vmap(lambda k: genv.step_env(k, g_state, action, gparams)))(keys)
    l_out = jax.jit(jax.vmap(lambda k: env.step(k, l_state, action, lparams)))(keys)
    g_next = jax.vmap(COPY[env_id])(g_out[1])
    assert_same_distribution(
        (l_out[0], l_out[1], l_out[2], l_out[3]), (g_out[0], g_next, g_out[2], g_out[3]), env_id
    )
    return l_out


def test_four_rooms_slip_frequencies() -> None:
    """From an open cell, "up" goes up with probability 1 - fail_prob and each other way with fail_prob / 3."""
    l_out = _step_from("FourRooms-misc", lambda s: s.replace(pos=jnp.array([2, 2])), 0)
    rows, cols = np.asarray(l_out[1].row), np.asarray(l_out[1].col)
    outcomes = {"up": (1, 2), "right": (2, 3), "down": (3, 2), "left": (2, 1)}
    freq = {name: np.mean((rows == r) & (cols == c)) for name, (r, c) in outcomes.items()}
    assert abs(freq["up"] - 2 / 3) < 0.02 and all(
        abs(freq[k] - 1 / 9) < 0.015 for k in ("right", "down", "left")
    )


def test_meta_maze_teleport_uniform() -> None:
    """Reaching the goal pays 10 and teleports uniformly over the free cells (ending the episode on the goal)."""
    env = misc.MetaMaze()
    # Agent at (1, 1) moving right onto the goal at (1, 2).
    l_out = _step_from("MetaMaze-misc", lambda s: s.replace(pos=jnp.array([1, 1]), goal=jnp.array([1, 2])), 1)
    assert np.all(np.asarray(l_out[2]) == 10.0)
    cells = np.asarray(l_out[1].row) * env.side + np.asarray(l_out[1].col)
    free = env.free_cells
    assert set(cells.tolist()) == set(free.tolist())
    assert abs(np.mean(l_out[3]) - 1 / len(free)) < 0.01


def test_point_robot_restart_distribution() -> None:
    """On the goal, the reward is 1 and the robot restarts at a random point of the half disc."""
    l_out = _step_from("PointRobot-misc", lambda s: s.replace(pos=s.goal), jnp.array([0.05, -0.05]))
    assert np.all(np.asarray(l_out[2]) == 1.0)
    x, y = np.asarray(l_out[1].x), np.asarray(l_out[1].y)
    assert np.all(y >= 0) and np.all(np.hypot(x, y) <= 1.0)
    assert abs(np.mean(np.hypot(x, y)) - 0.5) < 0.02


@pytest.mark.parametrize("arm", [0, 1])
def test_bernoulli_bandit_reward_rate(arm: int) -> None:
    l_out = _step_from("BernoulliBandit-misc", lambda s: s.replace(reward_probs=jnp.array([0.1, 0.9])), arm)
    assert abs(np.mean(l_out[2]) - (0.1, 0.9)[arm]) < 0.02


def test_gaussian_bandit_rewards() -> None:
    l_out = _step_from("GaussianBandit-misc", lambda s: s.replace(mu=jnp.float32(-0.5)), 1)
    reward = np.asarray(l_out[2])
    assert abs(reward.mean() + 0.5) < 0.01 and abs(reward.std() - 0.1) < 0.01
    safe = _step_from("GaussianBandit-misc", lambda s: s.replace(mu=jnp.float32(-0.5)), 0)
    assert np.all(np.asarray(safe[2]) == 0.0)


def test_gaussian_bandit_inverse_cdf_every_uniform() -> None:
    """Every one of the 2**23 uniforms the env can draw maps to a finite normal within 1e-6 of the
    exact inverse CDF (float64 scipy), monotone and symmetric; and a batch of keys draws no inf."""
    from scipy.special import erfinv

    from lamella.envs.misc import gaussian_bandit

    u = (np.arange(1 << 23, dtype=np.float32) + np.float32(0.5)) * np.float32(1.0 / (1 << 23))
    z = np.asarray(jax.jit(gaussian_bandit._inverse_normal_cdf)(jnp.asarray(u)), np.float64)
    exact = np.sqrt(2.0) * erfinv(2.0 * u.astype(np.float64) - 1.0)
    assert np.all(np.isfinite(z)) and np.all(np.diff(z) >= 0.0)
    np.testing.assert_array_equal(z, -z[::-1])
    assert np.max(np.abs(z - exact)) < 1e-6
    assert 5.2 < z[-1] < 5.4
    draws = jax.jit(jax.vmap(gaussian_bandit._standard_normal))(jax.random.split(jax.random.key(3), 1 << 16))
    assert np.all(np.isfinite(np.asarray(draws)))


def test_frozen_lake_slip_frequencies() -> None:
    """Slippery ice: from cell 6 "down" lands on 10 (frozen), or slips onto the holes 5 and 7, 1/3 each."""
    l_out = _step_from("FrozenLake-misc", lambda s: s.replace(position=jnp.int32(6)), 1)
    cells = np.asarray(l_out[0])
    for cell in (5, 7, 10):
        assert abs(np.mean(cells == cell) - 1 / 3) < 0.02
    np.testing.assert_array_equal(np.asarray(l_out[3]), cells != 10)
    np.testing.assert_allclose(np.asarray(l_out[5]["p"]), 1 / 3, rtol=1e-6)
