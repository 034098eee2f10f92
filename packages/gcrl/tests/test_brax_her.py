"""HER + SAC on a Brax body: lamella-envs' goal view ``brax-goal:reacher@spring`` (the fingertip
of Brax's reacher arm on Brax's target) trained by the off-policy loop with ``her=True``.

Tiny on purpose (Brax compiles dominate on CPU): one compiled training run of 2 iterations,
shared by the tests, then HER batches drawn from its replay buffer. The learning run is in the
package README ("HER on a Brax body").
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import lamella.envs
from lamella.agents import make_train
from lamella.agents.offpolicy.loop import goal_functions
from lamella.buffers import make_episode_buffer, make_her_sampler
from lamella.gcrl import SACTrainConfig, make_her_batch_sampler, make_offpolicy_runner

ENV_ID = "brax-goal:reacher@spring"
NUM_ENVS, STEPS_PER_ENV = 2, 60  # 50-step episodes: every env ends one and starts the next

CONFIG = SACTrainConfig(
    env_id=ENV_ID,
    her=True,
    num_envs=NUM_ENVS,
    total_timesteps=NUM_ENVS * STEPS_PER_ENV,
    rollout_steps=STEPS_PER_ENV // 2,
    learning_starts=20,
    batch_size=32,
    buffer_size=NUM_ENVS * STEPS_PER_ENV,
    hidden_sizes=(16, 16),
)


@pytest.fixture(scope="module")
def trained():
    runner = make_offpolicy_runner(CONFIG)
    state, metrics = jax.jit(make_train(runner))(jax.random.key(0))
    env, params = lamella.envs.make(ENV_ID, autoreset=False)
    return jax.device_get(state), jax.device_get(metrics), env, params


def test_her_sac_trains_on_the_brax_goal_env(trained):
    state, metrics, _, _ = trained
    assert int(state.iteration) == 2
    assert metrics["episodes"].sum() >= NUM_ENVS  # every env finished its first episode
    assert np.all(np.isfinite(metrics["critic_loss"])) and np.all(np.isfinite(metrics["actor_loss"]))
    assert "success_rate" in metrics
    # What the loop stored is the goal env's: fingertip achieved goals, Brax's targets.
    stored = state.buffer_state.trajectory.experience
    assert stored.obs["observation"].shape == (NUM_ENVS, STEPS_PER_ENV, 8)
    assert np.all(np.linalg.norm(stored.obs["desired_goal"], axis=-1) <= 0.2 + 1e-6)


def test_her_relabels_brax_transitions_with_later_fingertip_positions(trained):
    state, _, env, params = trained
    goals = goal_functions(env, params)
    buffer = make_episode_buffer(NUM_ENVS, STEPS_PER_ENV, 256)
    sample = jax.jit(make_her_sampler(buffer, goals.compute_reward, "future", 1.0, 256))(
        state.buffer_state, jax.random.key(1)
    )
    stored = state.buffer_state.trajectory.experience
    t = sample.transition
    assert np.all(sample.relabelled)
    # Each new goal is the fingertip position after a step at or after the sampled one...
    np.testing.assert_array_equal(
        t.obs["desired_goal"], stored.next_obs["achieved_goal"][sample.env_index, sample.goal_time]
    )
    assert np.all(sample.goal_time >= sample.time)
    # ... of the same episode (the first episode of each env is steps 0-49).
    assert np.all((sample.time < 50) == (sample.goal_time < 50))
    # Rewards are the env's for the new goal: hindsight successes the random-ish arm never had.
    expected = env.compute_reward(t.next_obs["achieved_goal"], t.obs["desired_goal"], params)
    np.testing.assert_array_equal(t.reward, expected)
    assert np.mean(stored.reward == 0.0) < 0.05 and np.mean(t.reward == 0.0) > 0.1

    # The loop's HER batch (this package's sampler): no termination on success by default, so a
    # relabelled success still bootstraps.
    batch = jax.jit(make_her_batch_sampler(CONFIG, buffer, goals))(state.buffer_state, jax.random.key(2))
    np.testing.assert_allclose(batch.discount, CONFIG.gamma, rtol=1e-6)
