import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.envs import spaces

KEYS = jax.random.split(jax.random.key(0), 256)


def _samples(space):
    return jax.jit(jax.vmap(space.sample))(KEYS)


def test_discrete_sample_and_contains():
    space = spaces.Discrete(3)
    samples = np.asarray(_samples(space))
    assert samples.dtype == np.int32 and samples.shape == (256,)
    assert set(samples.tolist()) == {0, 1, 2}
    assert bool(space.contains(jnp.int32(2)))
    assert not bool(space.contains(jnp.int32(3)))
    assert not bool(space.contains(jnp.int32(-1)))
    assert not bool(space.contains(jnp.float32(1.0)))  # floats are not discrete actions
    assert not bool(space.contains(jnp.zeros((1,), jnp.int32)))  # wrong shape
    assert spaces.Discrete(4, dtype=jnp.uint8).sample(KEYS[0]).dtype == jnp.uint8
    with pytest.raises(ValueError, match="at least 1"):
        spaces.Discrete(0)


def test_multidiscrete_sample_and_contains():
    space = spaces.MultiDiscrete([2, 5])
    samples = np.asarray(_samples(space))
    assert samples.shape == (256, 2) and samples.dtype == np.int32
    assert set(samples[:, 0].tolist()) == {0, 1} and set(samples[:, 1].tolist()) == {0, 1, 2, 3, 4}
    assert bool(space.contains(jnp.array([1, 4])))
    assert not bool(space.contains(jnp.array([2, 0])))
    assert not bool(space.contains(jnp.array([0, 5])))
    assert not bool(space.contains(jnp.array([0.0, 1.0])))
    assert not bool(space.contains(jnp.array([0, 1, 0])))
    with pytest.raises(ValueError, match=">= 1"):
        spaces.MultiDiscrete([2, 0])


def test_box_bounded_sample_within_bounds():
    space = spaces.Box(jnp.array([-1.0, 0.0]), jnp.array([1.0, 10.0]))
    assert space.shape == (2,) and space.dtype == jnp.float32
    samples = np.asarray(_samples(space))
    assert samples.dtype == np.float32
    assert np.all(samples >= [-1.0, 0.0]) and np.all(samples <= [1.0, 10.0])
    # Uniform: the mean of 256 draws is within 4 standard errors of the midpoint.
    standard_error = np.array([2.0, 10.0]) / np.sqrt(12 * 256)
    assert np.all(np.abs(samples.mean(0) - [0.0, 5.0]) < 4 * standard_error)
    assert bool(space.contains(jnp.array([1.0, 10.0])))  # bounds are inclusive
    assert not bool(space.contains(jnp.array([1.01, 5.0])))
    assert not bool(space.contains(jnp.array([0.0, jnp.nan])))
    assert not bool(space.contains(jnp.zeros((3,))))
    with pytest.raises(ValueError, match="low must be <= high"):
        spaces.Box(1.0, 0.0, (2,))


def test_box_unbounded_and_half_bounded():
    space = spaces.Box(jnp.array([-jnp.inf, -jnp.inf, 2.0]), jnp.array([jnp.inf, 3.0, jnp.inf]))
    samples = np.asarray(_samples(space))
    assert np.all(np.isfinite(samples))
    assert np.all(samples[:, 1] <= 3.0) and np.all(samples[:, 2] >= 2.0)
    # Fully unbounded side is a standard normal: sample std near 1.
    assert 0.8 < samples[:, 0].std() < 1.2
    assert bool(space.contains(jnp.array([1e30, -1e30, 1e30])))
    assert not bool(space.contains(jnp.array([0.0, 3.5, 0.0])))


def test_box_integer_dtype_image():
    space = spaces.Box(0, 255, (4, 4, 3), jnp.uint8)
    samples = np.asarray(_samples(space))
    assert samples.dtype == np.uint8 and samples.shape == (256, 4, 4, 3)
    assert samples.min() == 0 and samples.max() == 255  # both ends reachable
    assert bool(space.contains(jnp.zeros((4, 4, 3), jnp.uint8)))
    assert not bool(space.contains(jnp.zeros((4, 4, 3), jnp.float32)))


def test_tuple_and_dict():
    space = spaces.Dict(
        {"pos": spaces.Box(-1.0, 1.0, (2,)), "pair": spaces.Tuple([spaces.Discrete(2), spaces.Discrete(3)])}
    )
    sample = space.sample(KEYS[0])
    assert set(sample) == {"pos", "pair"} and isinstance(sample["pair"], tuple)
    assert bool(space.contains(sample))
    assert space["pair"][1].n == 3
    assert not bool(space.contains({"pos": jnp.zeros(2)}))  # missing key
    assert not bool(space.contains({"pos": jnp.zeros(2), "pair": (jnp.int32(0), jnp.int32(3))}))
    assert not bool(space.contains({"pos": jnp.zeros(2), "pair": (jnp.int32(0),)}))
    assert not bool(space.contains([jnp.zeros(2)]))
    # Sub-samples of one sample use different keys.
    twin = spaces.Tuple([spaces.Box(0.0, 1.0, (8,)), spaces.Box(0.0, 1.0, (8,))]).sample(KEYS[1])
    assert not np.array_equal(np.asarray(twin[0]), np.asarray(twin[1]))


def test_contains_under_jit_and_vmap():
    space = spaces.Box(0.0, 1.0, (3,))
    xs = jnp.array([[0.5, 0.5, 0.5], [0.5, 1.5, 0.5], [0.0, 1.0, 0.2], [jnp.nan, 0.0, 0.0]])
    result = jax.jit(jax.vmap(space.contains))(xs)
    np.testing.assert_array_equal(result, [True, False, True, False])
    discrete = spaces.Discrete(4)
    np.testing.assert_array_equal(
        jax.jit(jax.vmap(discrete.contains))(jnp.array([-1, 0, 3, 4])), [False, True, True, False]
    )
    dict_space = spaces.Dict({"a": discrete, "b": space})
    batch = {"a": jnp.array([0, 5]), "b": jnp.full((2, 3), 0.5)}
    np.testing.assert_array_equal(jax.jit(jax.vmap(dict_space.contains))(batch), [True, False])
