"""The test kit itself: how many programs ``check_env`` compiles, and what its fast options do."""

from __future__ import annotations

import jax
import numpy as np

import lamella.envs as le
from lamella.envs import testing

# Backend compiles seen while ``_COUNTING`` holds a list (a listener cannot be removed again).
_COUNTING: list[list[str]] = []


def _count(event: str, duration: float, **_: object) -> None:
    if _COUNTING and event == "/jax/core/compile/backend_compile_duration":
        _COUNTING[-1].append(event)


jax.monitoring.register_event_duration_secs_listener(_count)


def test_check_env_compiles_at_most_six_programs():
    """reset, step, the action sample, the two spaces' ``contains`` and one program for every
    batched check (batched reset, sample, step, reset_done, the single envs' inputs and the
    frame): it compiled eleven before they were one."""
    # A first run compiles the eager operations on keys (cached for the process); the second,
    # on a new env object, compiles only check_env's own programs.
    testing.check_env(*le.make("CartPole-v1"), num_steps=4, num_envs=2)
    env, params = le.make("CartPole-v1")
    _COUNTING.append([])
    try:
        testing.check_env(env, params, num_steps=4, num_envs=2)
    finally:
        compiles = _COUNTING.pop()
    assert 1 <= len(compiles) <= 6, len(compiles)


def test_fast_options_compile_and_agree_within_check_envs_tolerance():
    """The options compile on this jax (the backend level 0 included), and a batch of CartPole
    steps compiled with them agrees with the default compile to check_env's tolerance: they
    may reorder float arithmetic (last bits), never change what is computed."""
    fast = testing.fast_compile_options()
    assert fast.get("xla_backend_optimization_level") == 0
    env, params = le.make("CartPole-v1")

    def run(keys):
        _, state = jax.vmap(lambda k: env.reset(k, params))(keys)
        out = jax.vmap(lambda k, s: env.step(k, s, 1, params))(keys, state)
        return jax.vmap(lambda k, s: env.step(k, s, 0, params))(keys, out[1])[:5]

    keys = jax.random.split(jax.random.key(0), 64)
    default = jax.jit(run)(keys)
    quick = jax.jit(run, compiler_options=fast)(keys)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5), quick, default)


class _AgentsInOneVector(le.wrappers.FlattenObservation):
    """FlattenObservation as it was: every agent's observation in one vector, the agent axis lost."""

    def _rows(self) -> tuple[int, ...]:
        return ()


def test_check_env_refuses_a_multi_agent_observation_without_the_agent_axis():
    env, params = le.make("IteratedPrisonersDilemma-v0", autoreset=False)
    testing.check_env(le.wrappers.FlattenObservation(env), params, num_steps=2, num_envs=2)
    try:
        testing.check_env(_AgentsInOneVector(env), params, num_steps=2, num_envs=2)
    except AssertionError as error:
        assert "without the leading agent axis of 2 agents" in str(error), error
    else:
        raise AssertionError("check_env passed an observation without the agent axis")
