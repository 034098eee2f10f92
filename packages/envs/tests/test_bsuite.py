"""bsuite envs: conformance, step-by-step parity with the ``bsuite`` package, hand-computed rewards."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs as le
from lamella.envs import bsuite as lb
from lamella.envs.testing import check_env

BSUITE_IDS = ["MemoryChain-bsuite"]


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
    env, params = le.make(env_id, autoreset=False)
    _, states = jax.vmap(lambda k: env.reset(k, params))(jax.random.split(jax.random.key(0), 3))
    frames = jax.jit(jax.vmap(lambda s: env.render(s, params)))(states)
    single = env.render(jax.tree.map(lambda x: x[0], states), params)
    assert frames.dtype == jnp.uint8 and frames.shape == (3, *single.shape) and single.shape[-1] == 3
    np.testing.assert_array_equal(frames[0], single)


# Parity harness ---------------------------------------------------------------------------


def run_parity(
    bs_env: Any,
    env: Any,
    params: Any,
    copy_state: Callable[[Any, Any], Any],
    reset_fn: Any,
    step_fn: Any,
    num_episodes: int,
    rng: np.random.Generator,
    num_actions: int,
) -> int:
    """Step bsuite and lamella side by side from bsuite's state; returns the number of steps compared.

    After each bsuite reset its internal state is copied into a lamella state
    (``copy_state(bs_env, lamella_state)``); then both take the same random
    actions and must return the same observation, reward and episode end
    (bsuite's last step with discount 0 == lamella's terminated).
    """
    key = jax.random.key(int(rng.integers(2**31)))
    compared = 0
    for _ in range(num_episodes):
        ts = bs_env.reset()
        key, k_reset = jax.random.split(key)
        _, state = reset_fn(k_reset, params)
        state = copy_state(bs_env, state)
        obs = env.get_obs(state, params) if hasattr(env, "get_obs") else None
        if obs is not None:
            np.testing.assert_array_equal(np.asarray(obs).ravel(), ts.observation.ravel())
        while True:
            action = int(rng.integers(num_actions))
            ts = bs_env.step(action)
            key, k_step = jax.random.split(key)
            obs, state, reward, terminated, truncated, _ = step_fn(k_step, state, jnp.int32(action), params)
            np.testing.assert_array_equal(np.asarray(obs).ravel(), ts.observation.ravel())
            np.testing.assert_allclose(float(reward), ts.reward, rtol=1e-6, atol=1e-7)
            assert bool(terminated) == (ts.last() and ts.discount == 0.0)
            assert not bool(truncated)
            compared += 1
            if ts.last():
                break
    return compared


# MemoryChain ------------------------------------------------------------------------------


@pytest.mark.parametrize(("memory_length", "num_bits"), [(1, 1), (5, 1), (3, 4)])
def test_memory_chain_parity(memory_length: int, num_bits: int, jitted: Any) -> None:
    from bsuite.environments import memory_chain

    env = lb.MemoryChain(num_bits=num_bits)
    params = lb.MemoryChainParams(memory_length=memory_length)
    reset_fn, step_fn = jitted(env)
    bs_env = memory_chain.MemoryChain(memory_length=memory_length, num_bits=num_bits, seed=3)

    def copy_state(bs: Any, state: Any) -> Any:
        return state.replace(
            context=jnp.asarray(bs._context, jnp.int32),
            query=jnp.int32(bs._query),
            time=jnp.int32(bs._timestep),
        )

    rng = np.random.default_rng(0)
    steps = run_parity(bs_env, env, params, copy_state, reset_fn, step_fn, 60, rng, 2)
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
