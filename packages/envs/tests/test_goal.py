"""Goal-conditioned envs: the Dubins mazes, the point robot, the GoalConditioned wrapper."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs as le
from lamella.envs.classic_control import CartPole
from lamella.envs.goal import DEFAULT_WALLS, GMazeGoalDubins, GMazeParams, GoalConditioned, dubins_move
from lamella.envs.testing import assert_parity_coverage, check_env

GOAL_IDS = [
    "GMazeDubins-v0",
    "GMazeGoalDubins-v0",
    "GMazeDubinsWalls-v0",
    "GMazeGoalDubinsWalls-v0",
    "PointRobotGoal-v0",
]
MAZE = GMazeParams(walls=jnp.asarray(DEFAULT_WALLS))  # gym-gmazes after env.set_walls()


@pytest.mark.parametrize("env_id", GOAL_IDS)
@pytest.mark.parametrize("autoreset", [False, True])
def test_check_env(env_id, autoreset):
    env, params = le.make(env_id, autoreset=autoreset)
    check_env(env, params, num_steps=80)


def _reference_move(position, steer, walls, frame_skip=2):
    """gym-gmazes' Dubins step for one env in float64 NumPy, transcribed from
    ``gym_gmazes/envs/gmaze_dubins.py`` (``GMazeCommon.common_step`` and ``intersect``, commit
    2337dba): no clipping of the steering, positions clipped to [-1, 1], a sub-step whose segment
    crosses a wall is cancelled, parallel segments (zero denominator) never cross. Also returns
    the smallest distance of a crossing parameter to 0 or 1 (how close the wall test was)."""

    def crosses(a, b, c, d):
        x1, y1, x2, y2, x3, y3, x4, y4 = a[0], a[1], b[0], b[1], c[0], c[1], d[0], d[1]
        denom = (x4 - x3) * (y1 - y2) - (x1 - x2) * (y4 - y3)
        if denom == 0:
            return False, 1.0
        t1 = ((y3 - y4) * (x1 - x3) + (x4 - x3) * (y1 - y3)) / denom
        t2 = ((y1 - y2) * (x1 - x3) + (x2 - x1) * (y1 - y3)) / denom
        margin = min(abs(t1), abs(t1 - 1), abs(t2), abs(t2 - 1))
        return (0 < t1 < 1) and (0 < t2 < 1), margin

    position = np.asarray(position, np.float64)
    min_margin = np.inf
    for _ in range(frame_skip):
        xy = np.clip(
            position[:2] + (1 / 20) * np.array([np.cos(np.pi * position[2]), np.sin(np.pi * position[2])]),
            -1,
            1,
        )
        heading = (position[2] + steer / 10 + 1.0) % 2.0 - 1.0
        moved = np.array([xy[0], xy[1], heading])
        hit = False
        for w in walls:
            crossed, margin = crosses(position, moved, w[0], w[1])
            hit |= crossed
            min_margin = min(min_margin, margin)
        position = position if hit else moved
    return position, min_margin


def test_dubins_dynamics_match_reference():
    """2000 random transitions (random positions, headings, steering; many hit walls).

    Tolerance 1e-5: lamella computes in float32, the reference in float64. Transitions where
    a crossing parameter lies within 1e-4 of 0 or 1 (the wall test is then decided by
    rounding) are excluded and counted; there are only a few.

    Deliberate difference: steering outside the action space [-1, 1] (a fifth of the sample)
    is clipped by lamella and not by gym-gmazes (see ``dubins_move``), so for those the
    reference is given the clipped steering; ``test_dubins_steering_clip_is_the_only_difference``
    shows the two differ there.
    """
    rng = np.random.default_rng(0)
    n = 2000
    positions = np.concatenate([rng.uniform(-1, 1, (n, 2)), rng.uniform(-1, 1, (n, 1))], axis=1).astype(
        np.float32
    )
    steers = rng.uniform(-1.2, 1.2, n).astype(np.float32)
    params = MAZE
    ours = np.asarray(jax.jit(jax.vmap(lambda p, a: dubins_move(p, a, params)))(positions, steers))
    # The same transitions as whole steps of GMazeDubinsWalls-v0 through AutoReset (make's default);
    # every 16th starts one step before gym-gmazes' max_episode_steps (70).
    env, env_params = le.make("GMazeDubinsWalls-v0")
    times = np.where(np.arange(n) % 16 == 15, 69, 0).astype(np.int32)
    _, state = env.reset(jax.random.key(0), env_params)
    states = jax.vmap(lambda p, t: state.replace(position=p, time=t))(
        jnp.asarray(positions), jnp.asarray(times)
    )
    step = jax.jit(jax.vmap(lambda s, a: env.step(jax.random.key(0), s, a, env_params)))
    env_obs, _, env_reward, env_terminated, env_truncated, info = step(states, jnp.asarray(steers)[:, None])
    reset_obs = np.asarray(env.reset(jax.random.key(0), env_params)[0])
    ref_reward, ref_truncated, keep = [], times + 1 == 70, []
    blocked = compared = ambiguous = 0
    for i in range(n):
        steer = np.clip(steers[i], -1, 1)  # the deliberate difference; equal to steers[i] for 4/5
        expected, margin = _reference_move(positions[i], steer, DEFAULT_WALLS.astype(np.float64))
        if margin < 1e-4:
            ambiguous += 1
            keep.append(False)
            continue
        keep.append(True)
        ref_reward.append(float(expected[0] > 0.5 and expected[1] > 0.5))  # default_reward_fun
        compared += 1
        blocked += int(np.allclose(expected[:2], positions[i, :2]))
        heading_error = (ours[i, 2] - expected[2] + 1.0) % 2.0 - 1.0  # headings wrap at +-1
        np.testing.assert_allclose(ours[i, :2], expected[:2], atol=1e-5)
        assert abs(heading_error) < 1e-5
    assert ambiguous < 20, ambiguous
    assert blocked > 50, "the sample must include moves blocked by walls"
    assert (np.abs(steers) <= 1).sum() > n // 2, "most of the sample needs no clipping"
    keep = np.asarray(keep)
    np.testing.assert_array_equal(np.asarray(env_reward)[keep], ref_reward)
    np.testing.assert_array_equal(np.asarray(env_truncated), ref_truncated)
    assert not np.any(np.asarray(env_terminated))
    np.testing.assert_allclose(np.asarray(info["final_observation"]), ours, atol=1e-6)
    np.testing.assert_array_equal(
        np.asarray(env_obs)[ref_truncated], np.broadcast_to(reset_obs, (ref_truncated.sum(), 3))
    )
    np.testing.assert_allclose(np.asarray(env_obs)[~ref_truncated], ours[~ref_truncated], atol=1e-6)
    assert_parity_coverage(
        "GMazeDubinsWalls-v0",
        terminated=np.zeros(compared, bool),
        truncated=ref_truncated[keep],
        reward=np.asarray(ref_reward),
        auto_reset=ref_truncated[keep],
        never_terminates="gym-gmazes' GMazeDubins has no terminal state (terminated is all False)",
    )


def test_dubins_steering_clip_is_the_only_difference():
    """Steering 1.2: gym-gmazes turns 0.12 per sub-step, lamella (clipping to 1) 0.1."""
    start = np.array([-0.9, -0.9, 0.25], np.float32)
    ours = np.asarray(dubins_move(jnp.asarray(start), jnp.array([1.2]), GMazeParams()))
    unclipped, _ = _reference_move(start, 1.2, [])
    clipped, _ = _reference_move(start, 1.0, [])
    np.testing.assert_allclose(ours, clipped, atol=1e-5)
    np.testing.assert_allclose(unclipped[2] - clipped[2], 0.04, atol=1e-9)  # 2 sub-steps x 0.02


def test_dubins_default_reward_is_gym_gmazes():
    """gym-gmazes' default_reward_fun: 1.0 where x > 0.5 and y > 0.5 after the step.

    (Its first commit paid x > -0.5 and y > 0; the third case tells the two apart.)
    """
    env, params = le.make("GMazeDubins-v0", autoreset=False)
    _, state = env.reset(jax.random.key(0), params)
    cases = (
        ([0.7, 0.7, 0.25], 1.0),  # ends at (0.77, 0.77)
        ([0.9, 0.9, 0.0], 1.0),  # x clipped to 1
        ([0.0, 0.3, 0.0], 0.0),  # ends at (0.1, 0.3): paid under the first commit's rule only
        ([0.7, 0.2, 0.25], 0.0),  # ends at y = 0.27
    )
    for position, expected in cases:
        state = state.replace(position=jnp.asarray(position, jnp.float32))
        _, _, reward, *_ = env.step(jax.random.key(0), state, jnp.zeros((1,), jnp.float32), params)
        reference, _ = _reference_move(np.asarray(position), 0.0, [])
        assert float(reference[0] > 0.5 and reference[1] > 0.5) == expected
        assert float(reward) == expected, (position, float(reward))


def test_walls_as_gym_gmazes_registers_them():
    """gym-gmazes' envs start with ``walls = []`` (its ``set_walls()`` adds the maze); so do
    lamella's ids, and the ``...Walls-v0`` ids start with that maze."""
    for env_id in ("GMazeDubins-v0", "GMazeGoalDubins-v0"):
        _, params = le.make(env_id)
        assert params.walls.shape == (0, 2, 2)
        _, walled = le.make(env_id.replace("-v0", "Walls-v0"))
        np.testing.assert_array_equal(walled.walls, DEFAULT_WALLS)
    _, params = le.make("GMazeGoalDubins-v0", walls=DEFAULT_WALLS[:1])
    assert params.walls.shape == (1, 2, 2)
    # Without walls the car drives through where the maze's wall x = -0.5 stands.
    moved = dubins_move(jnp.array([-0.52, 0.2, 0.0]), jnp.array([0.0]), GMazeParams())
    np.testing.assert_allclose(moved, [-0.42, 0.2, 0.0], atol=1e-6)
    with pytest.raises(ValueError, match=r"walls must have shape \(num_walls, 2, 2\)"):
        GMazeGoalDubins(walls=np.zeros((3, 4)))


def test_wall_blocks_the_car():
    params = MAZE
    # Just left of the wall x = -0.5 (which spans y in [-0.5, 1.01]), heading east (0).
    start = jnp.array([-0.52, 0.2, 0.0])
    moved = dubins_move(start, jnp.array([0.0]), params)
    np.testing.assert_allclose(moved, start)
    # Far from walls the car advances 2 * 0.05 along its heading.
    free = dubins_move(jnp.array([-0.9, -0.8, 0.5]), jnp.array([0.0]), params)
    np.testing.assert_allclose(free, [-0.9, -0.7, 0.5], atol=1e-6)


def test_goal_reward_success_and_invariant():
    env = GMazeGoalDubins()
    params = env.default_params
    achieved = jnp.array([[0.0, 0.0], [0.0, 0.0], [0.3, 0.4]])
    desired = jnp.array([[0.05, 0.0], [0.0, 0.2], [0.0, 0.0]])
    np.testing.assert_array_equal(env.compute_reward(achieved, desired, params), [0.0, -1.0, -1.0])
    np.testing.assert_array_equal(env.is_success(achieved, desired, params), [True, False, False])

    # On every step, reward == compute_reward(obs achieved, obs desired) (the goal-env invariant),
    # and success terminates the episode.
    key = jax.random.key(3)
    obs, state = env.reset(key, params)
    step = jax.jit(env.step)
    for _ in range(70):
        key, k1, k2 = jax.random.split(key, 3)
        action = env.action_space(params).sample(k1)
        obs, state, reward, terminated, truncated, info = step(k2, state, action, params)
        assert float(reward) == float(env.compute_reward(obs["achieved_goal"], obs["desired_goal"], params))
        assert bool(terminated) == bool(info["is_success"])
        if terminated or truncated:
            break
    assert bool(truncated) or bool(terminated)


def test_reaching_the_goal_terminates():
    env = GMazeGoalDubins()
    params = env.default_params
    _, state = env.reset(jax.random.key(0), params)
    state = state.replace(goal=jnp.array([-0.9, 0.0]))  # 0.1 ahead of the start (-1, 0) heading east
    obs, state, reward, terminated, truncated, info = env.step(jax.random.key(1), state, jnp.zeros(1), params)
    assert bool(terminated) and bool(info["is_success"]) and float(reward) == 0.0 and not bool(truncated)


def test_vmap_over_mazes():
    walls = jnp.stack(
        [jnp.asarray(DEFAULT_WALLS), jnp.asarray(DEFAULT_WALLS) * 0.0 + 5.0]
    )  # second: walls far away
    params = jax.vmap(lambda w: GMazeParams(walls=w))(walls)
    start = jnp.array([-0.52, 0.2, 0.0])
    moved = jax.vmap(lambda p: dubins_move(start, jnp.zeros(1), p))(params)
    np.testing.assert_allclose(moved[0], start)  # blocked by the wall
    np.testing.assert_allclose(moved[1], [-0.42, 0.2, 0.0], atol=1e-6)  # no walls in the way


def test_reset_done_without_autoreset():
    env, params = le.make("PointRobotGoal-v0", autoreset=False)
    keys = jax.random.split(jax.random.key(0), 4)
    obs, state = jax.vmap(env.reset, (0, None))(keys, params)
    done = jnp.array([True, False, True, False])
    new_obs, new_state = jax.vmap(env.reset_done, (0, 0, 0, 0, None))(
        jax.random.split(keys[0], 4), done, state, obs, params
    )
    assert not np.allclose(new_state.goal[0], state.goal[0])
    np.testing.assert_array_equal(new_state.goal[1], state.goal[1])


def test_goal_conditioned_wrapper_on_cartpole():
    env = GoalConditioned(CartPole(), lambda s: s.x[None], [-1.0], [1.0], distance_threshold=0.05)
    check_env(env, num_steps=40)
    obs, state = env.reset(jax.random.key(0))
    assert set(obs) == {"observation", "achieved_goal", "desired_goal"}
    assert obs["observation"].shape == (4,) and obs["desired_goal"].shape == (1,)
    state = state.replace(goal=jnp.array([float(obs["achieved_goal"][0])]))
    obs, state, reward, terminated, _, info = env.step(jax.random.key(1), state, 1)
    # One push moves the cart by tau * x_dot (< 0.05): still within the threshold.
    assert bool(info["is_success"]) and float(reward) == 0.0 and bool(terminated)
    with pytest.raises(ValueError, match="same shape"):
        GoalConditioned(CartPole(), lambda s: s.x[None], [-1.0, 0.0], [1.0], 0.1)


@pytest.mark.parametrize("env_id", GOAL_IDS)
@pytest.mark.parametrize("threshold", [0.0, -0.1, float("nan"), float("inf")])
def test_distance_threshold_outside_its_range_is_refused(env_id, threshold):
    """A success radius <= 0 (or NaN) made success impossible and inf made every state a
    success, silently; make and reset now refuse it, naming the field and the range."""
    with pytest.raises(le.EnvInputError, match=r"distance_threshold (must be in \(0\.0, inf\)|is NaN)"):
        le.make(env_id, distance_threshold=threshold)
    env, params = le.make(env_id, autoreset=False)
    with pytest.raises(
        le.EnvInputError, match=r"params\.distance_threshold must be in \(0\.0, inf\).*replace"
    ):
        env.reset(jax.random.key(0), params.replace(distance_threshold=threshold))


def test_distance_threshold_sweep_is_taken():
    """A batch of radii for vmap, and a traced radius, are legitimate."""
    env, params = le.make("GMazeGoalDubins-v0", autoreset=False, distance_threshold=jnp.array([0.05, 0.2]))
    assert params.distance_threshold.shape == (2,)
    jax.eval_shape(lambda t: env.reset(jax.random.key(0), params.replace(distance_threshold=t)), 0.1)


@pytest.mark.parametrize("threshold", [0.0, -1.0, float("nan"), float("inf")])
def test_goal_conditioned_wrapper_refuses_a_bad_distance_threshold(threshold):
    with pytest.raises(
        le.EnvInputError, match=r"GoalConditioned: distance_threshold must be a finite float > 0"
    ):
        GoalConditioned(CartPole(), lambda s: s.x[None], [-1.0], [1.0], distance_threshold=threshold)


MOTION_SETTINGS = [
    ("GMazeDubins-v0", "speed"),
    ("GMazeGoalDubins-v0", "turn_rate"),
    ("GMazeDubinsWalls-v0", "turn_rate"),
    ("PointRobotGoal-v0", "step_size"),
]


@pytest.mark.parametrize(("env_id", "name"), MOTION_SETTINGS)
@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
def test_non_finite_motion_settings_are_refused(env_id, name, value):
    """An infinite speed, turn rate or step size made positions NaN (inf * 0, inf - inf) on the
    first step, silently; make and reset now refuse it (NaN was already refused by make)."""
    with pytest.raises(le.EnvInputError, match=rf"{name} must be in \(-inf, inf\)"):
        le.make(env_id, **{name: value})
    env, params = le.make(env_id, autoreset=False)
    for bad in (value, float("nan")):
        with pytest.raises(le.EnvInputError, match=rf"params\.{name} must be in \(-inf, inf\).*replace"):
            env.reset(jax.random.key(0), params.replace(**{name: bad}))


def test_zero_and_negative_motion_settings_are_taken():
    """0 (a car that only turns, a robot that stays) and negative values (reversing, mirrored
    steering) are well-defined dynamics; a traced value (a sweep) is taken as well."""
    env, params = le.make("GMazeGoalDubins-v0", autoreset=False, speed=0.0, turn_rate=-0.1)
    env.reset(jax.random.key(0), params)
    robot, robot_params = le.make("PointRobotGoal-v0", autoreset=False, step_size=-0.1)
    jax.eval_shape(lambda s: robot.reset(jax.random.key(0), robot_params.replace(step_size=s)), 0.1)
