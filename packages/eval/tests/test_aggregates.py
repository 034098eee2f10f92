"""Aggregates by hand, JAX against NumPy, and agreement with rliable."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.eval as le
from lamella.eval._src import bootstrap, bootstrap_jax, bootstrap_np, metrics

rliable_library = pytest.importorskip("rliable.library")
rliable_metrics = pytest.importorskip("rliable.metrics")

# 2 runs x 4 tasks: 8 values, IQM keeps the sorted positions 2..5.
TINY = np.array([[0.0, 1.0, 2.0, 9.0], [3.0, 4.0, 5.0, -7.0]])


def test_by_hand():
    assert le.iqm(TINY) == pytest.approx((1 + 2 + 3 + 4) / 4)
    # Task means 1.5, 2.5, 3.5, 1.0.
    assert le.mean(TINY) == pytest.approx((1.5 + 2.5 + 3.5 + 1.0) / 4)
    assert le.median(TINY) == pytest.approx((1.5 + 2.5) / 2)
    # min(score, 1): 0, 1, 1, 1, 1, 1, 1, -7 -> mean -1/8.
    assert le.optimality_gap(TINY) == pytest.approx(1 + 1 / 8)
    assert le.optimality_gap(TINY, gamma=3.0) == pytest.approx(3 - (0 + 1 + 2 + 3 + 3 + 3 + 3 - 7) / 8)


def test_probability_of_improvement_by_hand():
    x = np.array([[1.0, 0.0], [3.0, 0.0]])
    y = np.array([[2.0, 0.0], [2.0, 1.0], [0.0, 0.0]])
    # Task 0: x=1 beats 0; x=3 beats 2, 2, 0 -> 4 of 6. Task 1: x=0 ties 0 twice, loses to 1,
    # for both x -> (0.5 + 0.5 + 0) * 2 = 2 of 6.
    assert le.probability_of_improvement(x, y) == pytest.approx((4 / 6 + 2 / 6) / 2)
    assert le.probability_of_improvement(x, x) == 0.5


def test_performance_profile_by_hand():
    taus = np.array([-8.0, 0.0, 4.5, 9.0])
    np.testing.assert_array_equal(le.performance_profile(TINY, taus), [1.0, 6 / 8, 2 / 8, 0.0])
    np.testing.assert_array_equal(le.performance_profile(TINY, taus, per_run=False), [1.0, 1.0, 0.0, 0.0])


def test_jax_input_matches_numpy_under_jit():
    with bootstrap_jax._x64():  # jax.enable_x64, or jax.experimental's on older jax
        scores = jnp.asarray(TINY)
        for fn in (le.iqm, le.mean, le.median, le.optimality_gap):
            assert float(jax.jit(fn)(scores)) == pytest.approx(float(fn(TINY)), abs=1e-12)
        got = jax.jit(le.probability_of_improvement)(scores, scores[::-1] + 0.5)
        assert float(got) == pytest.approx(le.probability_of_improvement(TINY, TINY[::-1] + 0.5))


@pytest.fixture(scope="module")
def dataset():
    rng = np.random.default_rng(7)
    # Two algorithms, 3 tasks, 5 runs; a tie on purpose for probability of improvement.
    a = rng.normal(0.5, 0.3, size=(5, 3))
    b = rng.normal(0.6, 0.3, size=(5, 3))
    b[:, 2] = a[:, 2]
    return {"a": a, "b": b}


def _rliable_aggregates(x):
    return np.array(
        [
            rliable_metrics.aggregate_iqm(x),
            rliable_metrics.aggregate_mean(x),
            rliable_metrics.aggregate_median(x),
            rliable_metrics.aggregate_optimality_gap(x),
        ]
    )


def test_point_estimates_identical_to_rliable():
    rng = np.random.default_rng(0)
    for shape in [(3, 1), (5, 4), (10, 10), (7, 57), (32, 5)]:
        x, y = rng.normal(size=shape) * 40, rng.normal(size=(shape[0] + 2, shape[1])) * 40
        assert np.array_equal(
            [le.iqm(x), le.mean(x), le.median(x), le.optimality_gap(x)], _rliable_aggregates(x)
        ), shape
        assert le.probability_of_improvement(x, y) == rliable_metrics.probability_of_improvement(x, y)
        taus = np.linspace(-50, 50, 7)
        expected = rliable_library.score_distributions(x, taus)
        assert np.array_equal(le.performance_profile(x, taus), expected)


REPS = 2000


@pytest.fixture(scope="module")
def rliable_intervals(dataset):
    np.random.seed(0)  # rliable 1.2 ignores random_state and draws from np.random.
    return rliable_library.get_interval_estimates(dataset, _rliable_aggregates, reps=REPS)


def _tolerance(lower, upper):
    # Each percentile bound from R replicates has a Monte-Carlo standard error of about
    # sqrt(0.025 * 0.975 / R) / phi(1.96) * sd = 2.67 sd / sqrt(R), sd ~ (upper - lower) / 3.92.
    # Two independent sides: sqrt(2) times that; allow 6 standard errors.
    sd = (upper - lower) / 3.92
    return 6 * np.sqrt(2) * 2.67 * sd / np.sqrt(REPS) + 1e-12


BACKENDS = ["numpy", "jax"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_interval_estimates_agree_with_rliable(dataset, rliable_intervals, backend):
    points, intervals = rliable_intervals
    ours = le.interval_estimates(dataset, reps=REPS, key=1, backend=backend)
    assert ours.labels == ("iqm", "mean", "median", "optimality_gap")
    for algorithm in dataset:
        assert np.array_equal(ours.point[algorithm], points[algorithm])
        low, high = intervals[algorithm]
        tol = _tolerance(low, high)
        np.testing.assert_array_less(np.abs(ours.lower[algorithm] - low), tol)
        np.testing.assert_array_less(np.abs(ours.upper[algorithm] - high), tol)
        assert np.all(ours.lower[algorithm] <= ours.point[algorithm] + 1e-12)
    again = le.interval_estimates({k: v + 1 for k, v in dataset.items()}, reps=REPS, key=5, backend=backend)
    np.testing.assert_allclose(again.point["a"][:3], ours.point["a"][:3] + 1, atol=1e-12)  # iqm, mean, median
    if backend == "jax":  # a second call with new values and key compiles nothing
        before = bootstrap_jax._aggregate_bootstrap._cache_size()
        assert before >= 1
        le.interval_estimates({k: v + 2 for k, v in dataset.items()}, reps=REPS, key=6, backend=backend)
        assert bootstrap_jax._aggregate_bootstrap._cache_size() == before


def test_counts_replicates_equal_resampled_statistics(dataset):
    # The fast path (weighted sums over run counts) and the plain statistic of the
    # resampled matrix see the same draws, so their intervals must agree to rounding.
    statistics = {
        "iqm": "iqm",
        "mean": "mean",
        "median": "median",
        "optimality_gap": "optimality_gap",
        "iqm_direct": le.iqm,
        "mean_direct": le.mean,
        "median_direct": le.median,
        "optimality_gap_direct": le.optimality_gap,
    }
    ours = le.interval_estimates(dataset, statistics, reps=300, key=3)  # custom statistics: JAX
    for algorithm in dataset:
        np.testing.assert_allclose(ours.lower[algorithm][:4], ours.lower[algorithm][4:], atol=1e-12)
        np.testing.assert_allclose(ours.upper[algorithm][:4], ours.upper[algorithm][4:], atol=1e-12)
        np.testing.assert_array_equal(ours.point[algorithm][:4], ours.point[algorithm][4:])


def test_iqm_without_the_rank_matrix_gives_the_same_intervals(dataset, monkeypatch):
    # Large runs x tasks take the gather-and-cumsum path; same draws, same intervals.
    with_matrix = le.interval_estimates(dataset, ("iqm",), reps=300, key=3, backend="jax")
    monkeypatch.setattr(bootstrap_jax, "_MAX_BELOW", 0)
    bootstrap_jax._aggregate_bootstrap.clear_cache()
    without = le.interval_estimates(dataset, ("iqm",), reps=300, key=3, backend="jax")
    bootstrap_jax._aggregate_bootstrap.clear_cache()
    for algorithm in dataset:
        np.testing.assert_allclose(without.lower[algorithm], with_matrix.lower[algorithm], atol=1e-12)
        np.testing.assert_allclose(without.upper[algorithm], with_matrix.upper[algorithm], atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_probability_of_improvement_agrees_with_rliable(dataset, backend):
    np.random.seed(0)
    reps = 1000
    points, intervals = rliable_library.get_interval_estimates(
        {"b,a": [dataset["b"], dataset["a"]]}, rliable_metrics.probability_of_improvement, reps=reps
    )
    ours = le.probability_of_improvement_estimates(dataset, [("b", "a")], reps=reps, key=2, backend=backend)
    assert ours.point[0] == points["b,a"]
    low, high = intervals["b,a"][:, 0]
    tol = 6 * np.sqrt(2) * 2.67 * (high - low) / 3.92 / np.sqrt(reps)
    assert abs(ours.lower[0] - low) < tol and abs(ours.upper[0] - high) < tol
    # Default pairs: every unordered pair once.
    assert le.probability_of_improvement_estimates(dataset, reps=1000).pairs == (("a", "b"),)


@pytest.mark.parametrize("backend", BACKENDS)
def test_performance_profiles_agree_with_rliable(dataset, backend):
    taus = np.linspace(0.0, 1.0, 6)
    np.random.seed(0)
    points, intervals = rliable_library.create_performance_profile(dataset, taus, reps=2000)
    ours = le.performance_profiles(dataset, taus, reps=2000, key=4, backend=backend)
    for algorithm in dataset:
        assert np.array_equal(ours.point[algorithm], points[algorithm])
        # Profile bounds are multiples of 1/15 here: allow one step of that grid.
        np.testing.assert_array_less(np.abs(ours.lower[algorithm] - intervals[algorithm][0]), 1 / 15 + 1e-9)
        np.testing.assert_array_less(np.abs(ours.upper[algorithm] - intervals[algorithm][1]), 1 / 15 + 1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sample_efficiency_per_evaluation(dataset, backend):
    curves = {a: np.stack([v, v + 1.0, 2 * v], axis=-1) for a, v in dataset.items()}
    ours = le.sample_efficiency(
        curves, {a: np.array([0, 10, 20]) for a in curves}, ("iqm", "mean"), reps=500, backend=backend
    )
    for algorithm, values in curves.items():
        assert ours.point[algorithm].shape == (2, 3)
        for s in range(3):
            assert ours.point[algorithm][0, s] == le.iqm(values[:, :, s])
        # The same draws at every evaluation: shifting scores by 1 shifts the bounds by 1.
        np.testing.assert_allclose(ours.lower[algorithm][:, 1], ours.lower[algorithm][:, 0] + 1.0, atol=1e-12)
        np.testing.assert_allclose(ours.lower[algorithm][:, 2], 2 * ours.lower[algorithm][:, 0], atol=1e-12)
        np.testing.assert_array_equal(ours.x[algorithm], [0.0, 10.0, 20.0])


def test_draws_are_uniform():
    with bootstrap_jax._x64():  # jax.enable_x64, or jax.experimental's on older jax
        draws = bootstrap_jax._draws(jax.random.key(0), 7, 12000)  # 12000 tasks of 7 draws
    frequencies = np.bincount(np.asarray(draws).ravel(), minlength=7) / draws.size
    # 84000 draws: the standard error of each frequency is about 0.0012.
    np.testing.assert_allclose(frequencies, 1 / 7, atol=0.006)
    assert np.asarray(draws).max() == 6


def test_numpy_counts_are_uniform_draws_with_replacement():
    counts = bootstrap_np.counts(np.random.default_rng(0), 2000, 7, 6)
    assert counts.shape == (2000, 7, 6)
    np.testing.assert_array_equal(counts.sum(axis=1), 7.0)  # 7 draws per task and replicate
    # Each count is Binomial(7, 1/7): mean 1, variance 6/7; 84000 counts.
    assert abs(counts.mean() - 1.0) < 0.01 and abs(counts.var() - 6 / 7) < 0.03


def test_numpy_replicates_equal_resampled_statistics(dataset):
    # The NumPy kernel's weighted sums equal the plain statistics of the resampled matrices
    # made from the same counts.
    scores = dataset["b"]
    counts = bootstrap_np.counts(np.random.default_rng(1), 50, *scores.shape)
    order = np.argsort(scores.reshape(-1), kind="stable")
    for name, plain in [
        ("iqm", le.iqm),
        ("mean", le.mean),
        ("median", le.median),
        ("optimality_gap", le.optimality_gap),
    ]:
        fast = bootstrap_np._statistic(name, counts, scores, order, 1.0)
        for r in range(counts.shape[0]):
            resampled = np.stack(
                [np.repeat(scores[:, t], counts[r, :, t].astype(int)) for t in range(scores.shape[1])], axis=1
            )
            assert fast[r] == pytest.approx(plain(resampled), abs=1e-12), name


def test_auto_backend_is_numpy_for_small_inputs_and_jax_for_large_or_custom(dataset, monkeypatch):
    assert bootstrap._use_numpy("auto", 2000 * 5 * 3)
    assert not bootstrap._use_numpy("auto", bootstrap.NUMPY_MAX_WORK + 1)
    assert not bootstrap._use_numpy("auto", 10, (le.iqm,))
    calls = []
    monkeypatch.setattr(bootstrap_np, "aggregate_bounds", lambda *a: calls.append(a) or np.zeros((2, 1, 1)))
    le.interval_estimates(dataset, ("iqm",), reps=10)
    assert len(calls) == 2  # one per algorithm, NumPy
    with pytest.raises(ValueError, match="backend must be"):
        le.interval_estimates(dataset, backend="torch")


def test_bad_arguments_raise(dataset):
    with pytest.raises(ValueError, match="unknown statistic"):
        le.interval_estimates(dataset, ("iqm", "max"))
    with pytest.raises(ValueError, match="confidence"):
        le.interval_estimates(dataset, confidence=95)
    with pytest.raises(ValueError, match="no scores for algorithm 'c'"):
        le.probability_of_improvement_estimates(dataset, [("a", "c")])
    # One array where the mapping goes: its name, not 'ndarray' object has no attribute 'items'.
    with pytest.raises(
        le.EvalError, match=r"^interval_estimates: give the scores as a mapping algorithm -> array"
    ):
        le.interval_estimates(dataset["a"], reps=10)
    # A NaN, which would drop out of the IQM and turn the bounds into NaN, silently.
    broken = {**dataset, "b": dataset["b"].copy()}
    broken["b"][3, 1] = np.nan
    message = r"the scores of 'b' hold nan at index \(3, 1(, 0)?\) \(run, task(, evaluation)?\); every score"
    for call in (
        lambda: le.interval_estimates(broken, reps=10),
        lambda: le.probability_of_improvement_estimates(broken, reps=10),
        lambda: le.performance_profiles(broken, np.linspace(0, 1, 3), reps=10),
        lambda: le.sample_efficiency({a: v[..., None] for a, v in broken.items()}, reps=10),
    ):
        with pytest.raises(le.EvalError, match=message):
            call()


def test_one_pair_is_a_list_of_one(dataset):
    # ("a", "b") was read as a list of two pairs, each name split into letters.
    one = le.probability_of_improvement_estimates(dataset, ("b", "a"), reps=50, key=2)
    listed = le.probability_of_improvement_estimates(dataset, [("b", "a")], reps=50, key=2)
    assert one.pairs == listed.pairs == (("b", "a"),)
    np.testing.assert_array_equal(one.lower, listed.lower)
    short = {"ab": dataset["a"], "cd": dataset["b"]}  # two-letter names: no pairs of letters
    assert le.probability_of_improvement_estimates(short, ("ab", "cd"), reps=50).pairs == (("ab", "cd"),)
    for pairs, message in [
        ("ab", r"pairs must be a list of \(x, y\) pairs of algorithm names, got str 'ab'"),
        ([("a", "b", "a")], r"pairs: \('a', 'b', 'a'\) is not an \(x, y\) pair of two algorithm names"),
        ([], r"pairs is empty; give at least one \(x, y\) pair"),
    ]:
        with pytest.raises(le.EvalError, match=message):
            le.probability_of_improvement_estimates(dataset, pairs, reps=50)


@pytest.mark.parametrize(
    "taus, message",
    [
        (51, r"taus is the number 51; give an array of thresholds: np.linspace\(low, high, 51\)"),
        (np.array([0.0, np.inf]), r"taus\[1\] is inf; every threshold must be finite"),
        ([], r"taus must be a 1-D array of one or more numbers"),
        (np.zeros((2, 2)), r"taus must be a 1-D array of one or more numbers"),
    ],
)
def test_performance_profiles_refuse_a_number_or_bad_thresholds(dataset, taus, message):
    with pytest.raises(le.EvalError, match=message):
        le.performance_profiles(dataset, taus, reps=50)


def test_a_scores_object_and_one_statistic_name_are_taken_as_meant(dataset):
    scores = le.Scores("episode_return", ("t/0", "t/1", "t/2"), dataset, "last evaluation")
    by_object = le.interval_estimates(scores, "iqm", reps=50, key=1)
    by_values = le.interval_estimates(dataset, ("iqm",), reps=50, key=1)
    assert by_object.labels == ("iqm",)
    for algorithm in dataset:
        np.testing.assert_array_equal(by_object.point[algorithm], by_values.point[algorithm])
        np.testing.assert_array_equal(by_object.lower[algorithm], by_values.lower[algorithm])

    # A statistic where step_counts goes: an EvalError naming the keyword, not a TypeError.
    curves = le.Curves(
        "episode_return",
        ("t/0", "t/1", "t/2"),
        {a: v[..., None] for a, v in dataset.items()},
        {a: np.array([100.0]) for a in dataset},
    )
    for statistics in ("iqm", ("iqm", "mean")):
        with pytest.raises(
            le.EvalError, match=r"give statistics by keyword: sample_efficiency\(curves, statistics="
        ):
            le.sample_efficiency(curves, statistics, reps=10)


def test_numpy_interval_is_np_quantile_bit_for_bit():
    # bootstrap_np._interval sorts each column itself (np.quantile along axis 0 is slow); the
    # bounds must be np.quantile's "linear" ones exactly, ties and odd confidences included.
    rng = np.random.default_rng(3)
    for shape in [(2000, 101), (2000, 4, 1), (2000,), (7, 3), (2, 5), (1999, 2, 3)]:
        for confidence in (0.95, 0.9, 0.5, 0.683):
            for replicates in (rng.normal(size=shape), np.round(rng.normal(size=shape), 1)):
                expected = np.quantile(
                    replicates, [(1 - confidence) / 2, (1 + confidence) / 2], axis=0, method="linear"
                )
                got = bootstrap_np._interval(replicates, confidence)
                assert got.shape == expected.shape
                np.testing.assert_array_equal(got, expected)


def test_numpy_improvement_with_shared_resamples_matches_per_pair_bootstrap():
    # The NumPy backend resamples each algorithm once for all its pairs; every pair's interval
    # must still be the independent bootstrap's (per-pair kernel), runs of unequal counts too.
    rng = np.random.default_rng(4)
    scores = {"a": rng.normal(0.4, 0.25, (10, 6)), "b": rng.normal(0.5, 0.25, (10, 6))}
    scores["c"] = rng.normal(0.45, 0.3, (7, 6))
    shared = le.probability_of_improvement_estimates(scores, reps=4000, key=1, backend="numpy")
    assert shared.pairs == (("a", "b"), ("a", "c"), ("b", "c"))
    for i, (x, y) in enumerate(shared.pairs):
        wins = metrics._improvement_matrix(scores[x], scores[y], np)
        alone = bootstrap_np.improvement_bounds(np.random.default_rng(10 + i), wins, 4000, 0.95)
        # 4000 replicates: a bound's Monte-Carlo standard error is about 0.004 here.
        np.testing.assert_allclose([shared.lower[i], shared.upper[i]], alone, atol=0.02)
        assert shared.lower[i] < shared.point[i] < shared.upper[i]
    # A pair of an algorithm with itself keeps two independent resamples (per-pair kernel).
    same = le.probability_of_improvement_estimates(scores, [("a", "a")], reps=2000, key=1, backend="numpy")
    assert same.lower[0] < 0.5 < same.upper[0]
