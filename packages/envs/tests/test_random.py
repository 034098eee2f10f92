"""Statistical tests of lamella.envs.random with fixed seeds.

Each test states its tolerance; with fixed keys the outcome is deterministic,
and the tolerances are wide enough (about 4 sigma) that a correct generator
passes for any seed while a biased one (a stuck bit, a reused stream) fails.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.envs import random as fr

N = 4096
KEY = jax.random.key(1234)


def _per_key(fn, n=N, key=KEY):
    """One draw per fresh key, as envs use the functions."""
    return np.asarray(jax.jit(jax.vmap(fn))(jax.random.split(key, n)))


def _chi_square(counts, expected):
    return float(np.sum((counts - expected) ** 2 / expected))


def test_shapes_and_dtypes():
    assert fr.bits(KEY, (3, 2)).shape == (3, 2) and fr.bits(KEY).dtype == jnp.uint32
    assert fr.uniform(KEY, (5,)).dtype == jnp.float32
    assert fr.randint(KEY, (2, 2), 0, 7).dtype == jnp.int32
    assert fr.bernoulli(KEY, 0.5, (4,)).dtype == jnp.bool_
    assert fr.normal(KEY, (6,)).shape == (6,) and fr.normal(KEY).dtype == jnp.float32
    assert fr.uniform(KEY).shape == ()


def test_uniform_range_mean_variance_and_ks():
    u = np.asarray(fr.uniform(KEY, (N,)))
    assert u.min() >= 0.0 and u.max() < 1.0
    # Mean 1/2 (sd 1/sqrt(12N)) and variance 1/12 (sd ~ 1/(sqrt(180 N))) within 4 sigma.
    assert abs(u.mean() - 0.5) < 4 / np.sqrt(12 * N)
    assert abs(u.var() - 1 / 12) < 4 / np.sqrt(180 * N)
    # Kolmogorov-Smirnov statistic below the 0.1 % critical value 1.95 / sqrt(N).
    sorted_u = np.sort(u)
    grid = np.arange(1, N + 1) / N
    ks = max(np.max(grid - sorted_u), np.max(sorted_u - (grid - 1 / N)))
    assert ks < 1.95 / np.sqrt(N)
    scaled = np.asarray(fr.uniform(KEY, (N,), minval=-3.0, maxval=5.0))
    assert scaled.min() >= -3.0 and scaled.max() < 5.0 and abs(scaled.mean() - 1.0) < 4 * 8 / np.sqrt(12 * N)


def test_uniform_one_value_per_key_is_uniform():
    u = _per_key(lambda k: fr.uniform(k))
    counts = np.bincount((u * 16).astype(int), minlength=16)
    # Chi-square with 15 degrees of freedom: 0.1 % critical value is 37.7.
    assert _chi_square(counts, N / 16) < 37.7


def test_bits_every_bit_is_fair():
    words = np.asarray(fr.bits(KEY, (N,)))
    ones = np.array([((words >> b) & 1).mean() for b in range(32)])
    # Each bit is 1 with probability 1/2: within 4 / (2 sqrt(N)).
    assert np.all(np.abs(ones - 0.5) < 2 / np.sqrt(N))


def test_randint_covers_range_uniformly():
    values = np.asarray(fr.randint(KEY, (N,), 3, 10))
    assert values.min() == 3 and values.max() == 9
    counts = np.bincount(values - 3, minlength=7)
    # 6 degrees of freedom: 0.1 % critical value 22.5.
    assert _chi_square(counts, N / 7) < 22.5
    per_key = _per_key(lambda k: fr.randint(k, (), 0, 5))
    assert _chi_square(np.bincount(per_key, minlength=5), N / 5) < 18.5  # 4 dof, 0.1 %


def test_bernoulli_rate():
    for p in (0.1, 0.5, 0.9):
        rate = np.asarray(fr.bernoulli(KEY, p, (N,))).mean()
        assert abs(rate - p) < 4 * np.sqrt(p * (1 - p) / N)
    assert not np.asarray(fr.bernoulli(KEY, 0.0, (N,))).any()
    assert np.asarray(fr.bernoulli(KEY, 1.0, (N,))).all()


def test_normal_moments_and_tails():
    z = np.asarray(fr.normal(KEY, (N,)))
    assert np.all(np.isfinite(z))
    assert abs(z.mean()) < 4 / np.sqrt(N)
    assert abs(z.var() - 1.0) < 4 * np.sqrt(2 / N)
    # Fraction beyond 1.96 is 5 % (binomial sd sqrt(.05 * .95 / N)).
    assert abs(np.mean(np.abs(z) > 1.96) - 0.05) < 4 * np.sqrt(0.05 * 0.95 / N)


def test_streams_and_consecutive_keys_are_uncorrelated():
    bound = 4 / np.sqrt(N)  # correlation of independent uniforms has sd 1/sqrt(N)
    a = np.asarray(fr.uniform(KEY, (N,), stream=0))
    b = np.asarray(fr.uniform(KEY, (N,), stream=1))
    assert abs(np.corrcoef(a, b)[0, 1]) < bound
    assert not np.array_equal(a, b)
    # One value per key: the draws of consecutive split keys, and of two streams of one key.
    per_key = _per_key(lambda k: jnp.stack([fr.uniform(k), fr.uniform(k, stream=1)]))
    assert abs(np.corrcoef(per_key[:-1, 0], per_key[1:, 0])[0, 1]) < bound
    assert abs(np.corrcoef(per_key[:, 0], per_key[:, 1])[0, 1]) < bound
    # Neighbouring entries of one draw.
    assert abs(np.corrcoef(a[:-1], a[1:])[0, 1]) < bound
    # Keys that differ in a single bit of their data give unrelated values.
    data = jax.random.key_data(KEY)
    flipped = jax.random.wrap_key_data(data ^ jnp.array([0, 1], jnp.uint32))
    c = np.asarray(fr.uniform(flipped, (N,)))
    assert abs(np.corrcoef(a, c)[0, 1]) < bound


def test_normal_streams_are_independent():
    z0 = np.asarray(fr.normal(KEY, (N,), stream=0))
    z1 = np.asarray(fr.normal(KEY, (N,), stream=1))
    assert abs(np.corrcoef(z0, z1)[0, 1]) < 4 / np.sqrt(N)


def test_typed_and_legacy_keys_agree():
    typed = jax.random.key(7)
    legacy = jax.random.PRNGKey(7)
    assert legacy.dtype == jnp.uint32
    np.testing.assert_array_equal(fr.bits(typed, (8,)), fr.bits(legacy, (8,)))
    np.testing.assert_array_equal(fr.uniform(typed, (8,)), fr.uniform(legacy, (8,)))
    np.testing.assert_array_equal(fr.randint(typed, (8,), 0, 4), fr.randint(legacy, (8,), 0, 4))
    with pytest.raises(ValueError, match="PRNG key"):
        fr.bits(jnp.zeros((1,), jnp.uint32))


def test_works_under_vmap_and_matches_unbatched():
    keys = jax.random.split(KEY, 4)
    batched = jax.jit(jax.vmap(lambda k: fr.normal(k, (3,))))(keys)
    assert batched.shape == (4, 3)
    for i in range(4):
        np.testing.assert_allclose(batched[i], fr.normal(keys[i], (3,)), rtol=1e-6, atol=1e-6)
    legacy_keys = jax.vmap(jax.random.key_data)(keys)
    np.testing.assert_array_equal(
        jax.vmap(lambda k: fr.bits(k, (2,)))(legacy_keys), jax.vmap(lambda k: fr.bits(k, (2,)))(keys)
    )


def test_large_stream_numbers_wrap_without_warnings(recwarn):
    a = fr.uniform(KEY, (4,), stream=3)
    b = fr.uniform(KEY, (4,), stream=3 + 2**32)  # the offset wraps modulo 2**32
    np.testing.assert_array_equal(a, b)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_empty_shapes():
    assert fr.bits(KEY, (0,)).shape == (0,)
    assert fr.bernoulli(KEY, 0.5, (0, 3)).shape == (0, 3)
    assert jax.jit(lambda k: fr.uniform(k, (2, 0)))(KEY).shape == (2, 0)


def test_fork_gives_an_independent_key_of_the_same_kind():
    from lamella.envs import random as fast_random

    for key in (jax.random.key(3), jax.random.key(3, impl="rbg"), jax.random.PRNGKey(3)):
        forked = fast_random.fork(key)
        assert forked.dtype == key.dtype and forked.shape == key.shape
        assert not np.array_equal(
            np.asarray(jax.random.key_data(forked) if forked.dtype != np.uint32 else forked),
            np.asarray(jax.random.key_data(key) if key.dtype != np.uint32 else key),
        )
    # Values drawn from the fork are uncorrelated with values drawn from the key itself
    # (n = 200 000: the sample correlation's standard error is 0.0022; 5 of them allowed).
    keys = jax.random.split(jax.random.key(11), 200_000)
    own = np.asarray(jax.vmap(lambda k: fast_random.uniform(k))(keys))
    forked_own = np.asarray(jax.vmap(lambda k: fast_random.uniform(fast_random.fork(k)))(keys))
    forked_threefry = np.asarray(jax.vmap(lambda k: jax.random.uniform(fast_random.fork(k)))(keys))
    assert abs(np.corrcoef(own, forked_own)[0, 1]) < 0.011
    assert abs(np.corrcoef(own, forked_threefry)[0, 1]) < 0.011
    assert abs(forked_own.mean() - 0.5) < 0.005 and abs(forked_own.var() - 1 / 12) < 0.002
