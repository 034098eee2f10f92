import warnings

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import lamella.envs as le
from lamella.envs import spaces
from lamella.envs.adapters.gymnasium import GymnasiumEnv, GymnasiumVectorEnv, to_gymnasium_space


def _single_agent_ids():
    # Main ids only: a variant runs the same code as its family's main ids (RWARE's single-agent
    # -1ag variants are checked with gymnasium's checker in test_rware.py).
    return [
        env_id
        for env_id in le.registered(variants=False)
        if le.make(env_id, autoreset=False)[0].num_agents == 1
    ]


# gymnasium's checker reports some problems only as warnings: here every warning is an error,
# except those listed below, each deliberate.
CHECKER_WARNINGS_ALLOWED = {
    # Torque in [-2, 2], gymnasium's own Pendulum action space (the parity tests step both with
    # the same actions); the warning recommends [-1, 1] to agent authors.
    "Pendulum-v1": "symmetric and normalized space",
    # With one context bit (bsuite's default and its memory_len sweep) the query entry can only be
    # 0, so the space's bounds for it are [0, 0]: exact, not a mistake.
    "MemoryChain-bsuite": "maximum and minimum values are equal",
    # bsuite's SimpleBandit observes a constant 1.0 (a bandit has no state); the space says so.
    "SimpleBandit-bsuite": "maximum and minimum values are equal",
    # MPE observations are unbounded, as mpe2's own Box(-inf, inf) spaces are (the checker warns
    # about the minimum and the maximum, both messages end the same way).
    "MPE-simple-v3": "infinity. This is probably too",
}
# For every env with a renderer: the render check re-creates the env through gymnasium.make to try
# its other render modes, which needs an EnvSpec from gymnasium's registry; the adapters are built
# from a lamella id, not registered there. Their render modes (rgb_array, None) are checked here
# and in test_rejects_autoreset_and_bad_render_mode.
RENDER_CHECK_ALLOWED = "Not able to test alternative render modes due to the environment not having a spec"


@pytest.mark.parametrize("env_id", _single_agent_ids())
def test_gymnasium_check_env_passes(env_id):
    env = GymnasiumEnv(env_id)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
        if "rgb_array" in env.metadata["render_modes"]:
            rendering = GymnasiumEnv(env_id, render_mode="rgb_array")
            check_env(rendering)
            rendering.reset(seed=0)
            frame = rendering.render()
            assert isinstance(frame, np.ndarray) and frame.dtype == np.uint8 and frame.shape[-1] == 3
    allowed = CHECKER_WARNINGS_ALLOWED.get(env_id)
    messages = [str(w.message) for w in caught]
    if "rgb_array" in env.metadata["render_modes"]:
        assert any(RENDER_CHECK_ALLOWED in m for m in messages), "the render-mode warning is gone; unlist it"
        messages = [m for m in messages if RENDER_CHECK_ALLOWED not in m]
    unexpected = [m for m in messages if allowed is None or allowed not in m]
    assert not unexpected, f"gymnasium's checker warned about {env_id}: {unexpected}"
    if allowed is not None:  # an exception stays listed only while it is needed
        assert any(allowed in m for m in messages), f"{env_id}: {allowed!r} is no longer warned; unlist it"


def test_discrete_observation_is_an_int():
    """gymnasium's own FrozenLake returns its Discrete observation as an int; so does the adapter."""
    env = GymnasiumEnv("FrozenLake-misc", seed=0)
    obs, _ = env.reset()
    assert type(obs) is int and env.observation_space.contains(obs)
    obs, *_ = env.step(1)
    assert type(obs) is int and env.observation_space.contains(obs)


def test_cartpole_matches_lamella_step_by_step():
    env = GymnasiumEnv("CartPole-v1")
    bare, params = le.make("CartPole-v1", autoreset=False)
    obs, info = env.reset(seed=7)
    assert info == {} and obs.dtype == np.float32 and obs.shape == (4,)
    key = jax.random.key(7)
    key, key_reset = jax.random.split(key)
    expected_obs, state = bare.reset(key_reset, params)
    np.testing.assert_allclose(obs, np.asarray(expected_obs), rtol=1e-5, atol=1e-6)
    for action in [0, 1, 1, 0, 1]:
        obs, reward, terminated, truncated, _ = env.step(np.int64(action))
        key, key_step = jax.random.split(key)
        expected_obs, state, *_ = bare.step(key_step, state, action, params)
        np.testing.assert_allclose(obs, np.asarray(expected_obs), rtol=1e-5, atol=1e-6)
        assert reward == 1.0 and terminated is False and truncated is False


def test_episode_end_is_reported_not_reset():
    env = GymnasiumEnv("CartPole-v1", seed=3)
    obs, _ = env.reset()
    steps = 0
    terminated = truncated = False
    while not (terminated or truncated):
        obs, _, terminated, truncated, _ = env.step(1)  # always push right: falls within ~10 steps
        steps += 1
    assert terminated and 5 <= steps <= 30
    # The observation is the terminal one (outside the termination bounds), not a fresh reset.
    assert abs(obs[0]) > 2.4 or abs(obs[2]) > 12 * 2 * np.pi / 360


def test_seeding_is_deterministic_and_constructor_seed_is_used():
    first = GymnasiumEnv("CartPole-v1", seed=11).reset()[0]
    np.testing.assert_array_equal(first, GymnasiumEnv("CartPole-v1").reset(seed=11)[0])
    env = GymnasiumEnv("CartPole-v1")
    a = env.reset(seed=5)[0]
    b = env.reset()[0]
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(env.reset(seed=5)[0], a)
    np.testing.assert_array_equal(env.reset()[0], b)


def test_step_compiles_once():
    env = GymnasiumEnv("CartPole-v1", seed=0)
    env.reset()
    env.step(0)
    env.step(np.int64(1))
    env.reset(seed=1)
    env.step(1)
    assert env._step_fn._cache_size() == 1
    assert env._reset_fn._cache_size() == 1


def test_rejects_autoreset_and_bad_render_mode():
    with pytest.raises(ValueError, match="autoreset=False"):
        GymnasiumEnv(le.make("CartPole-v1")[0])
    with pytest.raises(ValueError, match="render_mode"):
        GymnasiumEnv("CartPole-v1", render_mode="human")
    with pytest.raises(TypeError, match="registered id"):
        GymnasiumEnv(42)
    with pytest.raises(gymnasium.error.ResetNeeded):
        GymnasiumEnv("CartPole-v1").step(0)


def test_space_conversion():
    space = spaces.Dict(
        {
            "a": spaces.Discrete(5),
            "b": spaces.Box(-1.0, jnp.inf, (2, 3)),
            "c": spaces.Tuple([spaces.MultiDiscrete([2, 3]), spaces.Box(0, 255, (4,), jnp.uint8)]),
        }
    )
    gym_space = to_gymnasium_space(space)
    assert gym_space["a"] == gymnasium.spaces.Discrete(5, dtype=np.int32)
    b = gym_space["b"]
    assert b.shape == (2, 3) and b.dtype == np.float32
    assert np.all(b.low == -1.0) and np.all(np.isposinf(b.high))
    multi, image = gym_space["c"].spaces
    assert multi == gymnasium.spaces.MultiDiscrete([2, 3], dtype=np.int32)
    assert image.dtype == np.uint8 and image.high.max() == 255
    # A lamella sample is inside the converted space, after conversion to numpy.
    sample = jax.tree.map(np.asarray, space.sample(jax.random.key(0)))
    assert gym_space.contains(sample)
    with pytest.raises(TypeError, match="no gymnasium equivalent"):
        to_gymnasium_space(spaces.Space())


NUM_ENVS = 3


@pytest.fixture(scope="module")
def vector_env():
    return GymnasiumVectorEnv("CartPole-v1", num_envs=NUM_ENVS)


def test_vector_spaces_shapes_and_dtypes(vector_env):
    assert vector_env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert vector_env.single_observation_space.shape == (4,)
    assert vector_env.observation_space.shape == (NUM_ENVS, 4)
    assert vector_env.action_space == gymnasium.spaces.MultiDiscrete([2] * NUM_ENVS, dtype=np.int32)
    obs, infos = vector_env.reset(seed=0)
    assert obs.shape == (NUM_ENVS, 4) and obs.dtype == np.float32 and infos == {}
    assert obs in vector_env.observation_space
    obs, reward, terminated, truncated, infos = vector_env.step(vector_env.action_space.sample())
    assert obs.shape == (NUM_ENVS, 4) and obs.dtype == np.float32
    assert reward.shape == (NUM_ENVS,) and reward.dtype == np.float64
    assert terminated.dtype == np.bool_ and truncated.dtype == np.bool_ and terminated.shape == (NUM_ENVS,)


def test_vector_env_matches_gymnasium_sync_vector_env_same_step(vector_env):
    """Same transitions and infos as gymnasium's own SAME_STEP SyncVectorEnv over GymnasiumEnv."""
    reference = SyncVectorEnv(
        [lambda: GymnasiumEnv("CartPole-v1") for _ in range(NUM_ENVS)],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    obs, _ = vector_env.reset(seed=42)
    ref_obs, _ = reference.reset(seed=42)
    np.testing.assert_array_equal(obs, ref_obs)
    rng = np.random.default_rng(0)
    endings = 0
    # Always pushing one way (per env) ends episodes in ~10 steps, so several envs reset.
    direction = np.array([0, 1, 1])
    for t in range(40):
        actions = np.where(rng.random(NUM_ENVS) < 0.8, direction, 1 - direction)
        obs, reward, terminated, truncated, infos = vector_env.step(actions)
        ref = reference.step(actions)
        np.testing.assert_array_equal(obs, ref[0], err_msg=f"step {t}")
        np.testing.assert_array_equal(reward, ref[1])
        np.testing.assert_array_equal(terminated, ref[2])
        np.testing.assert_array_equal(truncated, ref[3])
        ref_infos = ref[4]
        assert set(infos) == set(ref_infos)
        if terminated.any():
            endings += 1
            np.testing.assert_array_equal(infos["_final_obs"], ref_infos["_final_obs"])
            np.testing.assert_array_equal(infos["_final_info"], ref_infos["_final_info"])
            for i in range(NUM_ENVS):
                if terminated[i]:
                    np.testing.assert_array_equal(infos["final_obs"][i], ref_infos["final_obs"][i])
                    # The final observation is the terminal one; the returned one is a fresh start.
                    final = infos["final_obs"][i]
                    assert abs(final[0]) > 2.4 or abs(final[2]) > 0.2094
                    assert np.all(np.abs(obs[i]) <= 0.05)
                else:
                    assert infos["final_obs"][i] is None
    assert endings >= 3


def test_vector_env_per_env_seeds_and_info_masks():
    class InfoEnv(le.wrappers.Wrapper):
        def step_env(self, key, state, action, params):
            out = self.env.step_env(key, state, action, params)
            return (*out[:5], {"time": out[1].time})

    bare, _ = le.make("CartPole-v1", autoreset=False)
    envs = GymnasiumVectorEnv(InfoEnv(bare), num_envs=2)
    single = GymnasiumEnv(InfoEnv(bare))
    obs, _ = envs.reset(seed=[9, 4])
    np.testing.assert_array_equal(obs[1], single.reset(seed=4)[0])
    with pytest.raises(ValueError, match="2 envs"):
        envs.reset(seed=[1, 2, 3])
    envs.reset(seed=0)
    for _ in range(30):
        _, _, terminated, truncated, infos = envs.step(np.array([1, 1]))
        done = terminated | truncated
        np.testing.assert_array_equal(infos["_time"], ~done)
        if done.any():
            np.testing.assert_array_equal(infos["final_info"]["_time"], done)
            assert np.all(infos["final_info"]["time"][done] >= 1)
            return
    pytest.fail("no episode ended in 30 steps of always pushing right")


def test_actions_the_cast_would_change_are_refused(vector_env):
    """The adapters cast actions to the space's dtype for one compiled step; a float for a
    Discrete space (0.7 became 0, a left push), a str or None must fail first, as env.step does."""
    env = GymnasiumEnv("CartPole-v1", seed=0)
    env.reset()
    with pytest.raises(le.EnvInputError, match=r"an integer; got the Python float 0\.7\. Cast it"):
        env.step(0.7)
    with pytest.raises(le.EnvInputError, match=r"got str '1'\. Pass a jax or numpy array"):
        env.step("1")
    with pytest.raises(le.EnvInputError, match="action space Discrete"):
        env.step(None)
    vector_env.reset(seed=0)
    with pytest.raises(le.EnvInputError, match=r"one action per env \(3 envs\).*shape \(2,\)"):
        vector_env.step(np.array([0, 1]))
    with pytest.raises(le.EnvInputError, match=r"one action per env \(3 envs\)"):
        vector_env.step(1)
    with pytest.raises(le.EnvInputError, match=r"an integer; got shape \(\), dtype float64\. Cast it"):
        vector_env.step(np.array([0.7, 0.2, 1.9]))


def test_gymnasium_adapters_refuse_multi_agent_envs_by_id_or_object():
    from lamella.envs.adapters.gymnasium import GymnasiumEnv

    for env_or_id in ["Foraging-8x8-2p-2f-v3", le.make("Foraging-8x8-2p-2f-v3", autoreset=False)[0]]:
        with pytest.raises(ValueError, match="2 agents; the gymnasium adapters are single-agent"):
            GymnasiumEnv(env_or_id)


def test_discrete_actions_outside_the_space_are_refused(vector_env):
    """A Discrete action outside 0..n-1 (5 or -1 for CartPole) was stepped as a push, silently;
    gymnasium's own CartPole refuses it too. Box actions are left to the env (gymnasium's own
    continuous envs clip them)."""
    env = GymnasiumEnv("CartPole-v1", seed=0)
    env.reset()
    for action in [2, -1, np.int64(5)]:
        with pytest.raises(le.EnvInputError, match=r"outside the action space Discrete\(2\).*0 to 1"):
            env.step(action)
    env.step(1)  # the largest legal action
    vector_env.reset(seed=0)
    with pytest.raises(le.EnvInputError, match=r"env 1's action 2 is outside the action space Discrete\(2\)"):
        vector_env.step(np.array([0, 2, 1]))


def test_seeds_beyond_32_bits_are_distinct_and_bad_vector_seeds_are_named():
    """jax.random.key(2**32) is key(0): two gymnasium seeds gave one trajectory, silently, and
    2**64 (a valid gymnasium seed) failed inside JAX with an OverflowError."""
    env = GymnasiumEnv("CartPole-v1")
    zero = env.reset(seed=0)[0]
    assert not np.array_equal(env.reset(seed=2**32)[0], zero)
    assert not np.array_equal(env.reset(seed=2**64)[0], env.reset(seed=2**64 + 2**32)[0])
    np.testing.assert_array_equal(env.reset(seed=2**32)[0], GymnasiumEnv("CartPole-v1").reset(seed=2**32)[0])
    envs = GymnasiumVectorEnv("CartPole-v1", num_envs=2)
    obs, _ = envs.reset(seed=2**32 - 1)  # env 1 gets 2**32, as GymnasiumEnv(seed=2**32)
    np.testing.assert_array_equal(obs[1], env.reset(seed=2**32)[0])
    for seed, words in [([0, -5], "got -5"), (1.5, "got 1.5"), ("3", "got '3'"), ([0, "x"], "got 'x'")]:
        with pytest.raises(
            ValueError, match=rf"GymnasiumVectorEnv.reset: seed must be an integer >= 0, {words}"
        ):
            envs.reset(seed=seed)
