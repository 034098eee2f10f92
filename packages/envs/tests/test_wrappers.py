import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.checkify import JaxRuntimeError

import lamella.envs as le
from lamella.envs import random as fast_random
from lamella.envs import spaces, struct
from lamella.envs.environment import Environment
from lamella.envs.testing import assert_same_up_to_rounding
from lamella.envs.wrappers import (
    AutoReset,
    ClipAction,
    EpisodeStatistics,
    FlattenObservation,
    NormalizeObservation,
    NormalizeReward,
    OptimisticReset,
    TimeLimit,
    Validate,
    checked,
)


@struct.dataclass
class CountState:
    start: jax.Array  # float32 (): random value drawn at reset
    t: jax.Array  # int32 (): steps taken


@struct.dataclass
class CountParams:
    length: int = 3


class CountEnv(Environment[CountState, CountParams]):
    """obs = [start, t]; action Box(-1, 1, (1,)); reward = action; ends at t == length or action > 0.5."""

    stochastic_step = False

    @property
    def default_params(self) -> CountParams:
        return CountParams()

    def reset_env(self, key, params):
        state = CountState(fast_random.uniform(key), jnp.zeros((), jnp.int32))
        return self._obs(state), state

    def step_env(self, key, state, action, params):
        state = CountState(state.start, state.t + 1)
        terminated = (state.t >= params.length) | (action[0] > 0.5)
        return self._obs(state), state, action[0].astype(jnp.float32), terminated, jnp.asarray(False), {}

    def _obs(self, state):
        return jnp.stack([state.start, state.t.astype(jnp.float32)])

    def observation_space(self, params=None):
        return spaces.Box(-jnp.inf, jnp.inf, (2,))

    def action_space(self, params=None):
        return spaces.Box(-1.0, 1.0, (1,))


ENV = CountEnv()
PARAMS = ENV.default_params
KEY = jax.random.key(0)


def act(*values):
    return jnp.asarray(values, jnp.float32)


def test_auto_reset_final_observation_and_resume():
    env = AutoReset(ENV)
    step = jax.jit(env.step)
    obs, state = env.reset(KEY, PARAMS)
    keys = jax.random.split(jax.random.key(1), 4)
    for t in (1, 2):
        obs, state, _, terminated, _, info = step(keys[t - 1], state, act(0.0), PARAMS)
        assert not terminated
        np.testing.assert_array_equal(info["final_observation"], obs)
        assert float(obs[1]) == t
    start = float(obs[0])
    obs, state, _, terminated, _, info = step(keys[2], state, act(0.0), PARAMS)
    assert terminated
    np.testing.assert_array_equal(info["final_observation"], [start, 3.0])
    # The bare step ignores its key, so the reset gets the whole step key.
    reset_obs, _ = ENV.reset(keys[2], PARAMS)
    np.testing.assert_array_equal(obs, reset_obs)
    assert int(state.t) == 0
    obs, state, _, terminated, _, _ = step(keys[3], state, act(0.0), PARAMS)
    assert not terminated and float(obs[1]) == 1.0 and float(obs[0]) == float(reset_obs[0])


def test_auto_reset_gives_stochastic_steps_a_forked_key():
    seen = {}

    class Stochastic(CountEnv):
        stochastic_step = True

        def step_env(self, key, state, action, params):
            seen["step_key"] = key
            return super().step_env(key, state, action, params)

    env = AutoReset(Stochastic())
    _, state = env.reset(KEY, PARAMS)
    key = jax.random.key(5)
    obs, *_ = env.step(key, state, act(0.9), PARAMS)
    # The reset gets the step's key itself; the random step gets its fork.
    np.testing.assert_array_equal(obs, Stochastic().reset(key, PARAMS)[0])
    np.testing.assert_array_equal(
        jax.random.key_data(seen["step_key"]), jax.random.key_data(fast_random.fork(key))
    )


def test_auto_reset_cheap_done_changes_no_value():
    """``cheap_done`` only changes how XLA computes ``done``: DiscountingChain (which sets it) gives
    the same outputs, bit for bit, over two episodes of 4 envs with the flag off; wrappers pass it on."""
    inner = le.bsuite.DiscountingChain()
    assert inner.cheap_done and EpisodeStatistics(inner).cheap_done and not AutoReset(CountEnv()).cheap_done
    params = inner.default_params
    actions = jax.random.randint(jax.random.key(2), (210, 4), 0, 5)
    keys = jax.random.split(jax.random.key(3), (210, 4))

    def rollout(env):
        def body(state, inputs):
            out = jax.vmap(env.step, in_axes=(0, 0, 0, None))(*inputs[:1], state, inputs[1], params)
            return out[1], (out[0], out[2], out[3], out[4], out[5]["final_observation"], out[1])

        _, state = jax.vmap(env.reset, in_axes=(0, None))(keys[0], params)
        return jax.jit(lambda s: jax.lax.scan(body, s, (keys, actions))[1])(state)

    fast, stored = AutoReset(inner), AutoReset(inner)
    stored.cheap_done = False
    a, b = rollout(fast), rollout(stored)
    assert bool(np.asarray(a[2]).any())  # episodes ended
    jax.tree.map(np.testing.assert_array_equal, a, b)


class SparseCountEnv(CountEnv):
    sparse_reset = True


def _rollout_outputs(env, params, keys, actions):
    """Every output of ``vmap(env.step)`` over ``keys``/``actions`` (time, env axes) from a reset."""

    def body(state, inputs):
        out = jax.vmap(env.step, in_axes=(0, 0, 0, None))(*inputs[:1], state, inputs[1], params)
        return out[1], out

    _, state = jax.vmap(env.reset, in_axes=(0, None))(keys[0], params)
    return jax.jit(lambda s: jax.lax.scan(body, s, (keys, actions))[1])(state)


def test_auto_reset_sparse_reset_changes_no_value_and_branches_over_the_batch():
    """``sparse_reset``: under vmap the resets are computed in a branch taken when some env is done
    (a ``cond`` in the batched step); every output equals the select over every env's reset, bit
    for bit, with no env, some and all envs ending, alone, under vmap and under vmap of vmap."""
    sparse, every = AutoReset(SparseCountEnv()), AutoReset(CountEnv())
    assert sparse.sparse_reset and EpisodeStatistics(sparse).sparse_reset and not every.sparse_reset
    num_envs = 6
    keys = jax.random.split(jax.random.key(4), (2, num_envs))
    _, state = jax.vmap(every.reset, in_axes=(0, None))(keys[0], PARAMS)
    step = {
        name: jax.jit(
            lambda a, env=env: jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys[1], state, a, PARAMS)
        )
        for name, env in (("sparse", sparse), ("every", every))
    }
    ending = {"none": [], "some": [1, 4], "all": list(range(num_envs))}
    for case, envs in ending.items():
        action = jnp.zeros((num_envs, 1), jnp.float32).at[jnp.asarray(envs, jnp.int32)].set(0.9)
        got, want = step["sparse"](action), step["every"](action)
        assert int(jnp.sum(got[3])) == len(envs), case  # terminated
        jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b, err_msg=case), got, want)
    batched = jax.make_jaxpr(jax.vmap(sparse.step, in_axes=(0, 0, 0, None)))(keys[1], state, action, PARAMS)
    assert "cond[" in str(batched)
    # One env (no batching rule) and a vmap of a vmap (the cond becomes a select) agree too.
    action = act(0.9)
    jax.tree.map(
        np.testing.assert_array_equal,
        jax.jit(sparse.step)(keys[1, 0], jax.tree.map(lambda x: x[0], state), action, PARAMS),
        jax.jit(every.step)(keys[1, 0], jax.tree.map(lambda x: x[0], state), action, PARAMS),
    )
    grid = lambda x: x.reshape(2, num_envs // 2, *x.shape[1:])  # noqa: E731
    actions = jnp.where(jnp.arange(num_envs)[:, None] % 2 == 0, 0.9, 0.0).astype(jnp.float32)
    nested = jax.jit(jax.vmap(jax.vmap(sparse.step, in_axes=(0, 0, 0, None)), in_axes=(0, 0, 0, None)))
    got = nested(grid(keys[1]), jax.tree.map(grid, state), grid(actions), PARAMS)
    want = step["every"](actions)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(a.reshape(b.shape), b), got, want)


# One id of each env class that sets sparse_reset, with a rollout long enough for episodes to end.
SPARSE_RESET_ENVS = {
    "Foraging-8x8-2p-2f-coop-v3": 120,
    "MPE-simple_spread-v3": 60,
    "rware-tiny-2ag-v2": 510,
    "SMAX-3m-v0": 120,
    "CoinGame-v0": 40,
}


def test_every_env_class_with_sparse_reset_is_checked_below():
    for env_id in le.registered(variants=False):
        if any(family in env_id for family in ("Foraging", "MPE-", "rware-", "SMAX-", "CoinGame")):
            continue  # the families listed in SPARSE_RESET_ENVS
        env, _ = le.make(env_id, autoreset=False)
        assert not env.unwrapped.sparse_reset, (
            f"{env_id} sets sparse_reset: add one of its ids to SPARSE_RESET_ENVS"
        )
    for env_id in SPARSE_RESET_ENVS:
        assert le.make(env_id, autoreset=False)[0].unwrapped.sparse_reset, env_id


@pytest.mark.parametrize("env_id", sorted(SPARSE_RESET_ENVS))
def test_auto_reset_sparse_reset_envs_give_the_same_trajectories(env_id):
    """The envs that set ``sparse_reset`` step 4 envs through episode ends the same with it off
    (resets on every step) and on (resets only on steps where some env is done): integers and
    flags bit for bit, floats but for the rounding of differently fused programs; both steps where
    some env is done and steps where none is are compared."""
    inner, params = le.make(env_id, autoreset=False)
    num_steps, num_envs = SPARSE_RESET_ENVS[env_id], 4
    keys = jax.random.split(jax.random.key(7), (num_steps, num_envs))
    space = inner.action_space(params)
    actions = jax.vmap(jax.vmap(space.sample))(jax.random.split(jax.random.key(8), (num_steps, num_envs)))
    sparse, every = AutoReset(inner), AutoReset(inner)
    every.sparse_reset = False
    got, want = (
        _rollout_outputs(sparse, params, keys, actions),
        _rollout_outputs(every, params, keys, actions),
    )
    done = np.asarray(jax.vmap(jax.vmap(le.environment.episode_done))(got[3], got[4]))
    assert done.any(axis=1).sum() >= 1 and (~done.any(axis=1)).sum() >= 1, "no step with (or without) an end"
    # Floats but for rounding: with XLA's older emitters, as CI runs these tests, MPE's dynamics
    # fuse differently around the branch too.
    assert_same_up_to_rounding(got, want)


def test_optimistic_reset_batch_semantics():
    num_envs, ratio = 8, 4
    env = OptimisticReset(ENV, num_envs=num_envs, reset_ratio=ratio)
    obs, state = env.reset(KEY, PARAMS)
    assert obs.shape == (num_envs, 2) and state.t.shape == (num_envs,)
    # Envs 0, 3 and 5 end now (action > 0.5); the others go on.
    ending = np.zeros(num_envs, bool)
    ending[[0, 3, 5]] = True
    actions = jnp.where(ending[:, None], 0.9, 0.0).astype(jnp.float32)
    step_key = jax.random.key(9)
    new_obs, new_state, reward, terminated, truncated, info = jax.jit(env.step)(
        step_key, state, actions, PARAMS
    )
    assert new_obs.shape == (num_envs, 2) and reward.shape == (num_envs,) and terminated.shape == (num_envs,)
    np.testing.assert_array_equal(terminated, ending)
    np.testing.assert_array_equal(info["final_observation"][:, 0], obs[:, 0])
    np.testing.assert_array_equal(info["final_observation"][:, 1], 1.0)
    # Envs that go on keep their episode.
    np.testing.assert_array_equal(new_obs[~ending], info["final_observation"][~ending])
    # Done envs start over from one of the num_envs / ratio pool states drawn with the reset key.
    _, key_reset, _ = jax.random.split(step_key, 3)
    pool_obs, _ = jax.vmap(ENV.reset, in_axes=(0, None))(
        jax.random.split(key_reset, num_envs // ratio), PARAMS
    )
    for i in np.flatnonzero(ending):
        assert any(np.array_equal(new_obs[i], p) for p in np.asarray(pool_obs)), i
        assert int(new_state.t[i]) == 0
    with pytest.raises(ValueError, match="multiple of reset_ratio"):
        OptimisticReset(ENV, num_envs=10, reset_ratio=4)


def test_a_second_reset_wrapper_is_refused():
    """Before: ``AutoReset(make(id)[0])`` built and ran: each ended episode reset twice, and
    ``info["final_observation"]`` was the first reset's observation, not the episode's last."""
    env, _ = le.make("CartPole-v1")  # already in AutoReset
    for wrap in (AutoReset, lambda e: OptimisticReset(e, num_envs=4, reset_ratio=2)):
        with pytest.raises(
            le.EnvInputError,
            match=r"^(AutoReset|OptimisticReset)\(env\): CartPole-v1 already resets itself \(it holds an "
            r"AutoReset; .* Use the env as it is, or wrap the bare env: env, params = "
            r"lamella\.envs\.make\(id, autoreset=False\)\.$",
        ):
            wrap(EpisodeStatistics(env))  # found through a wrapper in between too
    AutoReset(EpisodeStatistics(le.make("CartPole-v1", autoreset=False)[0]))  # the bare env: fine


@pytest.mark.parametrize("max_steps", [2.5, "10", True, float("nan"), float("inf"), 0])
def test_time_limit_refuses_a_step_count_that_is_not_whole(max_steps):
    """Before: 2.5 truncated after 2 steps, "10" and True were taken as 10 and 1, NaN was
    Python's "cannot convert float NaN to integer"."""
    with pytest.raises(ValueError, match=r"^TimeLimit: max_steps must be an integer >= 1, got "):
        TimeLimit(ENV, max_steps)
    assert TimeLimit(ENV, 10.0).max_steps == 10


def test_normalizers_refuse_settings_out_of_range():
    """Before: ``NormalizeReward(env, gamma=1.5)`` let the discounted return grow without bound and
    ``NormalizeObservation(env, clip=-1)`` clipped every observation into an empty range, silently."""
    for make_wrapper, message in (
        (
            lambda: NormalizeReward(ENV, gamma=1.5),
            r"^NormalizeReward: gamma must be in \[0, 1\] \(a discount\), got 1\.5\.$",
        ),
        (lambda: NormalizeReward(ENV, gamma=float("nan")), r"gamma must be in \[0, 1\]"),
        (lambda: NormalizeReward(ENV, epsilon=0.0), r"^NormalizeReward: epsilon must be > 0, got 0\.0\.$"),
        (
            lambda: NormalizeObservation(ENV, clip=-1.0),
            r"^NormalizeObservation: clip must be > 0 .*got -1\.0\.$",
        ),
    ):
        with pytest.raises(ValueError, match=message):
            make_wrapper()
    # A traced discount (a sweep's) is left to the program.
    jax.jit(lambda gamma: NormalizeReward(ENV, gamma=gamma).gamma * 1.0)(0.9)


def _rollout(env, params, actions, key):
    """Scan env.step over a fixed action sequence: outputs with a leading time axis."""

    def body(carry, inputs):
        state = carry
        action, step_key = inputs
        obs, state, reward, terminated, truncated, info = env.step(step_key, state, action, params)
        return state, (obs, reward, terminated, truncated, info)

    key_reset, key_steps = jax.random.split(key)
    _, state = env.reset(key_reset, params)
    keys = jax.random.split(key_steps, len(actions))
    return jax.lax.scan(body, state, (actions, keys))[1]


def _check_episode_statistics(done, info, rewards):
    """Returned returns/lengths at each episode end equal the sums since the previous end."""
    episode_return, episode_length, seen = 0.0, 0, 0
    for t in range(len(done)):
        episode_return += float(rewards[t])
        episode_length += 1
        assert bool(info["returned_episode"][t]) == bool(done[t])
        if done[t]:
            assert int(info["returned_episode_lengths"][t]) == episode_length
            np.testing.assert_allclose(info["returned_episode_returns"][t], episode_return, rtol=1e-6)
            episode_return, episode_length, seen = 0.0, 0, seen + 1
    return seen


@pytest.fixture(scope="module")
def cartpole():
    return le.make("CartPole-v1", autoreset=False)


def test_episode_statistics_cartpole_fixed_actions(cartpole):
    bare, params = cartpole
    env = EpisodeStatistics(AutoReset(bare))
    bare_step = jax.jit(bare.step)
    actions = jnp.ones((40,), jnp.int32)  # always push right: episodes of ~10 steps
    keys = jax.random.split(jax.random.key(3), 3)
    rollout = jax.jit(jax.vmap(lambda k: _rollout(env, params, actions, k)))
    _, rewards, terminated, truncated, info = rollout(keys)
    for i in range(3):
        done = np.asarray(terminated[i] | truncated[i])
        assert _check_episode_statistics(done, jax.tree.map(lambda x: x[i], info), rewards[i]) >= 3
        # The first episode's length, counted by hand on the bare env with the same keys.
        key_reset, key_steps = jax.random.split(keys[i])
        _, state = bare.reset(key_reset, params)
        length = 0
        for step_key in jax.random.split(key_steps, len(actions)):
            _, state, _, term, trunc, _ = bare_step(step_key, state, 1, params)
            length += 1
            if term or trunc:
                break
        first_end = int(np.flatnonzero(done)[0])
        assert first_end + 1 == length
        assert float(info["returned_episode_returns"][i, first_end]) == float(length)


def test_episode_statistics_with_reset_done():
    env = EpisodeStatistics(ENV)
    step = jax.jit(env.step)
    obs, state = env.reset(KEY, PARAMS)
    for a in (0.25, -0.5, 0.125):  # ends on the third step (length 3): return -0.125
        obs, state, _, terminated, _, info = step(KEY, state, act(a), PARAMS)
    assert terminated and bool(info["returned_episode"])
    assert float(info["returned_episode_returns"]) == -0.125
    assert int(info["returned_episode_lengths"]) == 3
    obs, state = env.reset_done(jax.random.key(2), terminated, state, obs, PARAMS)
    assert float(obs[1]) == 0.0 and int(state.episode_length) == 0
    obs, state, _, _, _, info = step(KEY, state, act(0.5), PARAMS)
    assert not bool(info["returned_episode"])
    assert float(state.episode_return) == 0.5 and int(state.episode_length) == 1
    assert float(info["returned_episode_returns"]) == -0.125  # last finished episode is kept


class DictObs(le.Wrapper):
    """Observations as a dict whose keys are not in sorted order: {"z": start, "a": [t]}."""

    def _split(self, obs):
        return {"z": obs[0], "a": obs[1:]}

    def reset_env(self, key, params):
        obs, state = self.env.reset_env(key, params)
        return self._split(obs), state

    def step_env(self, key, state, action, params):
        obs, *rest = self.env.step_env(key, state, action, params)
        return (self._split(obs), *rest)

    def observation_space(self, params=None):
        return spaces.Dict({"z": spaces.Box(0.0, 1.0, ()), "a": spaces.Box(0.0, 100.0, (1,))})


def test_flatten_observation():
    env = FlattenObservation(AutoReset(DictObs(ENV)))
    obs, state = env.reset(KEY, PARAMS)
    raw, _ = ENV.reset(KEY, PARAMS)
    assert obs.shape == (2,) and obs.dtype == jnp.float32
    space = env.observation_space(PARAMS)
    assert space.shape == (2,)
    # Entries and bounds follow the same (pytree, sorted-key) order: "a" then "z".
    np.testing.assert_array_equal(obs, [raw[1], raw[0]])
    np.testing.assert_array_equal(space.low, [0.0, 0.0])
    np.testing.assert_array_equal(space.high, [100.0, 1.0])
    assert bool(space.contains(obs))
    for _ in range(3):
        obs, state, _, terminated, _, info = env.step(KEY, state, act(0.0), PARAMS)
    assert terminated and info["final_observation"].shape == (2,)
    np.testing.assert_array_equal(info["final_observation"], [3.0, raw[0]])


def test_wrapper_given_make_pair_names_a_fix_it_takes():
    with pytest.raises(le.EnvInputError) as raised:
        EpisodeStatistics(le.make("CartPole-v1"))
    message = str(raised.value)
    assert "env_params=env_params" not in message, message  # the wrapper takes no env_params
    assert "then pass env alone (env_params goes to reset and step)." in message, message
    env, env_params = le.make("CartPole-v1")
    EpisodeStatistics(env).reset(KEY, env_params)  # the named fix works


def test_flatten_observation_keeps_the_agent_axis():
    # The multi-agent contract: observations keep the leading agent axis, (n, D).
    inner, params = le.make("IPDInTheMatrix-v0", autoreset=False)
    env = FlattenObservation(inner)
    raw, _ = inner.reset(KEY, params)
    obs, _ = env.reset(KEY, params)
    assert obs.shape == (2, 6 + 5 * 5 * 10) and obs.dtype == jnp.float32
    for agent in range(2):  # sorted keys: "inventory", then "observation"
        np.testing.assert_array_equal(obs[agent, :6], raw["inventory"][agent])
        np.testing.assert_array_equal(obs[agent, 6:], raw["observation"][agent].ravel())
    space = env.observation_space(params)
    assert space.shape == (2, 256) and bool(space.contains(obs))


def test_clip_action():
    env = ClipAction(ENV)
    _, state = env.reset(KEY, PARAMS)
    _, _, reward, terminated, _, _ = env.step(KEY, state, act(-7.0), PARAMS)
    assert float(reward) == -1.0 and not terminated
    _, _, reward, terminated, _, _ = env.step(KEY, state, act(0.25), PARAMS)
    assert float(reward) == 0.25
    with pytest.raises(TypeError, match="Box action space"):
        ClipAction(le.make("CartPole-v1", autoreset=False)[0])


LONG = CountParams(length=100)
STEPS = 6


def _normalize_rollout(env, key, axis_name=None):
    actions = jnp.zeros((STEPS, 1), jnp.float32)
    _, state = env.reset(key, LONG)
    step_keys = jax.random.split(key, STEPS)

    def body(state, inputs):
        obs, state, *_ = env.step(inputs[1], state, inputs[0], LONG)
        return state, obs

    state, obs = jax.lax.scan(body, state, (actions, step_keys))
    return state, obs


def test_normalize_observation_per_env_matches_numpy():
    env = NormalizeObservation(ENV)
    state, obs = jax.jit(lambda k: _normalize_rollout(env, k))(KEY)
    start = float(ENV.reset(KEY, LONG)[0][0])
    raw = np.array([[start, t] for t in range(STEPS + 1)], np.float64)  # reset obs + STEPS steps
    np.testing.assert_allclose(state.stats.mean, raw.mean(0), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(state.stats.var, raw.var(0), rtol=1e-3, atol=1e-4)
    expected_last = (raw[-1] - state.stats.mean) / np.sqrt(state.stats.var + 1e-8)
    np.testing.assert_allclose(obs[-1], np.clip(expected_last, -10, 10), rtol=1e-5, atol=1e-5)


def test_normalize_observation_pooled_over_vmap_axis():
    env = NormalizeObservation(ENV, axis_name="envs")
    keys = jax.random.split(KEY, 5)
    state, _ = jax.jit(jax.vmap(lambda k: _normalize_rollout(env, k), axis_name="envs"))(keys)
    starts = np.array([float(ENV.reset(k, LONG)[0][0]) for k in keys])
    raw = np.array([[s, t] for s in starts for t in range(STEPS + 1)], np.float64)
    for i in range(5):  # every env holds the same pooled statistics
        np.testing.assert_allclose(state.stats.mean[i], raw.mean(0), rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(state.stats.var[i], raw.var(0), rtol=1e-3, atol=1e-4)
    per_env, _ = jax.jit(jax.vmap(lambda k: _normalize_rollout(NormalizeObservation(ENV), k)))(keys)
    assert not np.allclose(per_env.stats.mean[:, 0], raw.mean(0)[0])


def test_normalize_reward_by_running_std_of_discounted_return():
    gamma = 0.9
    env = NormalizeReward(ENV, gamma=gamma)
    rewards = np.array([0.5, -0.25, 0.375, 0.125, -0.5, 0.25], np.float32)
    _, state = env.reset(KEY, LONG)
    returns, scaled = [], []
    discounted = 0.0
    for r in rewards:
        _, state, reward, _, _, info = env.step(KEY, state, act(float(r)), LONG)
        assert float(info["raw_reward"]) == r
        discounted = gamma * discounted + float(r)
        returns.append(discounted)
        scaled.append(float(reward))
    # From the third step on the initial pseudo-count (1e-4) is negligible.
    for t in range(2, len(rewards)):
        expected = rewards[t] / np.sqrt(np.var(returns[: t + 1]) + 1e-8)
        np.testing.assert_allclose(scaled[t], expected, rtol=1e-3)


def test_time_limit_truncates_and_reset_done_resets_counter():
    env = TimeLimit(ENV, max_steps=4)
    step = jax.jit(env.step)
    obs, state = env.reset(KEY, LONG)
    for t in range(1, 5):
        obs, state, _, terminated, truncated, _ = step(KEY, state, act(0.0), LONG)
        assert not terminated and bool(truncated) == (t == 4)
    assert int(state.steps) == 0  # counter restarts at the truncation
    obs, state = env.reset_done(KEY, truncated, state, obs, LONG)
    assert float(obs[1]) == 0.0
    for _ in range(2):
        obs, state, *_ = step(KEY, state, act(0.0), LONG)
    assert int(state.steps) == 2
    kept = env.reset_done(KEY, jnp.asarray(False), state, obs, LONG)[1]
    assert int(kept.steps) == 2 and int(kept.env_state.t) == 2
    fresh = env.reset_done(KEY, jnp.asarray(True), state, obs, LONG)[1]
    assert int(fresh.steps) == 0 and int(fresh.env_state.t) == 0
    with pytest.raises(ValueError, match="max_steps"):
        TimeLimit(ENV, max_steps=0)


def test_validate_out_of_range_action_raises(cartpole):
    env = Validate(ENV)
    _, state = env.reset(KEY, PARAMS)
    step = checked(lambda s, a: env.step(KEY, s, a, PARAMS))
    step(state, act(0.5))  # in range: no error
    with pytest.raises(JaxRuntimeError, match="outside its action space"):
        step(state, act(1.5))
    bare, params = cartpole
    discrete = Validate(bare)
    _, cart_state = discrete.reset(KEY, params)
    cart_step = checked(lambda s, a: discrete.step(KEY, s, a, params))
    with pytest.raises(JaxRuntimeError, match="outside its action space"):
        cart_step(cart_state, jnp.int32(2))


def test_validate_bad_action_shape_or_dtype_raises_at_trace_time(cartpole):
    bare, params = cartpole
    env = Validate(bare)
    _, state = env.reset(KEY, params)
    step = jax.jit(lambda s, a: env.step(KEY, s, a, params))
    with pytest.raises(TypeError, match=r"dtype float32.*astype\(int32\)"):
        step(state, jnp.float32(1.0))
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        step(state, jnp.array([0, 1]))


def test_validate_nan_observation_raises():
    class Broken(CountEnv):
        def _obs(self, state):
            obs = super()._obs(state)
            return jnp.where(state.t == 2, jnp.nan, obs)

    env = Validate(Broken())
    _, state = env.reset(KEY, LONG)
    step = checked(lambda s: env.step(KEY, s, act(0.0), LONG))
    state = step(state)[1]
    with pytest.raises(JaxRuntimeError, match="NaN observation"):
        step(state)


def test_normalize_wrappers_keep_statistics_across_reset_done():
    from lamella.envs import wrappers as w

    env, params = le.make("CartPole-v1", autoreset=False)
    for wrapper in (w.NormalizeObservation(env), w.NormalizeReward(env)):
        obs, state = wrapper.reset(jax.random.key(0), params)
        for i in range(5):
            obs, state, *_ = wrapper.step(jax.random.key(i), state, 1, params)
        new_obs, new_state = wrapper.reset_done(jax.random.key(9), jnp.asarray(True), state, obs, params)
        np.testing.assert_array_equal(new_state.stats.count, state.stats.count)
        fresh_obs, _ = env.reset(jax.random.key(9), params)
        if isinstance(wrapper, w.NormalizeObservation):
            expected = jnp.clip((fresh_obs - state.stats.mean) / jnp.sqrt(state.stats.var + 1e-8), -10, 10)
            np.testing.assert_allclose(new_obs, expected, rtol=1e-6)
        else:
            np.testing.assert_array_equal(new_state.discounted_return, 0.0)
        kept_obs, kept_state = wrapper.reset_done(jax.random.key(9), jnp.asarray(False), state, obs, params)
        np.testing.assert_array_equal(kept_obs, obs)


def test_clip_action_uses_concrete_bounds_under_jit():
    from lamella.envs import wrappers as w

    env, params = le.make("Pendulum-v1", autoreset=False)
    clipped = w.ClipAction(env, params)
    _, state = clipped.reset(jax.random.key(0), params)
    out_clipped = jax.jit(clipped.step)(jax.random.key(1), state, jnp.array([5.0]), params)
    out_bound = jax.jit(env.step)(jax.random.key(1), state, jnp.array([2.0]), params)
    np.testing.assert_allclose(out_clipped[0], out_bound[0])


def _batched_step_conds(env_id):
    """The number of ``cond``s in the jaxpr of the auto-reset ``env_id`` stepped under ``vmap``."""
    env, params = le.make(env_id)
    keys = jax.random.split(jax.random.key(0), 4)
    _, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    actions = jax.vmap(env.action_space(params).sample)(keys)
    jaxpr = jax.make_jaxpr(jax.vmap(env.step, in_axes=(0, 0, 0, None)))(keys, state, actions, params)
    return str(jaxpr).count(" cond[")


def test_sparse_reset_branches_on_an_accelerator_only_where_the_env_says(monkeypatch):
    """``sparse_reset_on_accelerators``: on a GPU the batched auto-reset of MPE and LBF resets
    every env and selects (no branch: measured faster on an H200 with lamella-agents' packed
    rollout outputs), RWARE's keeps the branch; on the CPU all three branch. The backend is faked
    (the wrapper reads ``jax.default_backend()`` at trace time)."""
    mpe, lbf, rware = "MPE-simple_spread-v3", "Foraging-8x8-2p-2f-coop-v3", "rware-tiny-2ag-v2"
    assert (
        not le.make(mpe)[0].sparse_reset_on_accelerators and not le.make(lbf)[0].sparse_reset_on_accelerators
    )
    assert le.make(rware)[0].sparse_reset_on_accelerators
    assert _batched_step_conds(mpe) == 1 and _batched_step_conds(lbf) >= 1
    lbf_conds, rware_conds = _batched_step_conds(lbf), _batched_step_conds(rware)
    assert rware_conds >= 1
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert _batched_step_conds(mpe) == 0
    assert _batched_step_conds(lbf) == lbf_conds - 1
    assert _batched_step_conds(rware) == rware_conds
