"""The flashbax buffer factories: argument checks, round trips, prioritised replay, donation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.buffers as lb

EXAMPLE = lb.transition_like(jnp.zeros(3), jnp.zeros((), jnp.int32))


def steps(num_envs, length, offset=0):
    """Transitions whose obs[..., 0] encodes 100 * env + time."""
    code = offset + np.arange(length, dtype=np.float32) + 100 * np.arange(num_envs, dtype=np.float32)[:, None]
    obs = jnp.asarray(code)[..., None] * jnp.ones(3)
    return lb.Transition(
        obs=obs,
        action=jnp.zeros((num_envs, length), jnp.int32),
        reward=jnp.asarray(code),
        terminated=jnp.zeros((num_envs, length), bool),
        truncated=jnp.zeros((num_envs, length), bool),
        next_obs=obs + 0.5,
    )


def test_item_buffer_batches_of_envs():
    buffer = lb.make_item_buffer(max_length=64, sample_batch_size=32, add_batches=True)
    state = buffer.init(EXAMPLE)
    add = jax.jit(buffer.add, donate_argnums=0)
    for t in range(3):
        state = add(state, jax.tree.map(lambda x: x[:, 0], steps(4, 1, offset=t)))
    assert bool(buffer.can_sample(jax.tree.map(jnp.asarray, state))) is False  # 12 < 32 items
    sample = jax.device_get(jax.jit(buffer.sample)(state, jax.random.key(0)).experience)
    env, time = np.divmod(sample.reward.astype(int), 100)
    assert set(time) <= {0, 1, 2} and set(env) <= {0, 1, 2, 3}
    np.testing.assert_array_equal(sample.next_obs, sample.obs + 0.5)


def test_donated_add_updates_in_place():
    buffer = lb.make_item_buffer(max_length=16, sample_batch_size=4, add_batches=True)
    state = buffer.init(EXAMPLE)
    old_obs = state.experience.obs
    new = jax.jit(buffer.add, donate_argnums=0)(state, jax.tree.map(lambda x: x[:, 0], steps(2, 1)))
    assert old_obs.is_deleted()  # the buffer was reused, not copied
    assert int(new.current_index) == 2


def test_flat_buffer_pairs_are_consecutive_steps():
    buffer = lb.make_flat_buffer(max_length=32, sample_batch_size=16, add_batch_size=2, add_sequences=True)
    state = jax.jit(buffer.add)(buffer.init(EXAMPLE), steps(2, 8))
    pair = jax.jit(buffer.sample)(state, jax.random.key(0)).experience
    np.testing.assert_array_equal(pair.second.reward, pair.first.reward + 1)


def test_trajectory_buffer_windows():
    buffer = lb.make_trajectory_buffer(
        num_envs=2, max_length_time_axis=8, sample_batch_size=16, sample_sequence_length=3
    )
    state = jax.jit(buffer.add)(buffer.init(EXAMPLE), steps(2, 5))
    window = jax.jit(buffer.sample)(state, jax.random.key(0)).experience.reward
    np.testing.assert_array_equal(np.diff(window, axis=1), 1)


def test_prioritised_item_buffer_follows_priorities():
    buffer = lb.make_item_buffer(
        max_length=64, sample_batch_size=64, min_length=1, add_sequences=True, prioritised=True
    )
    state = jax.jit(buffer.add)(buffer.init(EXAMPLE), jax.tree.map(lambda x: x[0], steps(1, 8)))
    sample = jax.jit(buffer.sample)
    first = sample(state, jax.random.key(0))
    assert first.indices.shape == (64,) and first.probabilities.shape == (64,)
    assert set(np.asarray(first.experience.reward).astype(int)) <= set(range(8))
    # All priority on item 5: every sample is item 5.
    state = jax.jit(buffer.set_priorities)(state, jnp.arange(8), jnp.where(jnp.arange(8) == 5, 1.0, 0.0))
    again = sample(state, jax.random.key(1))
    assert (np.asarray(again.experience.reward) == 5).all()


def test_prioritised_trajectory_buffer_follows_priorities():
    buffer = lb.make_trajectory_buffer(
        num_envs=2, max_length_time_axis=8, sample_batch_size=32, sample_sequence_length=2, prioritised=True
    )
    state = jax.jit(buffer.add)(buffer.init(EXAMPLE), steps(2, 8))
    sample = jax.jit(buffer.sample)
    first = sample(state, jax.random.key(0))
    chosen = first.indices[0]
    window = np.asarray(first.experience.reward[0])  # the window that item index stands for
    # All priority on one window: every sample is that window.
    priorities = jnp.where(first.indices == chosen, 1.0, 0.0)
    state = jax.jit(buffer.set_priorities)(state, first.indices, priorities)
    again = sample(state, jax.random.key(1))
    assert (np.asarray(again.indices) == int(chosen)).all()
    np.testing.assert_array_equal(np.asarray(again.experience.reward), np.broadcast_to(window, (32, 2)))


def test_prioritised_flat_buffer_follows_priorities():
    buffer = lb.make_flat_buffer(
        max_length=32,
        sample_batch_size=32,
        min_length=2,
        add_batch_size=2,
        add_sequences=True,
        prioritised=True,
    )
    state = jax.jit(buffer.add)(buffer.init(EXAMPLE), steps(2, 8))
    sample = jax.jit(buffer.sample)
    first = sample(state, jax.random.key(0))
    chosen = first.indices[0]
    pair_first = float(first.experience.first.reward[0])
    state = jax.jit(buffer.set_priorities)(state, first.indices, jnp.where(first.indices == chosen, 1.0, 0.0))
    again = sample(state, jax.random.key(1)).experience
    assert (np.asarray(again.first.reward) == pair_first).all()
    np.testing.assert_array_equal(again.second.reward, again.first.reward + 1)


@pytest.mark.parametrize(
    ("factory", "kwargs", "match"),
    [
        (lb.make_item_buffer, dict(max_length=0, sample_batch_size=1), "max_length"),
        (lb.make_item_buffer, dict(max_length=4, sample_batch_size=8), "sample_batch_size"),
        (lb.make_item_buffer, dict(max_length=4, sample_batch_size=2, min_length=5), "min_length"),
        (
            lb.make_item_buffer,
            dict(max_length=4, sample_batch_size=2, prioritised=True, priority_exponent=2.0),
            "priority_exponent",
        ),
        (lb.make_flat_buffer, dict(max_length=4, sample_batch_size=2, add_batch_size=4), "must be >= 2"),
        (
            lb.make_trajectory_buffer,
            dict(num_envs=2, max_length_time_axis=4, sample_batch_size=2, sample_sequence_length=5),
            "sample_sequence_length",
        ),
        (
            lb.make_trajectory_buffer,
            dict(num_envs=2, max_length_time_axis=8, sample_batch_size=2, sample_sequence_length=2, period=3),
            "period",
        ),
        (
            lb.make_trajectory_buffer,
            dict(
                num_envs=2,
                max_length_time_axis=9,
                sample_batch_size=2,
                sample_sequence_length=2,
                period=2,
                prioritised=True,
            ),
            "divisible",
        ),
    ],
)
def test_bad_arguments_fail_early(factory, kwargs, match):
    with pytest.raises(ValueError, match=match):
        factory(**kwargs)


@pytest.fixture(scope="module")
def prioritised_items():
    buffer = lb.make_item_buffer(
        max_length=16, sample_batch_size=8, min_length=1, add_sequences=True, prioritised=True
    )
    return buffer, jax.jit(buffer.add)(buffer.init(EXAMPLE), jax.tree.map(lambda x: x[0], steps(1, 8)))


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_set_priorities_refuses_negative_nan_and_infinite_priorities(prioritised_items, bad):
    """flashbax takes them and every later sample returns one unfilled slot with NaN probabilities."""
    buffer, state = prioritised_items
    priorities = jnp.ones(8).at[3].set(bad)
    with pytest.raises(
        ValueError, match=r"finite and >= 0, got 1 bad value.* at position 3.*jnp\.abs\(td_error\)"
    ):
        buffer.set_priorities(state, jnp.arange(8), priorities)


@pytest.mark.parametrize(
    "factory",
    [
        lambda: lb.make_flat_buffer(max_length=8, sample_batch_size=2, add_batch_size=2, prioritised=True),
        lambda: lb.make_trajectory_buffer(
            num_envs=2,
            max_length_time_axis=4,
            sample_batch_size=2,
            sample_sequence_length=2,
            prioritised=True,
        ),
    ],
    ids=["flat", "trajectory"],
)
def test_every_prioritised_factory_checks_priorities(factory):
    buffer = factory()
    with pytest.raises(ValueError, match=r"finite and >= 0, got 2 bad value"):
        buffer.set_priorities(buffer.init(EXAMPLE), jnp.arange(2), jnp.array([-0.5, jnp.nan]))


def test_set_priorities_shape_is_checked_at_trace_time(prioritised_items):
    """Under jit the values cannot be read, but the shapes can: one priority per index."""
    buffer, state = prioritised_items
    with pytest.raises(ValueError, match=r"priorities have shape \(4,\) but indices have shape \(8,\)"):
        jax.jit(buffer.set_priorities)(state, jnp.arange(8), jnp.ones(4))


def one_step(num_envs, obs_shape=(3,)):
    """One step of ``num_envs`` envs (leaves ``(num_envs, ...)``), observations of ``obs_shape``."""
    return jax.tree.map(lambda x: x[:, 0], steps(num_envs, 1)).replace(
        obs=jnp.zeros((num_envs, *obs_shape)), next_obs=jnp.zeros((num_envs, *obs_shape))
    )


@pytest.mark.parametrize(
    ("factory", "batch", "match"),
    [
        (  # flashbax broadcast the (4, 1) observations into the (3,) slots
            lambda: lb.make_item_buffer(max_length=16, sample_batch_size=4, add_batches=True),
            one_step(4, (1,)),
            r"field \.obs has shape \(4, 1\), expected \(batch,\) \+ \(3,\)",
        ),
        (  # a batch axis flashbax does not expect: an internal "axis 1 is out of bounds"
            lambda: lb.make_item_buffer(max_length=16, sample_batch_size=4),
            one_step(4),
            r"field \.obs has shape \(4, 3\), expected \(\) \+ \(3,\)",
        ),
        (  # one field one step long, the others two: broadcast silently into both steps
            lambda: lb.make_trajectory_buffer(
                num_envs=2, max_length_time_axis=8, sample_batch_size=2, sample_sequence_length=2
            ),
            steps(2, 2).replace(reward=jnp.zeros((2, 1))),
            r"field \.reward has leading axes \(2, 1\), other fields \(2, 2\)",
        ),
        (
            lambda: lb.make_flat_buffer(
                max_length=16, sample_batch_size=2, add_batch_size=2, prioritised=True
            ),
            one_step(2).replace(extras={"is_success": jnp.zeros(2, bool)}),
            r"field \.extras\['is_success'\] is not in the example given to init",
        ),
    ],
    ids=["trailing shape", "extra batch axis", "unequal time axes", "extra field"],
)
def test_add_refuses_a_batch_unlike_the_example(factory, batch, match):
    buffer = factory()
    state = buffer.init(EXAMPLE)
    with pytest.raises(ValueError, match=rf"add got a batch unlike the example given to init: .*{match}"):
        jax.eval_shape(buffer.add, state, batch)


def test_add_under_vmap_still_works():
    """A batch of buffers (e.g. one per seed) added to under vmap: the check sees one buffer's shapes."""
    buffer = lb.make_item_buffer(max_length=16, sample_batch_size=4, add_batches=True)
    states = jax.vmap(lambda _: buffer.init(EXAMPLE))(jnp.arange(3))
    batches = jax.tree.map(lambda x: jnp.stack([x] * 3), one_step(4))
    out = jax.eval_shape(jax.vmap(buffer.add), states, batches)
    assert out.experience.obs.shape == (3, 1, 16, 3)


def test_sizes_may_be_numpy_ints():
    buffer = lb.make_item_buffer(max_length=np.int64(16), sample_batch_size=np.int32(4))
    assert buffer.init(EXAMPLE).experience.obs.shape == (1, 16, 3)
    with pytest.raises(ValueError, match=r"min_length_time_axis must be a positive int, got -3"):
        lb.make_trajectory_buffer(
            num_envs=2,
            max_length_time_axis=8,
            sample_batch_size=2,
            sample_sequence_length=2,
            min_length_time_axis=-3,
        )
