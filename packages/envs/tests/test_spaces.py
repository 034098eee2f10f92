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


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: spaces.Discrete(2.7), ValueError, r"Discrete\(n=2\.7\): .*integer >= 1.*not truncated"),
        (lambda: spaces.Discrete(True), ValueError, r"Discrete\(n=True\): .*integer >= 1, got True \(bool\)"),
        (lambda: spaces.Discrete(None), ValueError, r"Discrete\(n=None\): .*integer >= 1"),
        (lambda: spaces.Discrete([2, 3]), ValueError, r"n must be one integer.*MultiDiscrete"),
        (lambda: spaces.Discrete(3, jnp.float32), TypeError, r"dtype must be an integer dtype.*got float32"),
        (
            lambda: spaces.Discrete(300, jnp.uint8),
            ValueError,
            r"up to 299 do not fit dtype uint8 \(at most 255\)",
        ),
        (lambda: spaces.MultiDiscrete([2.5, 3]), ValueError, r"MultiDiscrete\(nvec=\[2\.5, 3\]\): .*integer"),
        (lambda: spaces.MultiDiscrete([2, 3], jnp.float32), TypeError, r"dtype must be an integer dtype"),
    ],
)
def test_discrete_spaces_refuse_counts_and_dtypes_they_would_truncate(build, error, message):
    with pytest.raises(error, match=message):
        build()


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: spaces.Box(jnp.nan, 1.0, (2,)), ValueError, r"must not be NaN.*-jnp\.inf / jnp\.inf"),
        (lambda: spaces.Box(0.5, 2.5, (), jnp.int32), ValueError, r"whole-number bounds, got \[0\.5, 2\.5\]"),
        (
            lambda: spaces.Box(-jnp.inf, 0, (2,), jnp.int32),
            ValueError,
            r"integer Box \(int32\) needs finite bounds",
        ),
        (lambda: spaces.Box(-1, 300, (2,), jnp.uint8), ValueError, r"do not fit dtype uint8 \(\[0, 255\]\)"),
        (lambda: spaces.Box(0, 2, (2,), jnp.bool_), ValueError, r"do not fit dtype bool \(\[0, 1\]\)"),
        (
            lambda: spaces.Box(0, 1, (2,), jnp.complex64),
            TypeError,
            r"dtype must be a float, integer or bool dtype",
        ),
        (lambda: spaces.Box(0.0, 1.0, 3), TypeError, r"shape must be a tuple of ints such as \(3,\), got 3"),
        (lambda: spaces.Box(0.0, 1.0, (2.5,)), TypeError, r"shape must be a tuple of ints"),
        (lambda: spaces.Box(0.0, 1.0, (-1,)), ValueError, r"negative sizes"),
        (
            lambda: spaces.Box(np.zeros(3), 1.0, (2,)),
            ValueError,
            r"low of shape \(3,\) does not broadcast to shape=\(2,\)",
        ),
        (lambda: spaces.Box(np.zeros(3), np.ones(2)), ValueError, r"do not broadcast together"),
        (lambda: spaces.Box("a", 1.0, (2,)), TypeError, r"low and high must be numbers"),
    ],
)
def test_box_refuses_bounds_shapes_and_dtypes_it_cannot_sample(build, error, message):
    with pytest.raises(error, match=message):
        build()


def test_tuple_and_dict_refuse_entries_that_are_not_spaces():
    with pytest.raises(TypeError, match=r"Tuple: entry 1 must be a space .*got int 3"):
        spaces.Tuple([spaces.Discrete(2), 3])
    with pytest.raises(TypeError, match=r"Dict: entry 'pos' must be a space .*got tuple"):
        spaces.Dict({"pos": (-1.0, 1.0)})
    with pytest.raises(TypeError, match=r"Dict takes a mapping of names to spaces.*use Tuple"):
        spaces.Dict([spaces.Discrete(2)])
    with pytest.raises(TypeError, match=r"Tuple takes a sequence of spaces.*use Dict"):
        spaces.Tuple({"a": spaces.Discrete(2)})
    # Empty composites contain exactly the empty value (they raised inside jnp.stack).
    assert bool(spaces.Tuple([]).contains(())) and bool(spaces.Dict({}).contains({}))
