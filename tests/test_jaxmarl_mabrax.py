"""MaBrax (JaxMARL's Brax bodies split into agents) through lamella-envs' JaxMARL adapter, and
lamella-marl's MAPPO with continuous actions on it (``[jaxmarl]`` and ``[brax]`` extras).

Tiny on purpose: ``ant_4x2`` on Brax's spring backend (the cheapest to compile on CPU) with
5-step episodes; one compiled episode function for the adapter, one compiled MAPPO run.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from lamella.envs.adapters.jaxmarl import JaxMARLError, from_jaxmarl
from lamella.envs.wrappers import AutoReset
from lamella.marl import MAPPOConfig, make_mappo_runner


@pytest.fixture(scope="module")
def ant():
    return from_jaxmarl("ant_4x2", backend="spring", episode_length=5)


def test_mabrax_time_limits_truncate_and_keep_the_final_observation(ant):
    params = ant.default_params
    assert ant.family == "mabrax" and params.max_steps_in_episode == 5
    assert ant.observation_space(params).shape == (4, 18)  # JaxMARL's per-leg observation
    assert ant.action_space(params).shape == (4, 2)  # two joints per leg, in [-1, 1]
    assert ant.global_state_space(params).shape == (27,)  # Brax's whole ant observation
    env = AutoReset(ant)

    @jax.jit
    def run(key):
        obs, state = env.reset(key, params)

        def body(carry, step_key):
            obs, state = carry
            action = jax.random.uniform(step_key, (4, 2), minval=-1.0, maxval=1.0)
            next_obs, state, reward, terminated, truncated, info = env.step(step_key, state, action, params)
            global_state = ant.global_state(env.unwrapped_state(state), params)
            return (next_obs, state), (
                next_obs,
                reward,
                terminated,
                truncated,
                info["final_observation"],
                global_state,
            )

        return jax.lax.scan(body, (obs, state), jax.random.split(key, 12))[1]

    obs, reward, terminated, truncated, final_obs, global_state = jax.device_get(run(jax.random.key(0)))
    # The ant stays upright for 5 steps: every episode ends by the time limit, truncated for every agent.
    assert not terminated.any()
    np.testing.assert_array_equal(np.flatnonzero(truncated.all(1)), [4, 9])
    assert np.all(truncated.all(1) == truncated.any(1))
    # Brax's AutoResetWrapper is off, so the final observation is the ant where the episode ended,
    # not the next episode's first observation returned beside it.
    assert not np.allclose(final_obs[4], obs[4])
    np.testing.assert_array_equal(final_obs[3], obs[3])
    # Every agent is paid the body's reward; the world state is Brax's whole observation.
    np.testing.assert_array_equal(reward, reward[:, :1].repeat(4, 1))
    assert global_state.shape == (12, 27) and np.all(np.isfinite(global_state))


def test_mabrax_built_with_brax_auto_reset_is_refused():
    import jaxmarl

    with pytest.raises(JaxMARLError, match="auto_reset=False"):
        from_jaxmarl(jaxmarl.make("ant_4x2", backend="spring", auto_reset=True))


def test_mappo_trains_with_continuous_actions_on_mabrax(ant):
    config = MAPPOConfig(
        total_timesteps=2 * 2 * 8,  # 2 iterations of 2 envs x 8 steps
        num_envs=2,
        num_steps=8,
        num_epochs=1,
        num_minibatches=1,
        hidden_sizes=(16,),
    )
    runner = make_mappo_runner(config, env=ant)

    def train(key):
        state = runner.init(key)
        return jax.lax.scan(lambda state, _: runner.step(state), state, length=config.num_iterations)

    state, metrics = jax.device_get(jax.jit(train)(jax.random.key(0)))
    assert int(state.iteration) == 2
    for name in ("loss", "value_loss", "policy_loss"):
        assert np.all(np.isfinite(metrics[name])), (name, metrics[name])
    np.testing.assert_array_equal(metrics["episodes"], [2, 4])  # 5-step episodes in 2 envs x 16 steps
    assert metrics["reward"].shape == (2, 4) and np.all(metrics["reward"] != 0)


def test_the_runner_draws_the_body_of_a_mabrax_team(ant):
    """MaBrax bodies render in JAX (lamella's Brax sketch of the Brax env JaxMARL wraps), so a
    runner's ``render_episode`` draws a team's episode (``--gif``, ``lamella eval report``): one
    frame per step and the reset's, the body on the ground in each, and the legs moving."""
    config = MAPPOConfig(
        total_timesteps=16, num_envs=2, num_steps=8, num_epochs=1, num_minibatches=1, hidden_sizes=(16,)
    )
    runner = make_mappo_runner(config, env=ant)
    frames, length = jax.device_get(
        jax.jit(runner.render_episode)(runner.init(jax.random.key(0)), jax.random.key(1))
    )
    assert int(length) == 6 and frames.dtype == np.uint8 and frames.shape[1:] == (120, 160, 3), frames.shape
    body = np.all(frames[: int(length)] == (102, 84, 66), axis=-1)  # the ant's colour in its MJCF
    assert body.reshape(int(length), -1).sum(1).min() > 50, body.reshape(int(length), -1).sum(1)
    assert not np.array_equal(frames[0], frames[int(length) - 1])
