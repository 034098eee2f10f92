"""The goal-conditioned view of a Brax body (``brax-goal:reacher@spring``): the goal contract
against Brax's own observation, rewards and flags, time limits, success termination, bad input.

One compiled episode function, shared by the tests (params are traced, so the two settings
below reuse it): Brax's compiles dominate.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs
from lamella.envs.adapters import brax_goal
from lamella.envs.adapters.brax import BraxError
from lamella.envs.errors import UserError

ENV_ID = "brax-goal:reacher@spring"
NUM_STEPS = 24


@pytest.fixture(scope="module")
def env_and_params():
    return lamella.envs.make(ENV_ID, autoreset=False, max_steps_in_episode=10)


@pytest.fixture(scope="module")
def episodes(env_and_params):
    """Two runs of the bare env with ``reset_done``, random actions: the defaults (10 steps, no
    termination on success, threshold 0.02), and a threshold of 1 m with termination on success
    (every state is a success: each episode ends after its first step)."""
    env, params = env_and_params

    @jax.jit
    def run(key, params):
        obs, state = env.reset(key, params)

        def body(carry, step_key):
            obs, state = carry
            key_action, key_reset = jax.random.split(step_key)
            action = jax.random.uniform(key_action, (2,), minval=-1.0, maxval=1.0)
            next_obs, next_state, reward, terminated, truncated, info = env.step(
                key_action, state, action, params
            )
            out = (obs, next_obs, reward, terminated, truncated, info, next_state.brax.brax_state.obs)
            obs, state = env.reset_done(key_reset, terminated | truncated, next_state, next_obs, params)
            return (obs, state), out

        frame = env.render(state, params)  # compiled here, with the episode
        return (*jax.lax.scan(body, (obs, state), jax.random.split(key, NUM_STEPS))[1], frame)

    default = run(jax.random.key(0), params)
    reach_all = run(jax.random.key(0), params.replace(distance_threshold=1.0, terminate_on_success=True))
    return jax.device_get(default), jax.device_get(reach_all)


def test_spaces_and_observations_follow_the_goal_contract(env_and_params, episodes):
    env, params = env_and_params
    space = env.observation_space(params)
    assert set(space.spaces) == {"observation", "achieved_goal", "desired_goal"}
    assert space["observation"].shape == (8,) and space["desired_goal"].shape == (2,)
    assert env.action_space(params).shape == (2,)
    assert hasattr(env.unwrapped, "compute_reward") and env.unwrapped is env  # what HER reads
    (obs, next_obs, *_), _ = episodes
    for key in space.spaces:
        assert next_obs[key].dtype == np.float32 and next_obs[key].shape == (NUM_STEPS, *space[key].shape)
    # Goals are Brax's targets: in the disc of radius 0.2.
    assert np.all(np.linalg.norm(obs["desired_goal"], axis=-1) <= 0.2 + 1e-6)


def test_goals_are_brax_fingertip_and_target(episodes):
    """Against Brax's own observation: target (x, y) at 4:6, fingertip minus target at 8:10."""
    (_, next_obs, *_, brax_obs, _), _ = episodes
    np.testing.assert_allclose(next_obs["desired_goal"], brax_obs[:, 4:6], atol=1e-6)
    np.testing.assert_allclose(
        next_obs["achieved_goal"] - next_obs["desired_goal"], brax_obs[:, 8:10], atol=1e-5
    )
    # The agent's observation is the arm's part of Brax's (cos, sin, fingertip velocity) and the
    # fingertip, nothing about the target.
    np.testing.assert_allclose(next_obs["observation"][:, :4], brax_obs[:, :4], atol=1e-6)
    np.testing.assert_allclose(next_obs["observation"][:, 4:6], brax_obs[:, 6:8], atol=1e-6)
    np.testing.assert_allclose(next_obs["observation"][:, 6:], next_obs["achieved_goal"], atol=1e-6)


def test_reward_success_and_time_limit(env_and_params, episodes):
    env, params = env_and_params
    (_, next_obs, reward, terminated, truncated, info, _, _), _ = episodes
    distance = np.linalg.norm(next_obs["achieved_goal"] - next_obs["desired_goal"], axis=-1)
    np.testing.assert_array_equal(info["is_success"], distance < 0.02)
    np.testing.assert_array_equal(reward, np.where(distance < 0.02, 0.0, -1.0))
    expected = env.compute_reward(next_obs["achieved_goal"], next_obs["desired_goal"], params)
    np.testing.assert_array_equal(reward, expected)
    assert "env_reward" in info and "reward_dist" in info  # Brax's reward and metrics ride along
    # Brax's distance reward is the same distance (in 3-D: the two spheres' heights differ slightly).
    np.testing.assert_allclose(info["reward_dist"], -distance, atol=1e-4)
    assert not terminated.any()  # reacher never falls; no termination on success by default
    np.testing.assert_array_equal(np.flatnonzero(truncated), [9, 19])


def test_success_ends_the_episode_when_asked(episodes):
    _, (obs, next_obs, reward, terminated, truncated, info, _, _) = episodes
    assert info["is_success"].all() and terminated.all() and not truncated.any()
    np.testing.assert_array_equal(reward, 0.0)
    # Every step starts a new episode: a new goal each time.
    assert len(np.unique(obs["desired_goal"][:, 0])) == NUM_STEPS


def test_render_draws_the_arm(env_and_params, episodes):
    env, _ = env_and_params
    (*_, frame), _ = episodes
    assert frame.shape == (*env.brax.render_size, 3) and frame.dtype == np.uint8
    # The body's sketch (BraxEnv.render): something drawn over the background, not a blank frame.
    assert len(np.unique(frame.reshape(-1, 3), axis=0)) >= 2


@pytest.mark.parametrize(
    ("env_id", "message"),
    [
        ("brax-goal:reachr", "did you mean 'reacher'"),
        ("brax-goal:ant", "No built-in goal task for Brax env 'ant'"),
        ("brax-goal:reacher@sprng", "Unknown Brax backend 'sprng'"),
        ("brax-goal:", "not a Brax goal id"),
    ],
)
def test_bad_ids_name_the_fix(env_id, message):
    with pytest.raises(BraxError) as error:
        lamella.envs.make(env_id, autoreset=False)
    assert message in str(error.value)
    assert isinstance(error.value, UserError)


def test_a_task_of_your_own_is_checked_against_the_goal_shape(env_and_params):
    env, _ = env_and_params
    task = brax_goal.BraxGoalTask(
        observation=lambda s: s.obs,
        achieved_goal=lambda s: s.pipeline_state.x.pos[0],  # (3,): does not match the 2-D box
        desired_goal=lambda key, s: jax.random.uniform(key, (2,)),
        goal_low=(0.0, 0.0),
        goal_high=(1.0, 1.0),
        distance_threshold=0.1,
        max_steps_in_episode=20,
    )
    with pytest.raises(BraxError, match=r"achieved_goal has shape \(3,\)"):
        brax_goal.BraxGoalEnv(env.brax, task, "custom")
    ok = brax_goal.BraxGoalEnv(
        env.brax, task.__class__(**{**task.__dict__, "achieved_goal": lambda s: s.obs[:2]}), "ok"
    )
    assert (
        ok.observation_space()["observation"].shape == (11,) and ok.default_params.max_steps_in_episode == 20
    )
    obs, _ = jax.eval_shape(ok.reset, jax.random.key(0), ok.default_params)
    assert obs["desired_goal"].shape == (2,) and obs["desired_goal"].dtype == jnp.float32


def test_goal_ids_are_brax_family_and_not_listed():
    from lamella.envs.cli import _check_env_ids
    from lamella.envs.registry import adapter_prefix, env_family

    _check_env_ids([ENV_ID])
    assert adapter_prefix(ENV_ID) == "brax-goal" and env_family(ENV_ID) == "brax-goal"
    assert ENV_ID not in lamella.envs.registered()


def test_params_outside_their_ranges_are_refused(env_and_params):
    """BraxGoalParams had no ranges: a step limit of 0 truncated every episode at once and a
    distance_threshold <= 0 made success impossible, silently."""
    with pytest.raises(lamella.envs.EnvInputError, match=r"max_steps_in_episode must be >= 1, got 0"):
        lamella.envs.make(ENV_ID, max_steps_in_episode=0)
    with pytest.raises(
        lamella.envs.EnvInputError, match=r"distance_threshold must be in \(0.0, inf\), got -1.0"
    ):
        lamella.envs.make(ENV_ID, distance_threshold=-1.0)
    with pytest.raises(
        lamella.envs.EnvInputError, match=r"distance_threshold must be in \(0.0, inf\), got inf"
    ):
        lamella.envs.make(ENV_ID, distance_threshold=float("inf"))  # was taken: every state a success
    env, params = env_and_params
    with pytest.raises(
        lamella.envs.EnvInputError, match=r"params.distance_threshold must be in \(0.0, inf\), got 0.0"
    ):
        env.reset(jax.random.key(0), params.replace(distance_threshold=0.0))
