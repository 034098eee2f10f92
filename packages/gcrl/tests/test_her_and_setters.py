"""HER batches against hand-built episodes, and the goal setters."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs
from lamella.agents.config import ConfigError
from lamella.agents.offpolicy import GoalFunctions
from lamella.agents.offpolicy.loop import goal_functions
from lamella.buffers import Transition, make_episode_buffer, transition_like
from lamella.gcrl import (
    SACTrainConfig,
    chain,
    frontier_goals,
    goal_override,
    make_her_batch_sampler,
    passthrough,
)


def make_batch_sampler(config, env, params, buffer):
    return make_her_batch_sampler(config, buffer, goal_functions(env, params))


def _goal_obs(achieved, desired):
    achieved = jnp.asarray(achieved, jnp.float32)
    heading = jnp.zeros((*achieved.shape[:-1], 1), jnp.float32)
    return {
        "observation": jnp.concatenate([achieved, heading], -1),
        "achieved_goal": achieved,
        "desired_goal": jnp.broadcast_to(jnp.asarray(desired, jnp.float32), achieved.shape),
    }


def _hand_built_buffer(env, ended_by_env=False):
    """One env, one episode of 3 steps in the Dubins maze, desired goal (1, 1) never reached.

    Achieved goals after each step: (0, 0), (0.5, 0), (0.55, 0); the episode is truncated, or
    with ``ended_by_env`` terminated by the env on its last step (a failure, not the goal).
    """
    buffer = make_episode_buffer(num_envs=1, max_length_time_axis=8, sample_batch_size=64)
    start = _goal_obs([-1.0, 0.0], [1.0, 1.0])
    example = transition_like(start, jnp.zeros((1,), jnp.float32))
    state = buffer.init(example)
    before = jnp.array([[-1.0, 0.0], [0.0, 0.0], [0.5, 0.0]])
    after = jnp.array([[0.0, 0.0], [0.5, 0.0], [0.55, 0.0]])
    episode = Transition(
        obs=_goal_obs(before, [1.0, 1.0]),
        action=jnp.zeros((3, 1), jnp.float32),
        reward=jnp.array([-1.0, -1.0, -1.0]),
        terminated=jnp.array([False, False, ended_by_env]),
        truncated=jnp.array([False, False, not ended_by_env]),
        next_obs=_goal_obs(after, [1.0, 1.0]),
    )
    return buffer, buffer.add(state, jax.tree.map(lambda x: x[None], episode))


@pytest.fixture(scope="module")
def maze():
    # The hand-built episodes are 3 steps long: an env of 3-step episodes, whose buffer of 8
    # steps holds a whole one (HER refuses a buffer shorter than the env's episodes).
    env, params = lamella.envs.make("GMazeGoalDubins-v0", autoreset=False)
    return env, params.replace(max_steps_in_episode=3)


def test_her_final_relabels_rewards_and_terminations_by_hand(maze):
    env, params = maze
    buffer, state = _hand_built_buffer(env)
    config = SACTrainConfig(
        env_id="GMazeGoalDubins-v0",
        her=True,
        her_strategy="final",
        her_relabel_probability=1.0,
        batch_size=64,
    )
    batch = jax.jit(make_batch_sampler(config, env, params, buffer))(state, jax.random.key(0))
    # Every goal is the final achieved goal (0.55, 0). By hand, with threshold 0.1:
    # step 0 reaches (0, 0): distance 0.55 -> reward -1, not terminal, discount gamma;
    # step 1 reaches (0.5, 0): distance 0.05 -> reward 0, success ends the episode -> discount 0;
    # step 2 reaches (0.55, 0): distance 0 -> reward 0, discount 0.
    step = np.asarray(
        jnp.argmin(jnp.abs(batch.obs["achieved_goal"][:, 0][:, None] - jnp.array([-1.0, 0.0, 0.5])), 1)
    )
    np.testing.assert_allclose(batch.obs["desired_goal"], np.tile([0.55, 0.0], (64, 1)), rtol=1e-6)
    np.testing.assert_allclose(batch.next_obs["desired_goal"], np.tile([0.55, 0.0], (64, 1)), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(batch.reward), np.array([-1.0, 0.0, 0.0])[step])
    np.testing.assert_allclose(np.asarray(batch.discount), np.array([0.99, 0.0, 0.0])[step], rtol=1e-6)
    assert set(step.tolist()) == {0, 1, 2}
    # The same numbers from the env's compute_reward.
    expected = env.unwrapped.compute_reward(
        batch.next_obs["achieved_goal"], batch.next_obs["desired_goal"], params
    )
    np.testing.assert_array_equal(batch.reward, expected)


def test_her_future_goals_come_from_the_same_or_later_steps(maze):
    env, params = maze
    buffer, state = _hand_built_buffer(env)
    config = SACTrainConfig(env_id="GMazeGoalDubins-v0", her=True, her_relabel_probability=1.0, batch_size=64)
    batch = jax.jit(make_batch_sampler(config, env, params, buffer))(state, jax.random.key(1))
    achieved_x = np.asarray(batch.next_obs["achieved_goal"][:, 0])
    goal_x = np.asarray(batch.obs["desired_goal"][:, 0])
    assert np.all(goal_x >= achieved_x - 1e-6)  # achieved x grows along the episode
    expected = env.unwrapped.compute_reward(
        batch.next_obs["achieved_goal"], batch.obs["desired_goal"], params
    )
    np.testing.assert_array_equal(batch.reward, expected)


def test_without_relabelling_the_stored_transition_is_kept(maze):
    env, params = maze
    buffer, state = _hand_built_buffer(env)
    config = SACTrainConfig(env_id="GMazeGoalDubins-v0", her=True, her_relabel_probability=0.0, batch_size=16)
    batch = make_batch_sampler(config, env, params, buffer)(state, jax.random.key(2))
    np.testing.assert_allclose(batch.obs["desired_goal"], np.ones((16, 2)))
    np.testing.assert_array_equal(batch.reward, -np.ones(16))
    # Truncation is not termination: the truncated last step still bootstraps.
    np.testing.assert_allclose(batch.discount, np.full(16, 0.99), rtol=1e-6)


def test_her_refuses_a_buffer_shorter_than_one_episode_per_env():
    """Before: accepted. The buffer keeps each env's last ``buffer_size // num_envs`` steps, so
    no 50-step episode was ever whole in it: "future" and "episode" goals came only from those
    last steps, and "final" goals from the newest step of an episode still running, never from
    the step that ended it. Now a ConfigError when the runner is built."""
    from lamella.agents.offpolicy.loop import make_offpolicy_runner

    # PointRobotGoal-v0: 50-step episodes; 4 envs need 200 steps.
    config = SACTrainConfig(env_id="PointRobotGoal-v0", her=True, num_envs=4, buffer_size=199, batch_size=8)
    with pytest.raises(
        ConfigError,
        match=r"buffer_size=199 keeps 49 steps of each of num_envs=4 envs, fewer than one episode "
        r"\(50 steps, the env's time limit\).*Set buffer_size >= 200",
    ):
        make_offpolicy_runner(config)
    for strategy in ("final", "episode"):
        with pytest.raises(ConfigError, match=r"Set buffer_size >= 200"):
            make_offpolicy_runner(dataclasses.replace(config, her_strategy=strategy))
    make_offpolicy_runner(dataclasses.replace(config, buffer_size=200))  # one episode per env: builds
    make_offpolicy_runner(dataclasses.replace(config, her=False))  # the plain loop: unchanged


def test_her_relabel_probability_is_each_sweep_member_s_own(maze):
    """A sweep traces ``her_relabel_probability`` (one program, a value per member): the HER
    sampler relabels with each member's own probability (0: never, 1: always), not a constant."""
    env, params = maze
    buffer, state = _hand_built_buffer(env)
    goals = goal_functions(env, params)
    config = SACTrainConfig(env_id="GMazeGoalDubins-v0", her=True, her_strategy="final", batch_size=16)

    def desired_goals(probability):
        sample = make_her_batch_sampler(
            dataclasses.replace(config, her_relabel_probability=probability), buffer, goals
        )
        return sample(state, jax.random.key(0)).obs["desired_goal"]

    goals_of = jax.jit(jax.vmap(desired_goals))(jnp.array([0.0, 1.0]))  # one program, two members
    np.testing.assert_allclose(goals_of[0], np.ones((16, 2)))  # the stored goal (1, 1)
    np.testing.assert_allclose(goals_of[1], np.tile([0.55, 0.0], (16, 1)), rtol=1e-6)  # the final one


def _one_pair_reward(achieved, desired):
    # Written for one pair of goals: it reduces over every axis, as the GoalFunctions contract allows.
    return -(jnp.sqrt(jnp.sum((achieved - desired) ** 2)) > 0.1).astype(jnp.float32)


def _one_pair_success(achieved, desired):
    return jnp.sqrt(jnp.sum((achieved - desired) ** 2)) < 0.1


@pytest.mark.parametrize("terminate_on_success", [False, True])
def test_her_keeps_the_envs_own_terminations_and_scores_success_per_pair(terminate_on_success):
    """Before: a relabelled transition's ``terminated`` was ``is_success & terminate_on_success``
    alone, so an episode the env ended (a failure) bootstrapped past its end, and ``is_success``
    ran on the whole batch, so a one-pair function gave one flag for all (no success ended)."""
    buffer, state = _hand_built_buffer(None, ended_by_env=True)
    config = SACTrainConfig(
        env_id="PointRobotGoal-v0", her=True, her_strategy="final", her_relabel_probability=1.0, gamma=0.9
    )
    goals = GoalFunctions(_one_pair_reward, _one_pair_success, terminate_on_success)
    batch = jax.jit(make_her_batch_sampler(config, buffer, goals))(state, jax.random.key(0))
    step = np.asarray(
        jnp.argmin(jnp.abs(batch.obs["achieved_goal"][:, 0][:, None] - jnp.array([-1.0, 0.0, 0.5])), 1)
    )
    assert set(step.tolist()) == {0, 1, 2}
    # The goal is the final achieved goal (0.55, 0): steps 1 and 2 reach it; step 2 ended the episode.
    expected = [0.9, 0.0, 0.0] if terminate_on_success else [0.9, 0.9, 0.0]
    np.testing.assert_allclose(np.asarray(batch.discount), np.array(expected)[step], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(batch.reward), np.array([-1.0, 0.0, 0.0])[step])


def test_her_refuses_goal_functions_it_cannot_use():
    """Before: a bool reward trained silently on 0/1 rewards, terminations without is_success kept
    the original goal's flag, and other mistakes failed inside JAX (a broadcasting error, a
    TracerArrayConversionError); now each is a ConfigError when the sampler is traced."""
    buffer, state = _hand_built_buffer(None)
    config = SACTrainConfig(env_id="PointRobotGoal-v0", her=True, batch_size=8)
    key = jax.random.key(0)

    def trace(goals):
        jax.eval_shape(make_her_batch_sampler(config, buffer, goals), state, key)

    with pytest.raises(ConfigError, match=r"needs a goal-conditioned env .*GMazeGoalDubins-v0"):
        make_her_batch_sampler(config, buffer, None)
    with pytest.raises(ConfigError, match=r"terminate_on_success.*no is_success.*is_success\(achieved_goal"):
        make_her_batch_sampler(config, buffer, GoalFunctions(_one_pair_reward, None, True))
    with pytest.raises(
        ConfigError, match=r"compute_reward returns bool and is_success returns float32: .*swapped"
    ):
        trace(GoalFunctions(_one_pair_success, _one_pair_reward, True))
    with pytest.raises(
        ConfigError,
        match=r"compute_reward\(achieved_goal, desired_goal\) must return a scalar number .*got bool",
    ):
        trace(GoalFunctions(_one_pair_success, None, False))
    with pytest.raises(ConfigError, match=r"must return a scalar number .*shape \(2,\).*got float32\[2\]"):
        trace(GoalFunctions(lambda a, d: -jnp.abs(a - d), None, False))
    with pytest.raises(ConfigError, match=r"calling compute_reward\(achieved_goal, desired_goal\) failed"):
        trace(GoalFunctions(lambda a, d: np.linalg.norm(np.asarray(a) - np.asarray(d)), None, False))
    trace(GoalFunctions(_one_pair_reward, _one_pair_success, True))  # the right functions pass


def _obs(num_envs):
    return {
        "observation": jnp.zeros((num_envs, 2)),
        "achieved_goal": jnp.zeros((num_envs, 2)),
        "desired_goal": jnp.ones((num_envs, 2)),
    }


def test_passthrough_changes_nothing():
    setter = passthrough()
    obs = _obs(3)
    state = setter.init(jax.random.key(0), obs)
    out, state = setter.reset(jax.random.key(1), state, obs, jnp.ones(3, bool))
    np.testing.assert_array_equal(out["desired_goal"], obs["desired_goal"])
    reward, flag = -jnp.ones(3), jnp.zeros(3, bool)
    stepped = setter.step(jax.random.key(2), state, obs, reward, flag, flag, {})
    np.testing.assert_array_equal(stepped[1], reward)


def _override(change_every=0, value=0.25):
    env, params = lamella.envs.make("PointRobotGoal-v0", autoreset=False)
    bare = env.unwrapped
    return goal_override(
        lambda key, obs: jnp.full((2,), value) + 0.0 * jax.random.uniform(key, (2,)),
        lambda a, d: bare.compute_reward(a, d, params),
        lambda a, d: bare.is_success(a, d, params),
        change_every=change_every,
    )


def test_goal_override_scores_steps_against_its_goal():
    setter = _override()
    obs = _obs(2)
    state = setter.init(jax.random.key(0), obs)
    obs, state = setter.reset(jax.random.key(1), state, obs, jnp.ones(2, bool))
    np.testing.assert_allclose(obs["desired_goal"], np.full((2, 2), 0.25))
    # Env 0 reaches (0.25, 0.2) (distance 0.05: success), env 1 stays at (0, 0).
    next_obs = {**_obs(2), "achieved_goal": jnp.array([[0.25, 0.2], [0.0, 0.0]])}
    flags = jnp.zeros(2, bool)
    next_obs, reward, terminated, truncated, info, state = setter.step(
        jax.random.key(2), state, next_obs, -jnp.ones(2), flags, flags, {}
    )
    np.testing.assert_array_equal(reward, [0.0, -1.0])
    np.testing.assert_array_equal(terminated, [True, False])
    np.testing.assert_array_equal(info["is_success"], [True, False])
    np.testing.assert_allclose(next_obs["desired_goal"], np.full((2, 2), 0.25))


def test_goal_override_keeps_the_envs_own_terminations():
    """Before: ``terminated`` became ``is_success & terminate_on_success`` for the setter's goal
    alone, so an episode the env ended itself (a failure) went on: the loop did not reset it."""
    setter = _override()  # goal (0.25, 0.25); the env's own goal in desired_goal is (1, 1)
    state = setter.init(jax.random.key(0), _obs(3))
    _, state = setter.reset(jax.random.key(1), state, _obs(3), jnp.ones(3, bool))
    # Env 0 ends by itself away from both goals; env 1 ends on reaching its own goal, which the
    # setter replaced; env 2 reaches the setter's goal.
    next_obs = {**_obs(3), "achieved_goal": jnp.array([[0.0, 0.0], [1.0, 1.0], [0.25, 0.2]])}
    terminated = jnp.array([True, True, False])
    _, _, terminated, _, info, _ = setter.step(
        jax.random.key(2), state, next_obs, -jnp.ones(3), terminated, jnp.zeros(3, bool), {}
    )
    np.testing.assert_array_equal(info["is_success"], [False, False, True])
    np.testing.assert_array_equal(terminated, [True, False, True])


def test_goal_override_changes_goals_during_an_episode_and_chains():
    # The first setter changes its goal every 2 steps (always to 0.25 here); the second one,
    # applied after it, overrides with 0.75 at episode starts: the chain's goal is the last one's.
    moving = _override(change_every=2, value=0.25)
    setter = chain(passthrough(), moving)
    obs = _obs(1)
    state = setter.init(jax.random.key(0), obs)
    obs, state = setter.reset(jax.random.key(1), state, obs, jnp.ones(1, bool))
    ages = []
    for t in range(4):
        out = setter.step(
            jax.random.key(t), state, _obs(1), -jnp.ones(1), jnp.zeros(1, bool), jnp.zeros(1, bool), {}
        )
        state = out[-1]
        ages.append(int(state[1]["age"][0]))
    assert ages == [1, 0, 1, 0]  # a new goal every 2 steps
    last = chain(moving, _override(value=0.75))
    s = last.init(jax.random.key(0), _obs(1))
    out, _ = last.reset(jax.random.key(1), s, _obs(1), jnp.ones(1, bool))
    np.testing.assert_allclose(out["desired_goal"], [[0.75, 0.75]])


def test_chain_of_nothing_is_passthrough():
    setter = chain()
    obs = _obs(1)
    out, _ = setter.reset(jax.random.key(0), setter.init(jax.random.key(0), obs), obs, jnp.ones(1, bool))
    np.testing.assert_array_equal(out["desired_goal"], obs["desired_goal"])


def test_goal_override_refuses_goal_functions_out_of_place_at_init():
    """Swapped or misplaced functions used to train silently on a wrong reward (a bool reward,
    a float 'success' that ends every unsuccessful step): refused when ``init`` traces them."""
    env, params = lamella.envs.make("PointRobotGoal-v0", autoreset=False)
    bare = env.unwrapped

    def reward(a, d):
        return bare.compute_reward(a, d, params)

    def success(a, d):
        return bare.is_success(a, d, params)

    def sample(key, obs):
        return jax.random.uniform(key, (2,))

    init_key, obs = jax.random.key(0), _obs(2)
    with pytest.raises(
        ConfigError, match=r"compute_reward returns bool and is_success returns float32: they look swapped"
    ):
        goal_override(sample, success, reward).init(init_key, obs)
    with pytest.raises(ConfigError, match=r"calling sample_goal\(key, obs\) failed .*documented order"):
        goal_override(reward, sample, success).init(init_key, obs)
    with pytest.raises(
        ConfigError, match=r"compute_reward\(achieved_goal, desired_goal\) must return a scalar number"
    ):
        goal_override(sample, lambda a, d: jnp.abs(a - d), success).init(init_key, obs)
    with pytest.raises(
        ConfigError, match=r"is_success\(achieved_goal, desired_goal\) must return a scalar bool"
    ):
        goal_override(sample, reward, reward).init(init_key, obs)
    with pytest.raises(
        ConfigError,
        match=r"sample_goal\(key, obs\) must return one goal of the env's goal shape \(2,\).*got shape \(3,\)",
    ):
        goal_override(lambda key, obs: jnp.zeros(3), reward, success).init(init_key, obs)
    # Under jit too (shapes and dtypes only), and the right order passes.
    with pytest.raises(ConfigError, match="they look swapped"):
        jax.jit(goal_override(sample, success, reward).init)(init_key, obs)
    assert jax.jit(goal_override(sample, reward, success).init)(init_key, obs)["goal"].shape == (2, 2)


def test_chain_refuses_what_is_not_a_goal_setter():
    """Before: ``'function' object has no attribute 'init'`` when the loop was traced."""
    with pytest.raises(
        ConfigError, match=r"^chain: setter 1 is frontier_goals, not a GoalSetter .*: call it to build"
    ):
        chain(passthrough(), frontier_goals)
    with pytest.raises(ConfigError, match=r"^chain takes the setters as arguments: chain\(\*setters\)"):
        chain([passthrough(), passthrough()])
    assert chain(passthrough()).init is not None


def test_goal_functions_of_a_goal_conditioned_wrapper():
    """``lamella.envs.goal.GoalConditioned`` around a plain env (the envs README's way to make
    one) gives the loop its goal functions; before, the loop read the bare env under it
    ("Pendulum has no compute_reward") and never the wrapper's ``terminate_on_success``."""
    from lamella.envs.goal import GoalConditioned

    pendulum, params = lamella.envs.make("Pendulum-v1", autoreset=False)
    env = GoalConditioned(pendulum.unwrapped, lambda s: s.theta[None], [-1.0], [1.0], 0.1)
    goals = goal_functions(env, params)
    assert goals.terminate_on_success is True
    assert float(goals.compute_reward(jnp.array([0.0]), jnp.array([0.05]))) == 0.0
    assert bool(goals.is_success(jnp.array([0.0]), jnp.array([0.5]))) is False
    config = SACTrainConfig(env_id="Pendulum-v1", her=True, num_envs=2, buffer_size=400, batch_size=8)
    from lamella.agents.offpolicy.loop import make_offpolicy_runner

    make_offpolicy_runner(config, env=env, env_params=params)  # builds; before: a ValueError


def test_her_relabels_with_a_goal_override_s_own_goal_functions():
    """A setter that scores transitions with functions of its own (``goal_override``, also
    through ``chain``) hands them to HER, so that relabelled transitions are scored as the stored
    ones were; before, HER always used the env's."""
    from lamella.agents.offpolicy.loop import make_offpolicy_runner

    setter = _override()
    assert setter.goals is not None and setter.goals.terminate_on_success is True
    assert chain(passthrough(), setter).goals is setter.goals
    assert passthrough().goals is None
    given = []

    def recording(config, buffer, goals):
        given.append(goals)
        return make_her_batch_sampler(config, buffer, goals)

    config = SACTrainConfig(env_id="PointRobotGoal-v0", her=True, num_envs=2, buffer_size=100, batch_size=8)
    make_offpolicy_runner(config, goal_setter=chain(passthrough(), setter), batch_sampler=recording)
    make_offpolicy_runner(config, batch_sampler=recording)
    # The setter's own functions, with the env's episode length the loop adds (for HER's buffer check).
    assert given[0] == setter.goals._replace(episode_length=50)
    assert given[1] is not setter.goals and given[1].compute_reward.func.__name__ == "compute_reward"
