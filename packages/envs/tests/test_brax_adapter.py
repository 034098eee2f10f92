"""The Brax adapter: conformance, terminated vs truncated, final observations, rendering, bad input.

One body (inverted_pendulum on the spring backend, the cheapest to compile on CPU) and one
compiled episode function shared by the tests: Brax's compiles dominate.
"""

import importlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs
from lamella.envs import rendering
from lamella.envs.adapters import brax as brax_adapter
from lamella.envs.errors import UserError
from lamella.envs.testing import check_env

ENV_ID = "brax:inverted_pendulum@spring"
NUM_STEPS = 40


@pytest.fixture(scope="module")
def env_and_params():
    return lamella.envs.make(ENV_ID, max_steps_in_episode=1000)


@pytest.fixture(scope="module")
def episodes(env_and_params):
    """Two runs of the auto-resetting env in one compiled function (params are traced): a push
    that tips the pole over (time limit 1000), and no push with a time limit of 5 steps."""
    env, params = env_and_params

    @jax.jit
    def run(key, push, params):
        obs, state = env.reset(key, params)

        def body(carry, step_key):
            obs, state = carry
            out = env.step(step_key, state, jnp.full((1,), push), params)
            return (out[0], out[1]), (obs, *out[:1], *out[2:5], out[5]["final_observation"], out[1])

        _, (obs_before, obs_after, reward, terminated, truncated, final_obs, states) = jax.lax.scan(
            body, (obs, state), jax.random.split(key, NUM_STEPS)
        )
        return obs_before, obs_after, reward, terminated, truncated, final_obs, states

    fall = run(jax.random.key(0), 1.0, params)
    limit = run(jax.random.key(0), 0.0, params.replace(max_steps_in_episode=5))
    return jax.device_get(fall), jax.device_get(limit)


def test_check_env(env_and_params):
    # The bare env (AutoReset's behaviour on Brax episodes is what the tests below check):
    # its compiled step holds no reset, which halves check_env's compile time.
    env, params = env_and_params
    check_env(env.unwrapped, params.replace(max_steps_in_episode=10), num_steps=24, num_envs=2)


def test_spaces_come_from_the_brax_env(env_and_params):
    env, params = env_and_params
    brax_reset = jax.eval_shape(env.unwrapped.brax_env.reset, jax.random.key(0))
    assert env.observation_space(params).shape == brax_reset.obs.shape == (4,)
    action_space = env.action_space(params)
    assert action_space.shape == (env.unwrapped.brax_env.action_size,) == (1,)
    np.testing.assert_array_equal(np.asarray(action_space.low), -1.0)
    np.testing.assert_array_equal(np.asarray(action_space.high), 1.0)
    assert env.unwrapped.backend == "spring" and env.name == ENV_ID


def test_a_fall_is_terminated_not_truncated(episodes):
    (_, obs_after, reward, terminated, truncated, final_obs, _), _ = episodes
    assert terminated.any(), "a full push for 40 steps must tip the pole over"
    first = int(np.argmax(terminated))
    assert not truncated.any()
    # The final observation is the tipped pole (|angle| > 0.2, Brax's rule); the returned one
    # is the next episode's first (angle within Brax's reset noise of 0.01).
    assert abs(final_obs[first, 1]) > 0.2
    assert abs(obs_after[first, 1]) <= 0.011
    np.testing.assert_array_equal(final_obs[:first], obs_after[:first])
    assert np.all(reward == 1.0)


def test_the_time_limit_truncates_and_is_not_terminal(episodes):
    _, (obs_before, obs_after, _, terminated, truncated, final_obs, states) = episodes
    assert not terminated.any()
    np.testing.assert_array_equal(np.flatnonzero(truncated), [4, 9, 14, 19, 24, 29, 34, 39])
    # At a truncation the final observation is where the episode stopped, and it differs from
    # the reset observation returned beside it.
    assert not np.allclose(final_obs[4], obs_after[4])
    np.testing.assert_array_equal(obs_before[5], obs_after[4])
    np.testing.assert_array_equal(np.asarray(states.time)[:6], [1, 2, 3, 4, 0, 1])


def test_render_draws_the_body_and_writes_a_gif(env_and_params, episodes, tmp_path):
    env, params = env_and_params
    (*_, states), _ = episodes
    first = jax.tree.map(lambda x: x[:12], states)
    frames = rendering.render_episode(env, params, first)
    assert frames.shape == (12, *env.unwrapped.render_size, 3) and frames.dtype == np.uint8
    # The pole leans further as it falls: the frames differ, and each draws more than the background.
    assert len(np.unique(frames[0].reshape(-1, 3), axis=0)) >= 3
    assert not np.array_equal(frames[0], frames[-1])
    path = rendering.save_frames(frames, tmp_path / "pendulum.gif")
    assert (tmp_path / "pendulum.gif").stat().st_size > 0 and path.endswith(".gif")


@pytest.mark.parametrize(
    ("env_id", "message"),
    [
        ("brax:inverted_pendulm", "did you mean 'inverted_pendulum'"),
        ("brax:ant@sprng", "Unknown Brax backend 'sprng' (did you mean 'spring'"),
        ("brax:", "not a Brax id"),
    ],
)
def test_bad_ids_name_the_fix(env_id, message):
    with pytest.raises(brax_adapter.BraxError) as error:
        lamella.envs.make(env_id)
    assert message in str(error.value)
    assert isinstance(error.value, UserError)


def test_a_setting_the_brax_env_does_not_take():
    with pytest.raises(brax_adapter.BraxError, match="does not take the settings"):
        lamella.envs.make("brax:inverted_pendulum@spring", env_kwargs={"gravity": 3.0})


def test_brax_not_installed_names_the_extra(monkeypatch):
    real_import = importlib.import_module

    def no_brax(name, *args, **kwargs):
        if name.split(".")[0] == "brax":
            raise ModuleNotFoundError("No module named 'brax'", name="brax")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", no_brax)
    with pytest.raises(ImportError, match=r"pip install 'lamella-envs\[brax\]'") as error:
        lamella.envs.make("brax:ant")
    assert isinstance(error.value, UserError)  # the lamella command: one line, exit status 2


def test_brax_ids_are_envs_for_the_commands_and_the_run_log():
    from lamella.envs.cli import _check_env_ids
    from lamella.envs.registry import adapter_prefix, env_family

    _check_env_ids([ENV_ID])  # `lamella animate brax:...` / `lamella demo --envs brax:...` take it
    assert adapter_prefix(ENV_ID) == "brax" and adapter_prefix("CartPole-v1") is None
    assert env_family(ENV_ID) == "brax"
    assert ENV_ID not in lamella.envs.registered()  # listing ids never imports brax


def test_building_a_brax_env_prints_nothing():
    """brax.envs imports mujoco.mjx, which prints that NVIDIA Warp (its GPU backend) is missing;
    the adapter keeps those notices (and brax's "not maintained" warning) out of the user's output,
    in a fresh process since they come once per process."""
    code = (
        "import lamella.envs\n"
        "lamella.envs.make('brax:inverted_pendulum@generalized')\n"  # the backend that imports mjx
        "print('built')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (done.stdout, done.stderr) == ("built\n", "")


def test_a_step_limit_below_one_is_refused(env_and_params):
    """BraxParams had no range: max_steps_in_episode=0 or -3 truncated every episode after its
    first step, silently (the README's contract: step limits >= 1)."""
    with pytest.raises(lamella.envs.EnvInputError, match=r"max_steps_in_episode must be >= 1, got 0"):
        lamella.envs.make(ENV_ID, max_steps_in_episode=0)
    env, params = env_and_params
    with pytest.raises(lamella.envs.EnvInputError, match=r"params.max_steps_in_episode must be >= 1, got -3"):
        env.reset(jax.random.key(0), params.replace(max_steps_in_episode=-3))
