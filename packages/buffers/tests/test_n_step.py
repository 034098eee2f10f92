"""n-step returns: hand-computed windows, and sampling across the circular buffer's wrap-around."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.buffers as lb

GAMMA = 0.5


def window(rewards, terminated, truncated):
    n = len(rewards)
    obs = jnp.arange(n, dtype=jnp.float32) * 10
    return lb.Transition(
        obs=obs,
        action=jnp.arange(n),
        reward=jnp.asarray(rewards, jnp.float32),
        terminated=jnp.asarray(terminated, bool),
        truncated=jnp.asarray(truncated, bool),
        next_obs=obs + 1,
    )


N_STEP_JIT = jax.jit(lb.n_step_transition)

# (rewards, terminated, truncated, valid) -> (reward, discount, steps, next_obs); gamma = 0.5.
CASES = {
    "no_end": ([1, 2, 4, 8], [0, 0, 0, 0], [0, 0, 0, 0], None, (1 + 1 + 1 + 1, 0.0625, 4, 31.0)),
    "terminated_inside": ([1, 2, 4, 8], [0, 1, 0, 0], [0, 0, 0, 0], None, (1 + 0.5 * 2, 0.0, 2, 11.0)),
    "truncated_inside": ([1, 2, 4, 8], [0, 0, 0, 0], [0, 1, 0, 0], None, (1 + 0.5 * 2, 0.25, 2, 11.0)),
    "terminated_first": ([3, 2, 4, 8], [1, 0, 0, 0], [0, 0, 0, 0], None, (3.0, 0.0, 1, 1.0)),
    "truncated_first": ([3, 2, 4, 8], [0, 0, 0, 0], [1, 0, 0, 0], None, (3.0, 0.5, 1, 1.0)),
    "both_flags_terminate": ([1, 2, 4, 8], [0, 1, 0, 0], [0, 1, 0, 0], None, (2.0, 0.0, 2, 11.0)),
    "terminated_last": ([1, 2, 4, 8], [0, 0, 0, 1], [0, 0, 0, 0], None, (4.0, 0.0, 4, 31.0)),
    "truncated_then_terminated": ([1, 2, 4, 8], [0, 0, 1, 0], [0, 1, 0, 0], None, (2.0, 0.25, 2, 11.0)),
    "invalid_tail": ([1, 2, 4, 8], [0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0], (1.0, 0.5, 1, 1.0)),
    "end_after_valid": ([1, 2, 4, 8], [0, 0, 0, 1], [0, 0, 0, 0], [1, 1, 0, 0], (2.0, 0.25, 2, 11.0)),
}


def check_case(n_step, case):
    rewards, terminated, truncated, valid, expected = CASES[case]
    valid = jnp.ones(len(rewards), bool) if valid is None else jnp.asarray(valid, bool)
    out = n_step(window(rewards, terminated, truncated), GAMMA, valid)
    reward, discount, steps, next_obs = expected
    assert float(out.reward) == pytest.approx(reward)
    assert float(out.discount) == pytest.approx(discount)
    assert int(out.steps) == steps
    assert float(out.next_obs) == next_obs
    assert float(out.obs) == 0.0 and int(out.action) == 0


@pytest.mark.parametrize("case", CASES.keys())
def test_hand_computed_jit(case):
    check_case(N_STEP_JIT, case)


@pytest.mark.parametrize("case", ["terminated_inside", "truncated_inside", "invalid_tail"])
def test_hand_computed_eager(case):
    check_case(lb.n_step_transition, case)


def test_valid_defaults_to_all_steps():
    out = lb.n_step_transition(window([1, 2], [0, 0], [0, 0]), GAMMA)
    assert float(out.reward) == 2.0 and float(out.discount) == 0.25


def test_rejects_batched_input():
    seq = window([1, 2], [0, 0], [0, 0])
    batched = jax.tree.map(lambda x: jnp.stack([x, x]), seq)
    with pytest.raises(ValueError, match="vmap"):
        lb.n_step_transition(batched, GAMMA)


def reference(rewards, terminated, truncated, t, n, newest, gamma):
    """Plain-Python n-step target of one env's stream from absolute time t."""
    total, k = 0.0, 0
    while True:
        total += gamma**k * rewards[t + k]
        k += 1
        if terminated[t + k - 1]:
            return total, 0.0, k
        if truncated[t + k - 1] or k == n or t + k - 1 == newest:
            return total, gamma**k, k


def test_flashbax_trajectory_windows_wrap_around():
    """A plain flashbax trajectory buffer sample, reduced with vmap(n_step_transition)."""
    T, n, steps = 8, 3, 12  # 12 steps into 8 slots: the newest 8 wrap around
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=steps).astype(np.float32)
    terminated = rng.random(steps) < 0.2
    truncated = rng.random(steps) < 0.2
    buffer = lb.make_trajectory_buffer(
        num_envs=1, max_length_time_axis=T, sample_batch_size=64, sample_sequence_length=n
    )
    data = lb.Transition(
        obs=jnp.arange(steps, dtype=jnp.float32),
        action=jnp.zeros(steps),
        reward=jnp.asarray(rewards),
        terminated=jnp.asarray(terminated),
        truncated=jnp.asarray(truncated),
        next_obs=jnp.arange(steps, dtype=jnp.float32) + 0.5,
    )
    state = buffer.init(jax.tree.map(lambda x: x[0], data))
    add = jax.jit(buffer.add)
    for lo in range(0, steps, 4):
        state = add(state, jax.tree.map(lambda x: x[None, lo : lo + 4], data))
    sample = jax.jit(
        lambda state, key: jax.vmap(lb.n_step_transition, in_axes=(0, None))(
            buffer.sample(state, key).experience, GAMMA
        )
    )
    out = jax.device_get(sample(state, jax.random.key(0)))
    starts = np.asarray(out.obs).astype(int)
    assert set(starts) <= set(range(steps - T, steps - n + 1)) and len(set(starts)) > 2
    for i, t in enumerate(starts):
        reward, discount, k = reference(rewards, terminated, truncated, t, n, steps - 1, GAMMA)
        assert float(out.reward[i]) == pytest.approx(reward, rel=1e-6)
        assert float(out.discount[i]) == pytest.approx(discount)
        assert float(out.next_obs[i]) == t + k - 1 + 0.5


def test_episode_buffer_sampler_wrap_around():
    """Every stored start, including the newest steps, against the reference."""
    num_envs, T, n, steps = 2, 8, 4, 18
    rng = np.random.default_rng(1)
    rewards = rng.normal(size=(num_envs, steps)).astype(np.float32)
    terminated = rng.random((num_envs, steps)) < 0.15
    truncated = rng.random((num_envs, steps)) < 0.15
    # obs encodes (env, time) as 100 * env + time.
    time = np.arange(steps, dtype=np.float32) + 100 * np.arange(num_envs, dtype=np.float32)[:, None]
    data = lb.Transition(
        obs=jnp.asarray(time),
        action=jnp.zeros((num_envs, steps)),
        reward=jnp.asarray(rewards),
        terminated=jnp.asarray(terminated),
        truncated=jnp.asarray(truncated),
        next_obs=jnp.asarray(time + 0.5),
    )
    buffer = lb.make_episode_buffer(num_envs=num_envs, max_length_time_axis=T, sample_batch_size=256)
    state = buffer.init(jax.tree.map(lambda x: x[0, 0], data))
    add = jax.jit(buffer.add)
    for lo in range(0, steps, 6):
        state = add(state, jax.tree.map(lambda x: x[:, lo : lo + 6], data))
    sampler = jax.jit(lb.make_n_step_sampler(buffer, n=n, gamma=GAMMA))
    out = jax.device_get(sampler(state, jax.random.key(3)))
    env, starts = np.divmod(np.asarray(out.obs).astype(int), 100)
    assert set(starts) == set(range(steps - T, steps))  # all stored starts, none older
    assert set(env) == {0, 1}
    for i, (e, t) in enumerate(zip(env, starts)):
        reward, discount, k = reference(rewards[e], terminated[e], truncated[e], t, n, steps - 1, GAMMA)
        assert float(out.reward[i]) == pytest.approx(reward, rel=1e-6)
        assert float(out.discount[i]) == pytest.approx(discount)
        assert int(out.steps[i]) == k
        assert float(out.next_obs[i]) == 100 * e + t + k - 1 + 0.5
