"""bsuite envs: conformance, step-by-step parity with the ``bsuite`` package, hand-computed rewards."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs as le
from lamella.envs import bsuite as lb
from lamella.envs.testing import assert_parity_coverage, check_env
from lamella.envs.wrappers import AutoReset

BSUITE_IDS = [
    "Catch-bsuite",
    "DeepSea-bsuite",
    "MemoryChain-bsuite",
    "UmbrellaChain-bsuite",
    "DiscountingChain-bsuite",
    "SimpleBandit-bsuite",
]


@pytest.fixture(scope="module")
def jitted() -> Callable[[Any], tuple[Any, Any]]:
    """``jitted(env)`` -> (reset, step), compiled once per env object and shared by the tests."""
    cache: dict[int, tuple[Any, Any, Any]] = {}

    def get(env: Any) -> tuple[Any, Any]:
        if id(env) not in cache:
            cache[id(env)] = (env, jax.jit(env.reset), jax.jit(env.step))
        return cache[id(env)][1:]

    return get


@pytest.mark.parametrize("env_id", BSUITE_IDS)
@pytest.mark.parametrize("autoreset", [False, True])
def test_check_env(env_id: str, autoreset: bool) -> None:
    env, params = le.make(env_id, autoreset=autoreset)
    check_env(env, params, num_steps=24, num_envs=2)


def test_registered() -> None:
    assert set(BSUITE_IDS) <= set(le.registered())


@pytest.mark.parametrize("env_id", BSUITE_IDS)
def test_render_vmaps(env_id: str) -> None:
    """A batch of states renders in one jitted vmap; frames are RGB uint8 and show the state."""
    env, params = le.make(env_id, autoreset=False)
    _, states = jax.vmap(lambda k: env.reset(k, params))(jax.random.split(jax.random.key(0), 3))
    frames = np.asarray(jax.jit(jax.vmap(lambda s: env.render(s, params)))(states))
    assert frames.dtype == np.uint8 and frames.ndim == 4 and frames.shape[0] == 3 and frames.shape[-1] == 3
    assert all(len(np.unique(frame.reshape(-1, 3), axis=0)) >= 3 for frame in frames)


# Parity harness ---------------------------------------------------------------------------


NO_TRUNCATION = "bsuite episodes end with a termination (discount 0); there is no time limit"


def run_parity(
    bs_env: Any,
    env: Any,
    params: Any,
    copy_state: Callable[[Any, Any], Any],
    jitted_fns: tuple[Any, Any],
    num_episodes: int,
    policy: Callable[[Any], int],
    noisy_reward: bool = False,
    obs_columns: int | None = None,
    check_state: Callable[[Any, Any], None] | None = None,
    **coverage: str,
) -> int:
    """Step bsuite and lamella side by side from bsuite's state; returns the number of steps compared.

    After each bsuite reset its internal state is copied into a lamella state
    (``copy_state(bs_env, lamella_state)``); then both take the same actions
    (``policy(bs_env)``) and must return the same observation (its first
    ``obs_columns`` entries when given: the rest is random), reward (only
    within {-1, +1} on non-final steps when ``noisy_reward``) and episode end
    (bsuite's last step with discount 0 == lamella's terminated).

    Every step is also taken through lamella's ``AutoReset`` (``make``'s default): its
    ``info["final_observation"]`` must equal bsuite's observation, its returned observation
    the bare step's on other steps and a fresh reset's (same key) on the last. The compared
    transitions must cover terminations, auto-resets and non-zero rewards
    (:func:`assert_parity_coverage`; ``coverage`` passes its reasons, truncation has one).
    """
    reset_fn, step_fn = jitted_fns
    auto_step = jax.jit(AutoReset(env).step)
    key = jax.random.key(num_episodes)
    compared = 0
    cut = slice(None, obs_columns)
    flags: dict[str, list[Any]] = {"terminated": [], "reward": [], "auto_reset": []}
    for _ in range(num_episodes):
        ts = bs_env.reset()
        key, k_reset = jax.random.split(key)
        _, state = reset_fn(k_reset, params)
        state = copy_state(bs_env, state)
        while True:
            action = policy(bs_env)
            ts = bs_env.step(action)
            key, k_step = jax.random.split(key)
            auto_obs, _, _, auto_terminated, _, info = auto_step(k_step, state, jnp.int32(action), params)
            obs, state, reward, terminated, truncated, _ = step_fn(k_step, state, jnp.int32(action), params)
            np.testing.assert_array_equal(np.asarray(obs).ravel()[cut], ts.observation.ravel()[cut])
            np.testing.assert_array_equal(
                np.asarray(info["final_observation"]).ravel()[cut], ts.observation.ravel()[cut]
            )
            if bool(terminated):  # a fresh reset, drawn from the step's key
                np.testing.assert_array_equal(np.asarray(auto_obs), np.asarray(reset_fn(k_step, params)[0]))
            else:  # the bare step's (a random step draws from a key forked by the wrapper: cut)
                np.testing.assert_array_equal(np.asarray(auto_obs).ravel()[cut], np.asarray(obs).ravel()[cut])
            assert bool(auto_terminated) == bool(terminated)
            if noisy_reward and not ts.last():
                assert float(reward) in (-1.0, 1.0) and ts.reward in (-1.0, 1.0)
            else:
                np.testing.assert_allclose(float(reward), ts.reward, rtol=1e-6, atol=1e-7)
            assert bool(terminated) == (ts.last() and ts.discount == 0.0)
            assert not bool(truncated)
            if check_state is not None:
                check_state(bs_env, state)
            compared += 1
            flags["terminated"].append(ts.last() and ts.discount == 0.0)
            flags["reward"].append(ts.reward)
            flags["auto_reset"].append(bool(terminated))
            if ts.last():
                break
    assert_parity_coverage(
        type(bs_env).__name__,
        terminated=flags["terminated"],
        truncated=np.zeros(compared, bool),
        reward=flags["reward"],
        auto_reset=flags["auto_reset"],
        never_truncates=NO_TRUNCATION,
        **coverage,
    )
    return compared


def random_policy(num_actions: int, seed: int = 0) -> Callable[[Any], int]:
    rng = np.random.default_rng(seed)
    return lambda _: int(rng.integers(num_actions))


# MemoryChain ------------------------------------------------------------------------------

MEMORY_CHAINS = {1: lb.MemoryChain(num_bits=1), 4: lb.MemoryChain(num_bits=4)}


@pytest.mark.parametrize(("memory_length", "num_bits"), [(1, 1), (5, 1), (3, 4)])
def test_memory_chain_parity(memory_length: int, num_bits: int, jitted: Any) -> None:
    memory_chain = pytest.importorskip("bsuite.environments.memory_chain")

    env = MEMORY_CHAINS[num_bits]
    params = lb.MemoryChainParams(memory_length=memory_length)
    reset_fn, step_fn = jitted(env)
    bs_env = memory_chain.MemoryChain(memory_length=memory_length, num_bits=num_bits, seed=3)

    def copy_state(bs: Any, state: Any) -> Any:
        return state.replace(
            context=jnp.asarray(bs._context, jnp.int32),
            query=jnp.int32(bs._query),
            time=jnp.int32(bs._timestep),
        )

    steps = run_parity(bs_env, env, params, copy_state, (reset_fn, step_fn), 60, random_policy(2))
    assert steps == 60 * (memory_length + 1)


def test_memory_chain_hand_computed() -> None:
    env = lb.MemoryChain(num_bits=2)
    params = lb.MemoryChainParams(memory_length=2)
    state = lb.MemoryChainState(context=jnp.array([0, 1]), query=jnp.int32(1), time=jnp.int32(0))
    np.testing.assert_array_equal(env.get_obs(state, params), [1.0, 0.0, -1.0, 1.0])
    obs, state, reward, terminated, _, _ = env.step(jax.random.key(0), state, 0, params)
    np.testing.assert_array_equal(obs, [1.0, 0.0, -1.0, 1.0])  # bsuite repeats the first observation
    assert float(reward) == 0.0 and not bool(terminated)
    obs, state, reward, terminated, _, _ = env.step(jax.random.key(0), state, 0, params)
    np.testing.assert_array_equal(obs, [0.5, 1.0, 0.0, 0.0])  # the query shows at time L - 1
    assert float(reward) == 0.0 and not bool(terminated)
    final = env.step(jax.random.key(0), state, 1, params)
    np.testing.assert_array_equal(final[0], [0.0, 0.0, 0.0, 0.0])
    assert float(final[2]) == 1.0 and bool(final[3])
    assert float(env.step(jax.random.key(0), state, 0, params)[2]) == -1.0


def test_memory_chain_reset_distribution() -> None:
    env = lb.MemoryChain(num_bits=3)
    keys = jax.random.split(jax.random.key(1), 4096)
    _, states = jax.jit(jax.vmap(lambda k: env.reset(k, env.default_params)))(keys)
    np.testing.assert_allclose(np.asarray(states.context).mean(0), 0.5, atol=0.04)
    counts = np.bincount(np.asarray(states.query), minlength=3) / 4096
    np.testing.assert_allclose(counts, 1 / 3, atol=0.04)


def test_memory_chain_rejects_zero_bits() -> None:
    with pytest.raises(ValueError, match="num_bits"):
        lb.MemoryChain(num_bits=0)


# Catch ------------------------------------------------------------------------------------

CATCH = lb.Catch()


def copy_catch(bs: Any, state: Any) -> Any:
    return lb.CatchState(
        ball_x=jnp.int32(bs._ball_x), ball_y=jnp.int32(bs._ball_y), paddle_x=jnp.int32(bs._paddle_x)
    )


def test_catch_parity(jitted: Any) -> None:
    catch = pytest.importorskip("bsuite.environments.catch")
    bs_env = catch.Catch(rows=10, columns=5, seed=1)
    # A policy that tracks the ball half the time, so both +1 and -1 endings occur.
    rng = np.random.default_rng(1)

    def policy(bs: Any) -> int:
        if rng.random() < 0.5:
            return int(np.sign(bs._ball_x - bs._paddle_x)) + 1
        return int(rng.integers(3))

    params = CATCH.default_params
    steps = run_parity(bs_env, CATCH, params, copy_catch, jitted(CATCH), 60, policy)
    assert steps == 60 * 9


def test_catch_hand_computed() -> None:
    env = lb.Catch(rows=3, columns=5)
    state = lb.CatchState(ball_x=jnp.int32(0), ball_y=jnp.int32(0), paddle_x=jnp.int32(2))
    obs, state, reward, terminated, _, _ = env.step(jax.random.key(0), state, 0, env.default_params)
    expected = np.zeros((3, 5), np.float32)
    expected[1, 0] = expected[2, 1] = 1.0
    np.testing.assert_array_equal(obs, expected)
    assert float(reward) == 0.0 and not bool(terminated)
    caught = env.step(jax.random.key(0), state, 0, env.default_params)
    assert float(caught[2]) == 1.0 and bool(caught[3]) and int(caught[1].paddle_x) == 0
    missed = env.step(jax.random.key(0), state, 2, env.default_params)
    assert float(missed[2]) == -1.0 and bool(missed[3]) and int(missed[1].paddle_x) == 2


def test_catch_observation_every_state() -> None:
    """The flat-index board equals the row/column compares for every ball and paddle position
    (ball rows 0..rows, one past the board lighting no cell)."""
    env = lb.Catch()
    ys, xs, ps = np.meshgrid(
        np.arange(env.rows + 1), np.arange(env.columns), np.arange(env.columns), indexing="ij"
    )
    ys, xs, ps = ys.ravel(), xs.ravel(), ps.ravel()
    states = lb.CatchState(
        ball_x=jnp.asarray(xs, jnp.int32),
        ball_y=jnp.asarray(ys, jnp.int32),
        paddle_x=jnp.asarray(ps, jnp.int32),
    )
    obs = np.asarray(jax.vmap(env.get_obs)(states))
    rows, columns = np.arange(env.rows)[None, :, None], np.arange(env.columns)[None, None, :]
    ball = (rows == ys[:, None, None]) & (columns == xs[:, None, None])
    paddle = (rows == env.rows - 1) & (columns == ps[:, None, None])
    np.testing.assert_array_equal(obs, (ball | paddle).astype(np.float32))


def test_catch_reset_distribution() -> None:
    keys = jax.random.split(jax.random.key(2), 5000)
    _, states = jax.jit(jax.vmap(lambda k: CATCH.reset(k, CATCH.default_params)))(keys)
    np.testing.assert_allclose(np.bincount(np.asarray(states.ball_x), minlength=5) / 5000, 0.2, atol=0.03)
    assert np.all(np.asarray(states.paddle_x) == 2) and np.all(np.asarray(states.ball_y) == 0)


# DeepSea ----------------------------------------------------------------------------------

DEEP_SEA = lb.DeepSea(size=8)


def copy_deep_sea(bs: Any, state: Any) -> Any:
    return lb.DeepSeaState(
        row=jnp.int32(bs._row), column=jnp.int32(bs._column), bad_episode=jnp.asarray(bs._bad_episode)
    )


@pytest.mark.parametrize("mapping_seed", [0, 7])
def test_deep_sea_parity(mapping_seed: int, jitted: Any) -> None:
    deep_sea = pytest.importorskip("bsuite.environments.deep_sea")
    bs_env = deep_sea.DeepSea(size=8, deterministic=True, mapping_seed=mapping_seed)
    # The default params draw bsuite's mapping for the same seed; copying it in makes the test explicit.
    np.testing.assert_array_equal(
        lb.DeepSea(size=8, mapping_seed=mapping_seed).default_params.action_mapping, bs_env._action_mapping
    )
    params = lb.DeepSeaParams(
        action_mapping=jnp.asarray(bs_env._action_mapping, jnp.int32), unscaled_move_cost=0.01
    )
    rng = np.random.default_rng(mapping_seed)

    def policy(bs: Any) -> int:  # mostly "right", so the treasure is reached in some episodes
        right = int(bs._action_mapping[bs._row, bs._column])
        return right if rng.random() < 0.9 else int(rng.integers(2))

    def check_state(bs: Any, state: Any) -> None:
        assert bool(state.bad_episode) == bs._bad_episode

    bs_env._denoised_return = 0
    steps = run_parity(
        bs_env, DEEP_SEA, params, copy_deep_sea, jitted(DEEP_SEA), 60, policy, check_state=check_state
    )
    assert steps == 60 * 8
    assert bs_env._denoised_return > 0, "no episode reached the treasure: the +1 reward went untested"


def test_deep_sea_unrandomised_mapping_and_hand_computed() -> None:
    env = lb.DeepSea(size=2, randomize_actions=False)
    params = env.default_params
    np.testing.assert_array_equal(params.action_mapping, np.ones((2, 2)))
    obs, state = env.reset(jax.random.key(0), params)
    np.testing.assert_array_equal(obs, [[1.0, 0.0], [0.0, 0.0]])
    obs, state, reward, terminated, _, _ = env.step(jax.random.key(0), state, 1, params)
    np.testing.assert_array_equal(obs, [[0.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(float(reward), -0.005, rtol=1e-6)  # move cost 0.01 / size
    assert not bool(terminated)
    obs, state, reward, terminated, _, _ = env.step(jax.random.key(0), state, 1, params)
    np.testing.assert_array_equal(obs, np.zeros((2, 2)))  # the agent has left the grid
    np.testing.assert_allclose(float(reward), 1.0 - 0.005, rtol=1e-6)
    assert bool(terminated) and not bool(state.bad_episode)
    # Going left on the diagonal marks a bad episode and costs nothing.
    _, state = env.reset(jax.random.key(0), params)
    _, state, reward, _, _, _ = env.step(jax.random.key(0), state, 0, params)
    assert float(reward) == 0.0 and bool(state.bad_episode) and int(state.column) == 0


def test_deep_sea_observation_every_cell() -> None:
    """The flat-index one-hot equals ``(rows == row) & (columns == column)`` for every state of the
    state space (row 0..size, column 0..size-1), all zeros once the agent has left the grid."""
    for size in (1, 8):
        env = lb.DeepSea(size=size)
        rows, columns = np.meshgrid(np.arange(size + 1), np.arange(size), indexing="ij")
        states = lb.DeepSeaState(
            row=jnp.asarray(rows.ravel(), jnp.int32),
            column=jnp.asarray(columns.ravel(), jnp.int32),
            bad_episode=jnp.zeros(rows.size, jnp.bool_),
        )
        obs = np.asarray(jax.vmap(env.get_obs)(states))
        grid_rows, grid_columns = np.arange(size)[:, None], np.arange(size)[None, :]
        expected = (grid_rows == rows.ravel()[:, None, None]) & (
            grid_columns == columns.ravel()[:, None, None]
        )
        np.testing.assert_array_equal(obs, expected.astype(np.float32))
        assert obs[rows.ravel() == size].sum() == 0.0 and obs.dtype == np.float32


def test_deep_sea_mapping_is_per_params() -> None:
    """Two envs in one vmap with different mappings take the same action to different cells."""
    env = DEEP_SEA
    mappings = jnp.stack([jnp.zeros((8, 8), jnp.int32), jnp.ones((8, 8), jnp.int32)])
    params = jax.vmap(lambda m: lb.DeepSeaParams(action_mapping=m))(mappings)
    _, states = jax.vmap(env.reset)(jax.random.split(jax.random.key(0), 2), params)
    _, states, *_ = jax.vmap(env.step, in_axes=(0, 0, None, 0))(
        jax.random.split(jax.random.key(1), 2), states, jnp.int32(1), params
    )
    np.testing.assert_array_equal(states.column, [0, 1])
    sampled = env.sample_action_mapping(jax.random.key(3))
    assert sampled.shape == (8, 8) and sampled.dtype == jnp.int32 and 10 < int(sampled.sum()) < 54


def test_deep_sea_stochastic_statistics() -> None:
    """Windy variant: "right" fails with probability 1/N; N(0, 1) noise on the bottom corners only."""
    env = lb.DeepSea(size=4, deterministic=False, randomize_actions=False)
    assert env.stochastic_step
    params = env.default_params
    keys = jax.random.split(jax.random.key(4), 8000)

    def one(key: jax.Array, row: int, column: int) -> tuple[jax.Array, jax.Array]:
        state = lb.DeepSeaState(row=jnp.int32(row), column=jnp.int32(column), bad_episode=jnp.bool_(False))
        _, state, reward, *_ = env.step(key, state, 1, params)
        return state.column, reward

    batch = jax.jit(jax.vmap(one, in_axes=(0, None, None)), static_argnums=(1, 2))
    columns, rewards = batch(keys, 0, 0)
    np.testing.assert_allclose(np.mean(np.asarray(columns) == 0), 0.25, atol=0.025)
    np.testing.assert_allclose(np.asarray(rewards), -0.0025, rtol=1e-5)  # no noise off the corners
    _, rewards = batch(keys, 3, 3)
    rewards = np.asarray(rewards)
    assert abs(rewards.mean() - (1.0 - 0.0025)) < 0.05 and abs(rewards.std() - 1.0) < 0.05
    _, rewards = batch(keys, 3, 1)
    np.testing.assert_allclose(np.asarray(rewards), -0.0025, rtol=1e-5)


# UmbrellaChain ----------------------------------------------------------------------------

UMBRELLA = lb.UmbrellaChain(n_distractor=3)


def test_umbrella_chain_parity(jitted: Any) -> None:
    umbrella_chain = pytest.importorskip("bsuite.environments.umbrella_chain")
    bs_env = umbrella_chain.UmbrellaChain(chain_length=6, n_distractor=3, seed=2)

    def copy_state(bs: Any, state: Any) -> Any:
        return lb.UmbrellaChainState(
            need_umbrella=jnp.int32(bs._need_umbrella),
            has_umbrella=jnp.int32(bs._has_umbrella),
            time=jnp.int32(bs._timestep),
        )

    params = lb.UmbrellaChainParams(chain_length=6)
    steps = run_parity(
        bs_env,
        UMBRELLA,
        params,
        copy_state,
        jitted(UMBRELLA),
        80,
        random_policy(2),
        noisy_reward=True,
        obs_columns=3,
    )
    assert steps == 80 * 6


def test_umbrella_chain_random_parts() -> None:
    """Reset coins, noise rewards and distractors are fair coins (bsuite's are)."""
    params = lb.UmbrellaChainParams(chain_length=10)
    keys = jax.random.split(jax.random.key(5), 5000)
    obs, states = jax.jit(jax.vmap(lambda k: UMBRELLA.reset(k, params)))(keys)
    np.testing.assert_allclose(np.asarray(states.need_umbrella).mean(), 0.5, atol=0.03)
    np.testing.assert_allclose(np.asarray(states.has_umbrella).mean(), 0.5, atol=0.03)
    np.testing.assert_allclose(np.asarray(obs[:, 3:]).mean(0), 0.5, atol=0.03)
    obs, _, rewards, terminated, *_ = jax.jit(jax.vmap(lambda k, s: UMBRELLA.step(k, s, 0, params)))(
        keys, states
    )
    np.testing.assert_allclose(np.asarray(rewards).mean(), 0.0, atol=0.06)
    assert set(np.unique(np.asarray(rewards))) == {-1.0, 1.0} and not np.any(terminated)
    np.testing.assert_allclose(np.asarray(obs[:, 3:]).mean(0), 0.5, atol=0.03)
    # Need and has are independent at reset (bsuite draws them separately).
    joint = np.asarray(states.need_umbrella) * np.asarray(states.has_umbrella)
    np.testing.assert_allclose(joint.mean(), 0.25, atol=0.03)


def test_umbrella_chain_hand_computed() -> None:
    env = lb.UmbrellaChain()
    params = lb.UmbrellaChainParams(chain_length=2)
    state = lb.UmbrellaChainState(need_umbrella=jnp.int32(1), has_umbrella=jnp.int32(0), time=jnp.int32(0))
    obs, state, _, terminated, _, _ = env.step(jax.random.key(0), state, 1, params)
    np.testing.assert_array_equal(obs, [1.0, 1.0, 0.5])
    assert not bool(terminated)
    obs, final, reward, terminated, _, _ = env.step(
        jax.random.key(0), state, 0, params
    )  # later actions ignored
    np.testing.assert_array_equal(obs, [1.0, 1.0, 0.0])
    assert float(reward) == 1.0 and bool(terminated)
    wet = state.replace(has_umbrella=jnp.int32(0))
    assert float(env.step(jax.random.key(0), wet, 1, params)[2]) == -1.0


# DiscountingChain -------------------------------------------------------------------------

DISCOUNTING = lb.DiscountingChain()


@pytest.mark.parametrize("mapping_seed", [0, 13])
def test_discounting_chain_parity(mapping_seed: int, jitted: Any) -> None:
    discounting_chain = pytest.importorskip("bsuite.environments.discounting_chain")
    bs_env = discounting_chain.DiscountingChain(mapping_seed=mapping_seed)

    def copy_state(bs: Any, state: Any) -> Any:
        return lb.DiscountingChainState(context=jnp.int32(bs._context), time=jnp.int32(bs._timestep))

    params = lb.DiscountingChainParams(mapping_seed=mapping_seed)
    steps = run_parity(
        bs_env, DISCOUNTING, params, copy_state, jitted(DISCOUNTING), 10, random_policy(5, mapping_seed)
    )
    assert steps == 10 * 100


@pytest.mark.parametrize("chain", range(5))
def test_discounting_chain_returns(chain: int) -> None:
    """Each chain pays once, on step 1, 3, 10, 30 or 100; chain 2 (= 7 % 5) pays 1.1."""
    params = lb.DiscountingChainParams(mapping_seed=7)
    _, state = DISCOUNTING.reset(jax.random.key(0), params)

    def body(state: Any, t: jax.Array) -> tuple[Any, tuple[jax.Array, jax.Array]]:
        _, state, reward, terminated, _, _ = DISCOUNTING.step(
            jax.random.key(0), state, jnp.where(t == 0, chain, 4), params
        )
        return state, (reward, terminated)

    _, (rewards, terminated) = jax.lax.scan(body, state, jnp.arange(100))
    rewards = np.asarray(rewards)
    expected = np.zeros(100, np.float32)
    expected[lb.REWARD_TIMESTEPS[chain] - 1] = 1.1 if chain == 2 else 1.0
    np.testing.assert_allclose(rewards, expected, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(terminated), np.arange(100) == 99)


def test_discounting_chain_time_fraction_is_exact_under_vmap() -> None:
    """The observation's time / 100 is computed (not looked up): under jit and vmap it must still
    be float32(t) / float32(100), correctly rounded, for every step (not t * 0.01)."""
    times = jnp.arange(101, dtype=jnp.int32)
    states = lb.DiscountingChainState(context=jnp.full((101,), 2, jnp.int32), time=times)
    obs = jax.jit(jax.vmap(DISCOUNTING.get_obs))(states)
    expected = np.arange(101, dtype=np.float32) / np.float32(100)
    np.testing.assert_array_equal(np.asarray(obs)[:, 1], expected)
    assert not np.array_equal(expected, np.arange(101, dtype=np.float32) * np.float32(0.01))
    # The same inside AutoReset's step (the observation built from the selected state, fused
    # with the step): from time t-1 to t for t = 1..100, then 0 after the reset at t = 100.
    step = jax.jit(jax.vmap(AutoReset(DISCOUNTING).step, in_axes=(None, 0, None, None)))
    before = lb.DiscountingChainState(context=jnp.full((100,), 2, jnp.int32), time=times[:100])
    obs, state, _, terminated, _, info = step(jax.random.key(0), before, 0, DISCOUNTING.default_params)
    np.testing.assert_array_equal(np.asarray(info["final_observation"])[:, 1], expected[1:])
    np.testing.assert_array_equal(np.asarray(obs)[:, 1], np.where(np.asarray(terminated), 0.0, expected[1:]))
    # The chain: the action's (0) on the first step, the state's (2) after, -1 after the reset.
    np.testing.assert_array_equal(np.asarray(obs)[:, 0], np.r_[0.0, np.full(98, 2.0), -1.0])
    assert np.asarray(terminated).sum() == 1


# SimpleBandit -----------------------------------------------------------------------------

BANDIT = lb.SimpleBandit()


@pytest.mark.parametrize("mapping_seed", [0, 5])
def test_simple_bandit_parity(mapping_seed: int, jitted: Any) -> None:
    bandit = pytest.importorskip("bsuite.environments.bandit")
    bs_env = bandit.SimpleBandit(mapping_seed=mapping_seed)
    params = lb.SimpleBandit(mapping_seed=mapping_seed).default_params
    np.testing.assert_allclose(params.rewards, bs_env._rewards, rtol=1e-6)
    steps = run_parity(bs_env, BANDIT, params, lambda bs, s: s, jitted(BANDIT), 100, random_policy(11))
    assert steps == 100


def test_simple_bandit_hand_computed() -> None:
    params = lb.SimpleBanditParams(rewards=jnp.array([0.0, 0.5, 1.0]))
    env = lb.SimpleBandit(num_actions=3)
    obs, state = env.reset(jax.random.key(0), params)
    obs, state, reward, terminated, truncated, _ = env.step(jax.random.key(0), state, 1, params)
    np.testing.assert_array_equal(obs, [1.0])
    assert float(reward) == 0.5 and bool(terminated) and not bool(truncated) and int(state.last_action) == 1
    np.testing.assert_allclose(np.sort(BANDIT.default_params.rewards), np.linspace(0, 1, 11), rtol=1e-6)


# Construction errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (lambda: lb.Catch(rows=1), "rows"),
        (lambda: lb.DeepSea(size=0), "size"),
        (lambda: lb.UmbrellaChain(n_distractor=-1), "n_distractor"),
        (lambda: lb.SimpleBandit(num_actions=0), "num_actions"),
    ],
)
def test_bad_construction_is_rejected(factory: Callable[[], Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        factory()


# Bit-exactness over bsuite's own sweeps, batched and single ---------------------------------
#
# bsuite's experiments sweep MemoryChain's memory_length and UmbrellaChain's chain_length over
# these values (bsuite/experiments/{memory_len,umbrella_length}/sweep.py); DeepSea's sweep takes
# sizes 10..50 with mapping_seed 42, DiscountingChain's and SimpleBandit's mapping seeds 0..19.
SWEEP_LENGTHS = (*range(1, 11), 12, 14, 17, 20, 25, *range(30, 101, 10))


@dataclasses.dataclass
class Recorded:
    """Episodes bsuite played, stacked over episodes: what lamella must reproduce bit for bit."""

    states: Any  # lamella states copied from bsuite after each reset, leaves (episodes, ...)
    actions: np.ndarray  # int32 (episodes, steps), padded with 0 after the episode's end
    reset_obs: np.ndarray  # float32 (episodes, obs_size)
    obs: np.ndarray  # float32 (episodes, steps, obs_size)
    rewards: np.ndarray  # float32 (episodes, steps)
    last: np.ndarray  # bool (episodes, steps): bsuite's last step (discount 0)
    exact_reward: np.ndarray  # bool (episodes, steps): the reward is deterministic, compared exactly

    def episode(self, i: int) -> Recorded:
        """Episode ``i`` alone, cut after its last step."""
        steps = int(np.argmax(self.last[i])) + 1
        return Recorded(
            jax.tree.map(lambda x: x[i : i + 1], self.states),
            self.actions[i : i + 1, :steps],
            self.reset_obs[i : i + 1],
            self.obs[i : i + 1, :steps],
            self.rewards[i : i + 1, :steps],
            self.last[i : i + 1, :steps],
            self.exact_reward[i : i + 1, :steps],
        )


def record_bsuite(
    bs_env: Any,
    copy_state: Callable[[Any], Any],
    policy: Callable[[Any, int], int],
    episodes: int,
    horizon: int,
    exact_reward: Callable[[Any, Any], bool] = lambda bs, ts: True,
) -> Recorded:
    """Play ``episodes`` bsuite episodes of ``horizon`` steps (padded with action 0 after the end)."""
    states, actions, reset_obs, obs, rewards, last, exact = [], [], [], [], [], [], []
    for episode in range(episodes):
        ts = bs_env.reset()
        states.append(copy_state(bs_env))
        reset_obs.append(np.asarray(ts.observation, np.float32).ravel())
        ep = {k: [] for k in ("a", "o", "r", "l", "x")}
        while len(ep["a"]) < horizon:
            if ep["l"] and ep["l"][-1]:  # padding after the end: not compared
                ep["a"].append(0), ep["o"].append(ep["o"][-1]), ep["r"].append(0.0)
                ep["l"].append(False), ep["x"].append(False)
                continue
            action = policy(bs_env, episode)
            ts = bs_env.step(action)
            ep["a"].append(action), ep["o"].append(np.asarray(ts.observation, np.float32).ravel())
            ep["r"].append(np.float32(ts.reward)), ep["l"].append(ts.last() and ts.discount == 0.0)
            ep["x"].append(exact_reward(bs_env, ts))
        for store, k in zip((actions, obs, rewards, last, exact), "aorlx"):
            store.append(np.asarray(ep[k]))
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
    return Recorded(
        stacked,
        np.asarray(actions, np.int32),
        np.stack(reset_obs),
        np.stack(obs),
        np.asarray(rewards, np.float32),
        np.asarray(last),
        np.asarray(exact),
    )


def lamella_rollout(
    step: Callable[..., Any], first_obs: Any, state: Any, actions: np.ndarray
) -> tuple[Any, ...]:
    """``(first_obs, obs, reward, terminated)`` of ``step(state, action)`` called once per column of
    ``actions``; stacked along axis 1 for a batched ``step``, along a new axis 0 for a single one."""
    batched = actions.ndim == 2
    columns = []
    for t in range(actions.shape[-1]):
        obs, state, reward, terminated, _, _ = step(state, actions[:, t] if batched else actions[t])
        columns.append(
            (np.asarray(obs).reshape((*np.shape(reward), -1)), np.asarray(reward), np.asarray(terminated))
        )
    stacked = [np.stack(column, axis=1 if batched else 0) for column in zip(*columns)]
    first = np.asarray(first_obs).reshape((*np.shape(stacked[1])[:-1], -1))
    return (first, *stacked) if batched else (first[None], *(x[None] for x in stacked))


def assert_exact(what: str, recorded: Recorded, out: tuple[Any, ...], columns: int | None) -> None:
    """Observations (their first ``columns`` entries), rewards where deterministic, episode ends: equal."""
    first, obs, reward, terminated = (np.asarray(x) for x in out)
    steps = recorded.last.shape[1]
    obs, reward, terminated = obs[:, :steps], reward[:, :steps], terminated[:, :steps]
    live = np.cumsum(recorded.last, axis=1) - recorded.last == 0  # up to and including the last step
    cut = slice(None, columns)
    np.testing.assert_array_equal(first[:, cut], recorded.reset_obs[:, cut], err_msg=f"{what}: reset obs")
    np.testing.assert_array_equal(obs[live][:, cut], recorded.obs[live][:, cut], err_msg=f"{what}: obs")
    exact = live & recorded.exact_reward
    np.testing.assert_array_equal(reward[exact], recorded.rewards[exact], err_msg=f"{what}: reward")
    np.testing.assert_array_equal(terminated[live], recorded.last[live], err_msg=f"{what}: terminated")


def check_all_modes(
    env: Any,
    settings: list[tuple[str, Any]],
    recordings: list[Recorded],
    columns: int | None = None,
    eager: Callable[[str], bool] = lambda name: True,
) -> None:
    """Every setting, with params shared or closed over, batched or single, gives bsuite's values.

    * ``vmap`` over episodes, params shared (``in_axes=None``) and passed to ``jit``: XLA sees a
      value broadcast over the batch;
    * ``vmap`` over episodes, ``jit`` with the params closed over: XLA sees constants;
    * single calls under ``jit`` with the params closed over;
    * eager single calls (no ``jit``), first episode of the settings named in ``eager``
      (each eager step dispatches every op separately: tens of milliseconds).
    """
    for (name, _), recorded in zip(settings, recordings):
        live = np.cumsum(recorded.last, axis=1) - recorded.last == 0
        assert_parity_coverage(
            name,
            terminated=recorded.last[live],
            truncated=np.zeros(int(live.sum()), bool),
            reward=recorded.rewards[live],
            auto_reset=np.zeros(int(live.sum()), bool),
            never_truncates=NO_TRUNCATION,
            no_auto_reset="bare steps, compared bit for bit; auto-resets are compared in the test_*_parity tests",
        )
    key = jax.random.key(0)
    shared_step = jax.jit(jax.vmap(lambda p, s, a: env.step(key, s, a, p), in_axes=(None, 0, 0)))
    shared_obs = jax.jit(jax.vmap(lambda p, s: env.get_obs(s, p), in_axes=(None, 0)))
    for (name, p), recorded in zip(settings, recordings):
        traced = jax.tree.map(jnp.asarray, p)
        out = lamella_rollout(
            lambda s, a: shared_step(traced, s, a),
            shared_obs(traced, recorded.states),
            recorded.states,
            recorded.actions,
        )
        assert_exact(f"{name}, vmap, shared params", recorded, out, columns)

    # Params closed over: one program steps every setting, batched (vmap) and one episode at a time
    # (lax.map: an unbatched step per episode), so the settings share one compile; the steps are
    # driven from Python.
    steps = max(r.actions.shape[1] for r in recordings)
    actions = [np.pad(r.actions, ((0, 0), (0, steps - r.actions.shape[1]))) for r in recordings]

    def closed_obs(states: list[Any]) -> list[tuple[jax.Array, jax.Array]]:
        obs = lambda p: lambda s_: jnp.ravel(env.get_obs(s_, p))  # noqa: E731
        return [(jax.vmap(obs(p))(s), jax.lax.map(obs(p), s)) for (_, p), s in zip(settings, states)]

    def closed_step(states: list[tuple[Any, Any]], acts: list[jax.Array]) -> list[Any]:
        def step(p: Any) -> Callable[[Any], Any]:
            def one(state_action: tuple[Any, jax.Array]) -> Any:
                obs, state, reward, terminated, _, _ = env.step(key, *state_action, p)
                return jnp.ravel(obs), state, reward, terminated

            return one

        return [
            (jax.vmap(lambda s_, a_: step(p)((s_, a_)))(b, a), jax.lax.map(step(p), (m, a)))
            for (_, p), (b, m), a in zip(settings, states, acts)
        ]

    closed_step_jit = jax.jit(closed_step)
    states = [(r.states, r.states) for r in recordings]
    first = jax.jit(closed_obs)([r.states for r in recordings])
    outputs: list[list[Any]] = [[] for _ in settings]
    for t in range(steps):
        out = closed_step_jit(states, [a[:, t] for a in actions])
        states = [(b[1], m[1]) for b, m in out]
        for store, (b, m) in zip(outputs, out):
            store.append(((b[0], b[2], b[3]), (m[0], m[2], m[3])))
    for i, ((name, p), recorded) in enumerate(zip(settings, recordings)):
        n = recorded.actions.shape[1]
        for mode, how in ((0, "vmap"), (1, "single")):
            per_step = [outputs[i][t][mode] for t in range(n)]
            stacked = tuple(np.stack([np.asarray(x[j]) for x in per_step], axis=1) for j in range(3))
            out = (np.asarray(first[i][mode]), *stacked)
            assert_exact(f"{name}, {how}, params closed over", recorded, out, columns)

        if not eager(name):
            continue
        one = recorded.episode(0)
        state = jax.tree.map(lambda x: x[0], recorded.states)
        eager_step = lambda s, a: env.step(key, s, int(a), p)  # noqa: E731
        out = lamella_rollout(eager_step, env.get_obs(state, p), state, one.actions[0])
        assert_exact(f"{name}, eager", one, out, columns)


def answer_policy() -> Callable[[Any, int], int]:
    """MemoryChain: the right answer on even episodes, the wrong one on odd (both rewards occur)."""
    return lambda bs, episode: int(bs._context[bs._query]) ^ (episode % 2)


def test_memory_chain_exact_over_bsuite_sweep() -> None:
    """memory_len sweep (num_bits 1) and a memory_size point (num_bits 4, length 2): bit-exact."""
    memory_chain = pytest.importorskip("bsuite.environments.memory_chain")
    for num_bits, lengths in ((1, SWEEP_LENGTHS), (4, (2,))):
        env = lb.MemoryChain(num_bits=num_bits)
        settings, recordings = [], []
        for length in lengths:
            bs_env = memory_chain.MemoryChain(memory_length=length, num_bits=num_bits, seed=length)
            copy = lambda bs: lb.MemoryChainState(  # noqa: E731
                context=jnp.asarray(bs._context, jnp.int32), query=jnp.int32(bs._query), time=jnp.int32(0)
            )
            recordings.append(record_bsuite(bs_env, copy, answer_policy(), 4, length + 1))
            settings.append(
                (
                    f"MemoryChain(num_bits={num_bits}, memory_length={length})",
                    lb.MemoryChainParams(memory_length=length),
                )
            )
        check_all_modes(env, settings, recordings)


def test_umbrella_chain_exact_over_bsuite_sweep() -> None:
    """umbrella_length sweep (n_distractor 20): need/has/time-left columns and the final reward exact.

    The distractor columns and the noise rewards of non-final steps are random draws (checked
    statistically in test_umbrella_chain_random_parts).
    """
    umbrella_chain = pytest.importorskip("bsuite.environments.umbrella_chain")
    env = lb.UmbrellaChain(n_distractor=20)
    settings, recordings = [], []
    for length in SWEEP_LENGTHS:
        bs_env = umbrella_chain.UmbrellaChain(chain_length=length, n_distractor=20, seed=length)
        copy = lambda bs: lb.UmbrellaChainState(  # noqa: E731
            need_umbrella=jnp.int32(bs._need_umbrella),
            has_umbrella=jnp.int32(bs._has_umbrella),
            time=jnp.int32(0),
        )
        policy = lambda bs, episode: episode % 2  # noqa: E731  (both umbrella choices)
        final_only = lambda bs, ts: ts.last()  # noqa: E731
        recordings.append(record_bsuite(bs_env, copy, policy, 4, length, exact_reward=final_only))
        settings.append(
            (f"UmbrellaChain(chain_length={length})", lb.UmbrellaChainParams(chain_length=length))
        )
    check_all_modes(env, settings, recordings, columns=3, eager=lambda name: name.endswith(("=10)", "=100)")))


def test_other_bsuite_envs_exact_batched() -> None:
    """Catch, DeepSea (bsuite's sweep ends, sizes 10 and 50, mapping_seed 42), DiscountingChain and
    SimpleBandit (mapping seeds of their sweeps): bit-exact batched, closed over and single."""
    from bsuite.environments import bandit, catch, deep_sea, discounting_chain

    rng = np.random.default_rng(0)
    random_action = lambda n: lambda bs, episode: int(rng.integers(n))  # noqa: E731
    catch_policy = lambda bs, episode: (  # noqa: E731
        int(np.sign(bs._ball_x - bs._paddle_x)) + 1 if episode % 2 == 0 else int(rng.integers(3))
    )
    recordings = [record_bsuite(catch.Catch(seed=1), lambda bs: copy_catch(bs, None), catch_policy, 6, 9)]
    check_all_modes(lb.Catch(), [("Catch", lb.Catch().default_params)], recordings)

    for size in (10, 50):
        bs_env = deep_sea.DeepSea(size=size, deterministic=True, mapping_seed=42)
        env = lb.DeepSea(size=size, mapping_seed=42)

        def right(bs: Any, episode: int) -> int:  # "right" on even episodes: the treasure is reached
            return int(bs._action_mapping[bs._row, bs._column]) if episode % 2 == 0 else int(rng.integers(2))

        copy = lambda bs: copy_deep_sea(bs, None)  # noqa: E731
        recordings = [record_bsuite(bs_env, copy, right, 4, size)]
        check_all_modes(
            env, [(f"DeepSea(size={size})", env.default_params)], recordings, eager=lambda n: size == 10
        )

    settings, recordings = [], []
    for seed in range(5):  # bsuite takes mapping_seed % 5: seeds 0..19 repeat these five
        bs_env = discounting_chain.DiscountingChain(mapping_seed=seed)
        copy = lambda bs: lb.DiscountingChainState(context=jnp.int32(-1), time=jnp.int32(0))  # noqa: E731
        chain_policy = lambda bs, episode: episode % 5  # noqa: E731  (every chain)
        recordings.append(record_bsuite(bs_env, copy, chain_policy, 5, 100))
        settings.append(
            (f"DiscountingChain(mapping_seed={seed})", lb.DiscountingChainParams(mapping_seed=seed))
        )
    check_all_modes(DISCOUNTING, settings, recordings, eager=lambda name: name.endswith("=0)"))

    settings, recordings = [], []
    for seed in range(20):
        bs_env = bandit.SimpleBandit(mapping_seed=seed)
        recordings.append(
            record_bsuite(bs_env, lambda bs: BANDIT.reset(jax.random.key(0))[1], random_action(11), 4, 1)
        )
        settings.append(
            (f"SimpleBandit(mapping_seed={seed})", lb.SimpleBandit(mapping_seed=seed).default_params)
        )
    check_all_modes(BANDIT, settings, recordings, eager=lambda name: name.endswith("=0)"))
