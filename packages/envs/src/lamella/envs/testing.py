"""A conformance check every lamella environment passes: :func:`check_env`."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import spaces
from lamella.envs._inputs import EnvInputError, _plain_value, env_label
from lamella.envs.environment import Environment

__all__ = [
    "ParityCoverage",
    "assert_parity_coverage",
    "assert_same_up_to_rounding",
    "check_env",
    "fast_compile_options",
]


_CONTAINS: dict[int, tuple[spaces.Space, Any]] = {}
_FAST_COMPILE: list[dict[str, Any]] = []


def fast_compile_options() -> dict[str, Any]:
    """``compiler_options`` for ``jax.jit`` that compile a test's programs faster (found once
    per process).

    A conformance or parity program runs a few steps, so compiling dominates its time: XLA's
    backend optimisation level 0 and, where the installed XLA still has them, its older CPU
    emitters (jax 0.12 dropped the option) compile a step in less time. They may reorder or
    contract float arithmetic, so float results can differ from a default compile in the last
    bits (CartPole's state after two steps: up to 4e-5 relative); compile programs whose floats
    are compared exactly with the same options. An XLA that rejects an option gets the level
    alone, or no options. :func:`check_env` compiles with these (its single and batched
    programs alike).
    """
    if not _FAST_COMPILE:
        for options in (
            {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False},
            {"xla_backend_optimization_level": 0},
            {},
        ):
            try:
                jax.jit(lambda x: x + 1, compiler_options=options).lower(jnp.zeros(())).compile()
            except Exception:  # an option this XLA does not know: try fewer
                continue
            _FAST_COMPILE.append(options)
            break
    return _FAST_COMPILE[0]


def assert_same_up_to_rounding(got: Any, want: Any, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """Two pytrees of the same structure: integer and bool leaves equal, float leaves equal up to
    ``rtol`` / ``atol``. For two programs that compute the same values but are fused differently
    by XLA (a branch, an unrolled loop): its CPU backend makes ``a*b+c`` one FMA inside a fusion,
    so floats can round apart in the last bits."""

    def check(a: Any, b: Any) -> None:
        a, b = np.asarray(a), np.asarray(b)
        if np.issubdtype(a.dtype, np.floating):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(a, b)

    jax.tree.map(check, got, want)


def _contains(space: spaces.Space) -> Any:
    """``space.contains`` jitted, once per space: eagerly, each of its few operations compiles on
    its own for every new shape (a dozen small compiles per env, most of check_env's cost on a
    small env)."""
    cached = _CONTAINS.get(id(space))
    if cached is None or cached[0] is not space:
        cached = _CONTAINS[id(space)] = (
            space,
            jax.jit(space.contains, compiler_options=fast_compile_options()),
        )
    return cached[1]


def _assert_in_space(space: spaces.Space, value: Any, what: str) -> None:
    if isinstance(space, spaces.Dict):
        assert isinstance(value, dict) and set(value) == set(space.spaces), (
            f"{what}: keys {set(value)} != {set(space.spaces)}"
        )
        for name, sub in space.spaces.items():
            _assert_in_space(sub, value[name], f"{what}[{name!r}]")
        return
    if isinstance(space, spaces.Tuple):
        for i, (sub, v) in enumerate(zip(space.spaces, value)):
            _assert_in_space(sub, v, f"{what}[{i}]")
        return
    value = jnp.asarray(value)
    assert value.shape == space.shape, f"{what}: shape {value.shape} != space shape {space.shape}"
    assert value.dtype == space.dtype, f"{what}: dtype {value.dtype} != space dtype {space.dtype}"
    assert bool(_contains(space)(value)), f"{what}: {value} is outside {space!r}"


def _values(x: Any) -> np.ndarray:
    """``x`` as a NumPy array (a typed PRNG key array as its key data)."""
    if jnp.issubdtype(jnp.asarray(x).dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(x))
    return np.asarray(x)


def _wrong_action(space: spaces.Space, action: Any, kind: str) -> Any:
    """``action`` (a valid one) with the shape or dtype of its first leaf made wrong."""
    if isinstance(space, spaces.Dict):
        first = next(iter(space.spaces))
        return {**action, first: _wrong_action(space.spaces[first], action[first], kind)}
    if isinstance(space, spaces.Tuple):
        return (_wrong_action(space.spaces[0], action[0], kind), *action[1:])
    action = jnp.asarray(action)
    if kind == "shape":
        return jnp.stack([action, action], axis=-1)  # one trailing axis too many
    if jnp.issubdtype(space.dtype, jnp.integer):
        return action.astype(jnp.float32) + 0.5  # a float for an integer space
    return action > 0  # a bool for a real-valued space


def _assert_kept(new: np.ndarray, old: np.ndarray) -> None:
    """``new`` is ``old`` kept (where ``reset_done`` did not reset): equal, or for floats at most
    2 ulps apart. XLA may compute a value twice in one program, in two fusions whose roundings
    differ (GMazeGoalDubins-v0 under AutoReset with
    ``XLA_FLAGS=--xla_cpu_parallel_codegen_split_count=1``, jax 0.10.2: one entry one float32
    ulp apart, the optimisation barrier above notwithstanding); a fresh reset differs by far more."""
    if np.issubdtype(new.dtype, np.floating):
        np.testing.assert_array_max_ulp(new, old, maxulp=2)
    else:
        np.testing.assert_array_equal(new, old)


def _check_input_errors(
    env: Environment[Any, Any],
    params: Any,
    key: jax.Array,
    state: Any,
    act_space: spaces.Space,
    action: Any,
    num_envs: int,
    obs: Any,
) -> None:
    """A wrong action shape or dtype, a non-key, the observation ``obs`` given as the state
    (where the state is a dataclass; to ``step``, and swapped with it to ``reset_done``), a batch of states or params given outside ``vmap``
    fail while tracing with :class:`EnvInputError`.

    Traced with ``jax.eval_shape`` (nothing is compiled), single and under ``vmap``; ``action``
    is a valid action.
    """
    cases = {
        "a wrongly shaped action": lambda: env.step(
            key, state, _wrong_action(act_space, action, "shape"), params
        ),
        "a wrong action dtype": lambda: env.step(
            key, state, _wrong_action(act_space, action, "dtype"), params
        ),
        "an int seed as the step key": lambda: env.step(12345, state, action, params),  # type: ignore[arg-type]
        "an int seed as the reset key": lambda: env.reset(12345, params),  # type: ignore[arg-type]
        "a batch of keys outside vmap": lambda: env.reset(jax.random.split(key, 2), params),
    }
    if not _plain_value(state):  # an env state that is a dataclass, as every built-in one
        cases["the observation as the state"] = lambda: env.step(key, obs, action, params)
        cases["reset_done given (obs, state), swapped"] = lambda: env.reset_done(
            key, jnp.bool_(True), obs, state, params
        )
    keys = jax.random.split(key, num_envs)

    def batch(tree: Any) -> Any:  # called while tracing: nothing is compiled
        return jax.tree.map(lambda x: jnp.broadcast_to(x, (num_envs, *jnp.shape(x))), tree)

    # A batch outside vmap: of a size no axis of the env has, so that broadcasting cannot pair it
    # with an agent or grid axis. Accepted only where the step ignores it (its outputs unbatched).
    sizes = {
        int(n)
        for tree in (state, params, action, obs)
        for leaf in jax.tree.leaves(tree)
        for n in np.shape(leaf)
    }
    size = next(n for n in range(3, 1000) if n not in sizes)
    one_env = [
        np.shape(leaf)
        for leaf in jax.tree.leaves(jax.eval_shape(lambda: env.step(key, state, action, params)))
    ]

    def broadcast(tree: Any) -> Any:
        return jax.tree.map(lambda x: jnp.broadcast_to(x, (size, *jnp.shape(x))), tree)

    batch_cases = {"a batch of states outside vmap": lambda: env.step(key, broadcast(state), action, params)}
    if jax.tree.leaves(params):
        batch_cases["a batch of params outside vmap"] = lambda: env.step(
            key, state, action, broadcast(params)
        )

    vmapped = jax.vmap(lambda k, s, a: env.step(k, s, a, params))
    cases["a wrongly shaped action under vmap"] = lambda: vmapped(
        keys, batch(state), jax.vmap(lambda a: _wrong_action(act_space, a, "shape"))(batch(action))
    )
    cases["a wrong action dtype under vmap"] = lambda: vmapped(
        keys, batch(state), jax.vmap(lambda a: _wrong_action(act_space, a, "dtype"))(batch(action))
    )
    # The valid inputs trace (a check that refuses everything would pass the cases below).
    jax.eval_shape(lambda: env.step(key, state, action, params))
    jax.eval_shape(lambda: vmapped(keys, batch(state), batch(action)))
    jax.eval_shape(lambda: env.step(jax.random.PRNGKey(0), state, action, params))  # legacy raw key
    for what, call in {**cases, **batch_cases}.items():
        try:
            out = jax.eval_shape(call)
        except EnvInputError as error:
            message = str(error)
            assert env_label(env) in message, f"{what}: the error does not name the env: {message}"
            continue
        if what in batch_cases and [np.shape(leaf) for leaf in jax.tree.leaves(out)] == one_env:
            continue  # the step does not read what was batched: nothing was stepped twice
        raise AssertionError(f"{env_label(env)}: {what} was accepted; it must raise EnvInputError")


def _assert_agent_axis(env: Any, tree: Any, what: str) -> None:
    """A multi-agent env's observations and actions lead with the agent axis, every leaf of them."""
    if env.num_agents <= 1:
        return
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        shape = jnp.shape(leaf)
        assert shape[:1] == (env.num_agents,), (
            f"{type(env).__name__}: {what}{jax.tree_util.keystr(path)} has shape {shape}, without the "
            f"leading agent axis of {env.num_agents} agents (the multi-agent contract: (num_agents, ...))"
        )


def check_env(
    env: Environment[Any, Any],
    params: Any = None,
    num_steps: int = 64,
    num_envs: int = 4,
    seed: int = 0,
) -> None:
    """Check that ``env`` keeps the lamella contract; raises AssertionError otherwise.

    Checks: ``reset``/``step`` run under jit and vmap and agree (the jitted single and batched
    reset are separate traces, so values drawn while tracing show); observations
    and actions match their spaces (shape, dtype, bounds); observations, actions, rewards and
    flags have the agent axis (if any: every leaf of a multi-agent env's observation and action
    leads with ``num_agents``) and the right dtypes; ``info`` has the same
    structure on every step; the jitted step does not re-trace on a second
    call; ``reset_done`` resets exactly where asked; ``render`` (if the env has
    one) returns an RGB uint8 frame; a wrongly shaped action, a wrong action
    dtype and a key that is not a PRNG key (an int seed, a batch of keys) raise
    :class:`~lamella.envs.EnvInputError` naming the env, alone and under ``vmap``, and so does
    the observation given as the state.
    """
    params = env.default_params if params is None else params
    obs_space, act_space = env.observation_space(params), env.action_space(params)
    agent_shape = (env.num_agents,) if env.num_agents > 1 else ()
    traces = {"reset": 0, "step": 0}

    def reset(key: jax.Array) -> Any:
        traces["reset"] += 1
        return env.reset(key, params)

    def step(key: jax.Array, state: Any, action: Any) -> Any:
        traces["step"] += 1
        return env.step(key, state, action, params)

    fast = fast_compile_options()
    reset_jit, step_jit = jax.jit(reset, compiler_options=fast), jax.jit(step, compiler_options=fast)
    key = jax.random.key(seed)
    key, k_reset = jax.random.split(key)
    obs, state = reset_jit(k_reset)
    _assert_in_space(obs_space, obs, "reset observation")
    _assert_agent_axis(env, obs, "observation")
    _assert_agent_axis(env, jax.eval_shape(act_space.sample, key), "action_space.sample()")

    info_structure = None
    sample = jax.jit(act_space.sample, compiler_options=fast)  # eager sampling compiles dozens of small ops
    for t in range(num_steps):
        key, k_act, k_step = jax.random.split(key, 3)
        action = sample(k_act)
        _assert_in_space(act_space, action, "action_space.sample()")
        obs, state, reward, terminated, truncated, info = step_jit(k_step, state, action)
        _assert_in_space(obs_space, obs, f"step {t} observation")
        assert jnp.shape(reward) == agent_shape, f"reward shape {jnp.shape(reward)} != {agent_shape}"
        assert jnp.issubdtype(jnp.asarray(reward).dtype, jnp.floating), "reward must be a float"
        for flag_name, flag in (("terminated", terminated), ("truncated", truncated)):
            assert jnp.shape(flag) == agent_shape, f"{flag_name} shape {jnp.shape(flag)} != {agent_shape}"
            assert jnp.asarray(flag).dtype == jnp.bool_, (
                f"{flag_name} must be bool, got {jnp.asarray(flag).dtype}"
            )
        assert np.all(np.isfinite(np.asarray(reward))), f"step {t}: non-finite reward {reward}"
        structure = jax.tree.structure(info)
        assert info_structure is None or info_structure == structure, "info changes structure between steps"
        info_structure = structure
        if bool(np.all(np.asarray(terminated) | np.asarray(truncated))) and "final_observation" not in info:
            key, k_reset = jax.random.split(key)
            obs, state = reset_jit(k_reset)
    assert traces == {"reset": 1, "step": 1}, f"jitted functions re-traced: {traces}"

    # vmap over keys/states/actions and agreement with the unbatched reset and step. (The batched
    # reset is a second trace of ``reset``: values drawn while tracing, e.g. from NumPy, differ.)
    # The batched reset, sample, step and reset_done, the single envs' inputs and the frame are
    # one program (one compile instead of six), checked as before on the same values.
    keys = jax.random.split(key, num_envs + 1)
    step_keys = jax.random.split(keys[-1], num_envs)
    reset_keys = jax.random.split(keys[0], num_envs)
    done = np.arange(num_envs) % 2 == 0
    try:
        jax.eval_shape(lambda s: env.render(s, params), state)
        renders = True
    except NotImplementedError:
        renders = False

    @functools.partial(jax.jit, compiler_options=fast)
    def batched(reset_keys_both: jax.Array, step_keys: jax.Array, done: jax.Array, state: Any) -> Any:
        # The first num_envs keys start the batch, the last num_envs are the fresh resets that
        # reset_done must give where done.
        both_obs, both_state = jax.vmap(lambda k: env.reset(k, params))(reset_keys_both)
        batch_obs, batch_state = jax.tree.map(lambda x: x[:num_envs], (both_obs, both_state))
        fresh_obs = jax.tree.map(lambda x: x[num_envs:], both_obs)
        actions = jax.vmap(act_space.sample)(step_keys)
        batch_out = jax.vmap(lambda k, s, a: env.step(k, s, a, params))(step_keys, batch_state, actions)
        # reset_done gets the step's outputs as computed once: without the barrier XLA may
        # compute the step's observation a second time inside reset_done's select, in another
        # fusion whose float rounding can differ by an ulp (GMazeGoalDubins on jax 0.11.2). The
        # program's own output of the step may still be such a second computation (see
        # _assert_kept).
        stepped_state, stepped_obs = jax.lax.optimization_barrier((batch_out[1], batch_out[0]))
        new_obs, _ = jax.vmap(lambda k, d, s, o: env.reset_done(k, d, s, o, params))(
            reset_keys_both[num_envs:], done, stepped_state, stepped_obs
        )
        singles = [jax.tree.map(lambda x: x[i], (step_keys, batch_state, actions)) for i in range(num_envs)]
        frame = env.render(state, params) if renders else None
        return batch_obs, batch_state, fresh_obs, batch_out, new_obs, singles, frame

    batch_obs, batch_state, fresh_obs, batch_out, new_obs, singles, frame = batched(
        jnp.concatenate([keys[:num_envs], reset_keys]), step_keys, done, state
    )
    for i in range(num_envs):
        single_reset = reset_jit(keys[i])
        jax.tree.map(
            lambda a, b: np.testing.assert_allclose(_values(a)[i], _values(b), rtol=1e-5, atol=1e-5),
            (batch_obs, batch_state),
            single_reset,
        )
    for i in range(num_envs):
        single_out = step_jit(*singles[i])
        jax.tree.map(
            lambda a, b: np.testing.assert_allclose(np.asarray(a)[i], np.asarray(b), rtol=1e-4, atol=1e-5),
            batch_out[:5],
            single_out[:5],
        )

    # reset_done resets exactly where done.
    for new, fresh, old in zip(
        jax.tree.leaves(new_obs), jax.tree.leaves(fresh_obs), jax.tree.leaves(batch_out[0])
    ):
        np.testing.assert_array_equal(np.asarray(new)[::2], np.asarray(fresh)[::2])
        _assert_kept(np.asarray(new)[1::2], np.asarray(old)[1::2])

    _check_input_errors(env, params, k_reset, state, act_space, sample(k_reset), num_envs, obs)

    # Rendering, if the env has it.
    if renders:
        assert frame.ndim == 3 and frame.shape[-1] == 3 and frame.dtype == jnp.uint8, (
            f"render must return (H, W, 3) uint8, got {frame.shape} {frame.dtype}"
        )


class ParityCoverage(NamedTuple):
    """How many compared transitions of a parity test reached each kind of step."""

    transitions: int
    terminations: int
    truncations: int
    auto_resets: int
    nonzero_rewards: int


def assert_parity_coverage(
    env_name: str,
    *,
    terminated: Any,
    truncated: Any,
    reward: Any,
    auto_reset: Any,
    never_terminates: str | None = None,
    never_truncates: str | None = None,
    never_rewards: str | None = None,
    no_auto_reset: str | None = None,
) -> ParityCoverage:
    """Assert that the transitions a parity test compared reach every branch it claims to check.

    A parity test that compares lamella with a reference package passes whatever branches its
    transitions never reach, so it calls this with what it compared (the reference's values,
    already masked to the compared transitions; any agent axis is flattened):

    Args:
        env_name: named in the failure message.
        terminated, truncated: bool arrays, the reference's flags.
        reward: float array, the reference's rewards.
        auto_reset: bool array, True where the step ended an episode *and* the test compared
            lamella's auto-reset on it (the final observation against the reference's, the
            returned observation against a fresh reset).
        never_terminates, never_truncates, never_rewards, no_auto_reset: the reason, when the
            env legitimately has no such step (e.g. ``never_truncates="bsuite envs have no time
            limit"``). A reason given for a kind of step that did occur fails too, so reasons
            stay true.

    Returns:
        The counts, for tests that assert more (e.g. a minimum fraction).

    Raises:
        AssertionError: naming every kind of step that was never reached (and had no reason),
            and every reason contradicted by the transitions.
    """
    counts = ParityCoverage(
        transitions=int(np.size(np.asarray(terminated))),
        terminations=int(np.sum(np.asarray(terminated, bool))),
        truncations=int(np.sum(np.asarray(truncated, bool))),
        auto_resets=int(np.sum(np.asarray(auto_reset, bool))),
        nonzero_rewards=int(np.sum(np.asarray(reward) != 0)),
    )
    kinds = (
        ("terminations", counts.terminations, never_terminates, "never_terminates"),
        ("truncations", counts.truncations, never_truncates, "never_truncates"),
        ("auto-resets", counts.auto_resets, no_auto_reset, "no_auto_reset"),
        ("non-zero rewards", counts.nonzero_rewards, never_rewards, "never_rewards"),
    )
    missing = [name for name, count, reason, _ in kinds if count == 0 and reason is None]
    contradicted = [
        f"{arg}={reason!r} but {count} {name} occurred"
        for name, count, reason, arg in kinds
        if count and reason
    ]
    problems = []
    if missing:
        problems.append(
            f"the {counts.transitions} compared transitions never reached: {', '.join(missing)}. "
            "Use a scripted or goal-seeking policy, or start states near that branch; if the env "
            "legitimately has none, pass the reason (e.g. never_truncates='...')"
        )
    if contradicted:
        problems.append("; ".join(contradicted) + " (drop the reason)")
    assert not problems, f"{env_name} parity coverage: " + ". ".join(problems) + f". Counts: {counts}"
    return counts
