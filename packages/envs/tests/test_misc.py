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
from lamella.envs.testing import check_env

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


def run_parity(
    env_id: str,
    copy_state: Callable[[Any], Any],
    actions: Callable[[jax.Array, int], Any],
    params: dict[str, Any] | None = None,
    make_kwargs: dict[str, Any] | None = None,
    compare_mask: Callable[[Any, Any], Any] | None = None,
    atol: float = 0.0,
    rollout_params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One step of gymnax and lamella from the same states and actions; returns both sides' outputs.

    ``params`` overrides both sides' params for the compared step, ``rollout_params``
    gymnax's params in the rollout that supplies the states;
    ``compare_mask(gymnax_state, gymnax_next_state)`` limits the next-state/obs/terminated
    comparison to the transitions where it is True (rewards are always compared).
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

    def gymnax_step(key: jax.Array, state: Any, action: Any) -> Any:
        obs, next_state, reward, done, info = genv.step_env(key, state, action, gparams)
        return obs, next_state, reward, done, genv.is_truncated(next_state, gparams)

    def lamella_step(key: jax.Array, state: Any, action: Any) -> Any:
        obs, next_state, reward, terminated, truncated, _ = env.step(key, copy_state(state), action, lparams)
        return obs, next_state, reward, terminated, truncated

    g_obs, g_next, g_reward, g_done, g_trunc = jax.jit(jax.vmap(gymnax_step))(keys, states, acts)
    l_obs, l_next, l_reward, l_term, l_trunc = jax.jit(jax.vmap(lamella_step))(keys, states, acts)
    mask = np.ones(n, bool) if compare_mask is None else np.asarray(compare_mask(states, g_next))
    assert mask.sum() > n // 2, f"too few transitions compared: {mask.sum()} of {n}"
    np.testing.assert_allclose(np.asarray(l_reward), np.asarray(g_reward, np.float32), rtol=1e-5, atol=atol)
    np.testing.assert_allclose(
        np.asarray(l_obs)[mask], np.asarray(g_obs, np.float32)[mask], rtol=1e-5, atol=atol, err_msg="obs"
    )
    np.testing.assert_array_equal(np.asarray(l_term)[mask], np.asarray(g_done)[mask], err_msg="terminated")
    np.testing.assert_array_equal(np.asarray(l_trunc), np.asarray(g_trunc), err_msg="truncated")
    expected_next = jax.jit(jax.vmap(copy_state))(g_next)
    for name, got, want in zip(
        [f.name for f in type(l_next).__dataclass_fields__.values()],
        jax.tree.leaves(l_next),
        jax.tree.leaves(expected_next),
    ):
        np.testing.assert_allclose(
            np.asarray(got)[mask], np.asarray(want)[mask], rtol=1e-5, atol=atol, err_msg=f"state.{name}"
        )
    return {"mask": mask, "terminated": np.asarray(g_done), "reward": np.asarray(g_reward), "n": n}


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
    out = run_parity("FourRooms-misc", copy_four_rooms, _discrete(4), params={"fail_prob": 0.0})
    assert out["terminated"].any() or out["reward"].sum() == 0


def test_parity_meta_maze() -> None:
    # Where the goal is reached, both sides teleport with their own random draw: compare the rest.
    not_reached = lambda s, g_next: g_next.last_reward < 5.0  # noqa: E731
    out = run_parity("MetaMaze-misc", copy_meta_maze, _discrete(4), compare_mask=not_reached)
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
    )


def test_parity_bernoulli_bandit() -> None:
    # reward_prob 0: arms pay with probability 0 and 1, so the draws are deterministic.
    run_parity(
        "BernoulliBandit-misc",
        copy_bernoulli,
        _discrete(2),
        params={"reward_prob": 0.0},
        rollout_params={"reward_prob": 0.0},
    )


def test_parity_gaussian_bandit() -> None:
    run_parity("GaussianBandit-misc", copy_gaussian, _discrete(2), params={"sigma_l": 0.0}, atol=1e-6)


def test_parity_reacher() -> None:
    run_parity("Reacher-misc", copy_reacher, _box(-1.0, 1.0, 2), atol=1e-5)


def test_parity_swimmer() -> None:
    run_parity("Swimmer-misc", copy_swimmer, _box(-1.0, 1.0, 2), atol=1e-6)


def test_parity_pong() -> None:
    out = run_parity("Pong-misc", copy_pong, _discrete(3))
    assert out["terminated"].any(), "no transition lost the ball"


@pytest.mark.parametrize("map_name", ["4x4", "8x8"])
def test_parity_frozen_lake(map_name: str) -> None:
    kwargs = {"map_name": map_name, "is_slippery": False}
    out = run_parity("FrozenLake-misc", copy_frozen_lake, _discrete(4), make_kwargs=kwargs)
    assert out["terminated"].any()
