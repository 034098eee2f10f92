"""The episode buffer's bookkeeping, whole-episode sampling and argument checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.buffers as lb

# env 0: episodes [0, 2], [3, 5], [6, 7 running];  env 1: [0, 1], [2, 3], [4, 5], [6, 7].
DONE = np.array([[0, 0, 1, 0, 0, 1, 0, 0], [0, 1, 0, 1, 0, 1, 0, 1]], bool)
T = 6


def stream(done, agents=None):
    num_envs, steps = done.shape
    time = np.arange(steps, dtype=np.float32) + 100 * np.arange(num_envs, dtype=np.float32)[:, None]
    flags = jnp.asarray(done) if agents is None else jnp.repeat(jnp.asarray(done)[..., None], agents, -1)
    return lb.Transition(
        obs=jnp.asarray(time),
        action=jnp.asarray(time[..., None] * jnp.ones(2)),
        reward=jnp.asarray(time + 0.25),
        terminated=flags,
        truncated=jnp.zeros_like(flags),
        next_obs=jnp.asarray(time + 0.5),
    )


@pytest.fixture(scope="module")
def buffer():
    return lb.make_episode_buffer(num_envs=2, max_length_time_axis=T, sample_batch_size=4096)


def fill(buffer, data, chunk):
    add = jax.jit(buffer.add)
    state = buffer.init(jax.tree.map(lambda x: x[0, 0], data))
    for lo in range(0, data.reward.shape[1], chunk):
        state = add(state, jax.tree.map(lambda x: x[:, lo : lo + chunk], data))
    return state


@pytest.fixture(scope="module")
def state(buffer):
    return fill(buffer, stream(DONE), chunk=4)


def test_episode_table_by_hand(state):
    assert int(state.steps_added) == 8
    # Slots hold steps 6, 7, 2, 3, 4, 5 (absolute time t lives at t % 6).
    np.testing.assert_array_equal(state.episode_id, [[2, 2, 0, 1, 1, 1], [3, 3, 1, 1, 2, 2]])
    running = np.iinfo(np.int32).max
    np.testing.assert_array_equal(state.episode_start[0, :3], [0, 3, 6])
    np.testing.assert_array_equal(state.episode_end[0, :3], [2, 5, running])
    np.testing.assert_array_equal(state.episode_start[1, :4], [0, 2, 4, 6])
    np.testing.assert_array_equal(state.episode_end[1, :4], [1, 3, 5, 7])
    np.testing.assert_array_equal(state.episode_over, [False, True])
    np.testing.assert_array_equal(state.trajectory.experience.obs[0], [6, 7, 2, 3, 4, 5])


def test_donated_add_from_a_fresh_state(buffer):
    data = stream(DONE)
    fresh = buffer.init(jax.tree.map(lambda x: x[0, 0], data))
    old_leaves = jax.tree.leaves(fresh)
    new = jax.jit(buffer.add, donate_argnums=0)(fresh, jax.tree.map(lambda x: x[:, :4], data))
    assert all(x.is_deleted() for x in old_leaves)  # updated in place, nothing copied
    assert int(new.steps_added) == 4


def test_chunking_does_not_matter(buffer, state):
    one_by_one = fill(buffer, stream(DONE), chunk=1)
    jax.tree.map(np.testing.assert_array_equal, one_by_one, state)


def test_agent_axis_ends_episode_when_all_agents_done(buffer, state):
    multi = fill(buffer, stream(DONE, agents=3), chunk=4)
    np.testing.assert_array_equal(multi.episode_id, state.episode_id)
    np.testing.assert_array_equal(multi.episode_end, state.episode_end)


def test_uniform_transition_sample(buffer, state):
    out = jax.device_get(jax.jit(buffer.sample)(state, jax.random.key(0)))
    env, time = np.divmod(out.obs.astype(int), 100)
    assert set(time) == set(range(2, 8)) and set(env) == {0, 1}
    counts = np.bincount(env * 8 + time, minlength=16)[[*range(2, 8), *range(10, 16)]]
    assert counts.min() > 4096 / 12 * 0.75
    np.testing.assert_array_equal(out.next_obs, out.obs + 0.5)
    assert bool(buffer.can_sample(state))


@pytest.fixture(scope="module")
def episode_samplers(buffer):
    return {
        complete_only: jax.jit(
            lb.make_episode_sampler(buffer, max_episode_length=4, complete_only=complete_only)
        )
        for complete_only in (True, False)
    }


@pytest.mark.parametrize("complete_only", [True, False])
def test_whole_episodes_padded(state, episode_samplers, complete_only):
    sample = episode_samplers[complete_only]
    out = jax.device_get(sample(state, jax.random.key(1)))
    expected = {(0, 3): 3, (1, 2): 2, (1, 4): 2, (1, 6): 2}  # (env, start) -> length
    if not complete_only:
        expected[(0, 6)] = 2  # still running
    got = list(zip(out.env_index.tolist(), out.start.tolist()))
    assert set(got) == set(expected)  # [0, 2] of env 0 lost its first steps: never sampled
    counts = np.array([got.count(k) for k in expected])
    assert counts.min() > 4096 / len(expected) * 0.8  # uniform over episodes, not steps
    for i, (env, start) in enumerate(got):
        length = expected[(env, start)]
        assert out.length[i] == length
        np.testing.assert_array_equal(out.mask[i], np.arange(4) < length)
        steps = 100 * env + start + np.arange(length)
        np.testing.assert_array_equal(out.transition.obs[i, :length], steps)
        np.testing.assert_array_equal(out.transition.reward[i, :length], steps + 0.25)
        assert (out.transition.obs[i, length:] == 0).all() and (out.transition.action[i, length:] == 0).all()


def test_long_episodes_are_cut_to_max_length(buffer, state):
    out = jax.device_get(
        jax.jit(lb.make_episode_sampler(buffer, max_episode_length=2, batch_size=64))(
            state, jax.random.key(2)
        )
    )
    assert (out.length == 2).all() and out.mask.all()
    np.testing.assert_array_equal(out.transition.obs[:, 1], out.transition.obs[:, 0] + 1)


def test_empty_buffer_gives_empty_episodes(buffer, episode_samplers):
    empty = buffer.init(jax.tree.map(lambda x: x[0, 0], stream(DONE)))
    assert not bool(buffer.can_sample(empty))
    out = episode_samplers[True](empty, jax.random.key(0))
    assert not out.mask.any() and (out.length == 0).all()


def test_bad_arguments_fail_early(buffer, state):
    with pytest.raises(ValueError, match="num_envs"):
        lb.make_episode_buffer(num_envs=0, max_length_time_axis=4, sample_batch_size=2)
    with pytest.raises(ValueError, match="min_length_time_axis"):
        lb.make_episode_buffer(
            num_envs=1, max_length_time_axis=4, sample_batch_size=2, min_length_time_axis=5
        )
    with pytest.raises(TypeError, match="transition_like"):
        buffer.init({"obs": jnp.zeros(3)})
    one_step = jax.tree.map(lambda x: x[:, 0], stream(DONE))
    with pytest.raises(ValueError, match="time axis"):
        buffer.add(state, one_step)
    with pytest.raises(ValueError, match="n"):
        lb.make_n_step_sampler(buffer, n=T + 1, gamma=0.9)
    with pytest.raises(ValueError, match="gamma"):
        lb.make_n_step_sampler(buffer, n=2, gamma=1.5)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (  # flashbax broadcast the (1,) actions into the (2,) slots
            lambda data: data.replace(action=data.action[..., :1]),
            r"field \.action has shape \(2, 4, 1\), expected \(num_envs, steps\) \+ \(2,\)",
        ),
        (  # a batched example given to init: an internal broadcasting error at the first add
            lambda data: data.replace(obs=data.obs[..., None]),
            r"field \.obs has shape \(2, 4, 1\), expected \(num_envs, steps\) \+ \(\)",
        ),
        (
            lambda data: data.replace(obs=data.obs.astype(jnp.int32)),
            r"field \.obs has dtype int32, expected float32",
        ),
    ],
    ids=["trailing shape", "extra axis", "dtype"],
)
def test_add_refuses_a_batch_unlike_the_example(buffer, state, change, match):
    batch = change(jax.tree.map(lambda x: x[:, :4], stream(DONE)))
    with pytest.raises(ValueError, match=rf"add got a batch unlike the example given to init: .*{match}"):
        jax.eval_shape(buffer.add, state, batch)
