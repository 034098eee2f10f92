"""The PLR level buffer against hand-computed values."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.ued.buffer import make_level_buffer

LEVEL = {"walls": jnp.zeros((2,), bool), "goal": jnp.zeros((), jnp.int32)}


def levels(goals):
    """A batch of toy levels that differ by their goal."""
    goals = jnp.asarray(goals, jnp.int32)
    return {"walls": jnp.zeros((goals.shape[0], 2), bool), "goal": goals}


def filled_state(buffer, scores, last_seen, clock):
    state = buffer.init(LEVEL)
    n = len(scores)
    return state.replace(
        levels=levels(jnp.arange(buffer.capacity)),
        scores=state.scores.at[:n].set(jnp.asarray(scores, jnp.float32)),
        last_seen=state.last_seen.at[:n].set(jnp.asarray(last_seen, jnp.int32)),
        size=jnp.int32(n),
        clock=jnp.int32(clock),
    )


def test_rank_replay_distribution_reference_vector():
    # minimax and JaxUED agree on this vector (UED.md 5.2): scores .5 .1 .9, one empty slot,
    # staleness 3 0 1, temperature 0.3, staleness coefficient 0.3.
    buffer = make_level_buffer(4, temperature=0.3, staleness_coef=0.3)
    state = filled_state(buffer, [0.5, 0.1, 0.9], last_seen=[0, 3, 2], clock=3)
    np.testing.assert_array_equal(state.staleness, [3, 0, 1, 0])
    p = jax.jit(buffer.replay_distribution)(state)
    np.testing.assert_allclose(p, [0.286738, 0.015980, 0.697282, 0.0], atol=1e-5)


def test_proportional_and_staleness_fallback():
    buffer = make_level_buffer(4, prioritization="proportional", temperature=0.5, staleness_coef=0.5)
    # All staleness 0: P_staleness falls back to P_score. Scores squared (1 / 0.5): 1, 9, 0.
    state = filled_state(buffer, [1.0, 3.0, 0.0], last_seen=[0, 0, 0], clock=0)
    np.testing.assert_allclose(buffer.replay_distribution(state), [0.1, 0.9, 0.0, 0.0], atol=1e-6)
    # All scores 0: uniform over the filled slots.
    state = filled_state(buffer, [0.0, 0.0], last_seen=[0, 0], clock=0)
    np.testing.assert_allclose(buffer.replay_distribution(state), [0.5, 0.5, 0.0, 0.0])


def test_proportional_weights_of_large_scores_or_a_low_temperature_stay_a_distribution():
    # Scores ** (1 / temperature) overflowed float32 (inf / inf: NaN, every draw slot 0) or
    # underflowed to 0 (the uniform fallback); the weights are scaled by the top score first.
    buffer = make_level_buffer(4, prioritization="proportional", temperature=0.5, staleness_coef=0.0)
    state = filled_state(buffer, [1e20, 3e20, 0.0], last_seen=[0, 0, 0], clock=0)
    np.testing.assert_allclose(buffer.replay_distribution(state), [0.1, 0.9, 0.0, 0.0], atol=1e-6)
    sharp = make_level_buffer(4, prioritization="proportional", temperature=1e-3, staleness_coef=0.0)
    state = filled_state(sharp, [0.5, 0.6, 0.7], last_seen=[0, 0, 0], clock=0)
    np.testing.assert_allclose(sharp.replay_distribution(state), [0.0, 0.0, 1.0, 0.0])
    np.testing.assert_array_equal(sharp.sample(state, jax.random.key(0), 3)[1], [2, 2, 2])


def test_should_replay_waits_for_min_fill():
    buffer = make_level_buffer(4, replay_prob=1.0, min_fill_ratio=0.5)
    keys = jax.random.split(jax.random.key(0), 4)
    one = filled_state(buffer, [1.0], [0], 0)
    two = filled_state(buffer, [1.0, 2.0], [0, 0], 0)
    assert not jax.vmap(buffer.should_replay, in_axes=(None, 0))(one, keys).any()
    assert jax.vmap(buffer.should_replay, in_axes=(None, 0))(two, keys).all()
    never = make_level_buffer(4, replay_prob=0.0, min_fill_ratio=0.0)
    assert not jax.vmap(never.should_replay, in_axes=(None, 0))(two, keys).any()
    # replay_prob 0.5: about half of many draws.
    half = make_level_buffer(4, replay_prob=0.5, min_fill_ratio=0.0)
    rate = jax.vmap(half.should_replay, in_axes=(None, 0))(
        two, jax.random.split(jax.random.key(1), 2000)
    ).mean()
    assert 0.45 < float(rate) < 0.55


@pytest.mark.parametrize("capacity", [4, 5, 10, 128])
def test_a_traced_min_fill_ratio_waits_for_the_count_of_the_plain_one(capacity):
    # A sweep traces min_fill_ratio: the buffer built with the traced ratio replays from the fill
    # its plain build replays from, for every fill and ratios on, between and off the slots
    # (0.3 * 5 = 1.5 and 0.5 * 5 = 2.5 round half to even; 0 still waits for one level).
    ratios = [0.0, 0.1, 0.25, 0.3, 0.5, 0.7, 0.9, 1.0]
    fills = jnp.arange(capacity + 1, dtype=jnp.int32)
    key = jax.random.key(0)

    def replays(ratio, fill):
        buffer = make_level_buffer(capacity, replay_prob=1.0, min_fill_ratio=ratio)
        return buffer.should_replay(buffer.init(LEVEL).replace(size=fill), key)

    over_fills = jax.vmap(replays, in_axes=(None, 0))
    traced = jax.jit(jax.vmap(over_fills, in_axes=(0, None)))(jnp.asarray(ratios, jnp.float32), fills)
    plain = np.stack([jax.jit(functools.partial(over_fills, ratio))(fills) for ratio in ratios])
    np.testing.assert_array_equal(traced, plain)
    expected = [[fill >= max(1, round(ratio * capacity)) for fill in range(capacity + 1)] for ratio in ratios]
    np.testing.assert_array_equal(plain, expected)


def test_insert_fills_slots_dedupes_and_skips_unscored():
    buffer = make_level_buffer(4, staleness_coef=0.0)
    insert = jax.jit(buffer.insert)
    state = buffer.init(LEVEL)
    # Goals 7, 7 (a duplicate within the batch), 3, and one level with no score.
    state, slots = insert(
        state, levels([7, 7, 3, 9]), jnp.array([0.2, 0.6, 0.1, -jnp.inf]), jnp.array([0.5, 0.9, 0.1, 0.0])
    )
    np.testing.assert_array_equal(slots, [0, 0, 1, -1])
    assert int(state.size) == 2
    np.testing.assert_array_equal(state.levels["goal"][:2], [7, 3])
    # The duplicate refreshed slot 0: its latest score, its best return maxed in.
    np.testing.assert_allclose(state.scores[:2], [0.6, 0.1])
    np.testing.assert_allclose(state.best_returns[:2], [0.9, 0.1])
    # Four levels were handed to the student (the unscored one too, though it is not kept).
    assert int(state.clock) == 4
    np.testing.assert_array_equal(state.staleness[:2], [0, 0])


def test_full_buffer_evicts_the_least_likely_level_only_for_a_higher_score():
    buffer = make_level_buffer(2, staleness_coef=0.0)
    state = buffer.init(LEVEL)
    state, _ = buffer.insert(state, levels([1, 2]), jnp.array([0.2, 0.8]), jnp.array([0.0, 0.0]))
    # Age the buffer: 5 levels handed out since, so both levels have staleness 5.
    state = state.replace(clock=state.clock + 5)
    state, slots = buffer.insert(state, levels([3]), jnp.array([0.1]), jnp.array([0.0]))
    np.testing.assert_array_equal(slots, [-1])  # 0.1 < 0.2: rejected
    state, slots = buffer.insert(state, levels([4]), jnp.array([0.5]), jnp.array([0.3]))
    np.testing.assert_array_equal(slots, [0])  # replaces the lowest-probability level (score 0.2)
    np.testing.assert_array_equal(state.levels["goal"], [4, 2])
    np.testing.assert_allclose(state.scores, [0.5, 0.8])
    np.testing.assert_allclose(state.best_returns, [0.3, 0.0])
    # The new level starts fresh; minimax would give it the evicted level's staleness.
    np.testing.assert_array_equal(state.staleness, [0, 7])


def test_update_keeps_the_best_return_and_ignores_unscored_rollouts():
    buffer = make_level_buffer(4)
    state = buffer.init(LEVEL)
    state, _ = buffer.insert(state, levels([1, 2]), jnp.array([0.2, 0.8]), jnp.array([0.9, 0.4]))
    state = jax.jit(buffer.update)(
        state, jnp.array([0, 1]), jnp.array([0.5, -jnp.inf]), jnp.array([0.3, 0.6])
    )
    np.testing.assert_allclose(state.scores[:2], [0.5, 0.8])  # slot 1: no episode completed, kept
    np.testing.assert_allclose(state.best_returns[:2], [0.9, 0.6])  # the best, not the latest
    masked = buffer.update(
        state, jnp.array([0, 1]), jnp.array([0.0, 0.0]), jnp.array([5.0, 5.0]), mask=jnp.array([False, True])
    )
    np.testing.assert_allclose(masked.scores[:2], [0.5, 0.0])
    np.testing.assert_allclose(masked.best_returns[:2], [0.9, 5.0])
    # A slot of -1 (insert's "not kept") updates nothing, where it indexed the last slot.
    full = buffer.insert(state, levels([3, 4]), jnp.array([0.1, 0.3]), jnp.array([0.0, 0.0]))[0]
    after = buffer.update(full, jnp.array([-1, 2]), jnp.array([99.0, 0.7]), jnp.array([99.0, 1.0]))
    np.testing.assert_allclose(after.scores, [0.5, 0.8, 0.7, 0.3])
    np.testing.assert_allclose(after.best_returns, [0.9, 0.6, 1.0, 0.0])


def test_a_nan_best_return_keeps_the_best_seen():
    # max(best, NaN) is NaN: a NaN best return made the level's MaxMC score NaN from then on.
    buffer = make_level_buffer(4)
    state = buffer.init(LEVEL)
    state, _ = buffer.insert(state, levels([1, 2]), jnp.array([0.2, 0.8]), jnp.array([0.9, jnp.nan]))
    np.testing.assert_allclose(state.best_returns[:2], [0.9, -jnp.inf])
    state = buffer.update(state, jnp.array([0, 1]), jnp.array([0.5, 0.5]), jnp.array([jnp.nan, 0.4]))
    np.testing.assert_allclose(state.best_returns[:2], [0.9, 0.4])
    state, slots = buffer.insert(state, levels([1]), jnp.array([0.3]), jnp.array([jnp.nan]))  # a duplicate
    np.testing.assert_array_equal(slots, [0])
    np.testing.assert_allclose(state.best_returns[:2], [0.9, 0.4])


def test_sample_draws_by_priority_and_resets_staleness():
    # Temperature 0.01: rank 1 has all the score weight; no staleness term.
    buffer = make_level_buffer(4, temperature=0.01, staleness_coef=0.0)
    state = filled_state(buffer, [0.1, 0.9, 0.5], last_seen=[0, 0, 0], clock=10)
    new_state, slots, drawn = jax.jit(buffer.sample, static_argnums=2)(state, jax.random.key(0), 3)
    np.testing.assert_array_equal(slots, [1, 1, 1])
    np.testing.assert_array_equal(drawn["goal"], [1, 1, 1])
    assert int(new_state.clock) == 13
    np.testing.assert_array_equal(new_state.staleness[:3], [13, 0, 13])
    # With staleness weight 1, a drawn level is not drawn again until the others are stale too.
    stale = make_level_buffer(4, staleness_coef=1.0)
    state = filled_state(stale, [0.1, 0.9, 0.5, 0.3], last_seen=[0, 0, 0, 0], clock=1)
    _, slots, _ = stale.sample(state, jax.random.key(1), 4)
    assert sorted(np.asarray(slots).tolist()) == [0, 1, 2, 3]


def test_bad_settings_and_a_batch_larger_than_the_buffer():
    with pytest.raises(ValueError, match="prioritization must be one of"):
        make_level_buffer(4, prioritization="topk")
    with pytest.raises(ValueError, match="temperature must be > 0"):
        make_level_buffer(4, temperature=0.0)
    with pytest.raises(ValueError, match="staleness_coef must be in"):
        make_level_buffer(4, staleness_coef=1.5)
    buffer = make_level_buffer(2)
    state = buffer.init(LEVEL)
    with pytest.raises(ValueError, match="batch of 3 levels does not fit a buffer of capacity 2; raise"):
        buffer.sample(state, jax.random.key(0), 3)
    with pytest.raises(ValueError, match="batch of 3 levels does not fit"):
        buffer.insert(state, levels([1, 2, 3]), jnp.zeros(3), jnp.zeros(3))


def test_draws_follow_the_replay_distribution():
    # No staleness term, so every draw of a batch comes from the same distribution.
    buffer = make_level_buffer(4, temperature=1.0, staleness_coef=0.0)
    state = filled_state(buffer, [0.5, 0.1, 0.9], last_seen=[0, 0, 0], clock=0)
    p = np.asarray(buffer.replay_distribution(state))
    np.testing.assert_allclose(p, np.array([1 / 2, 1 / 3, 1.0, 0.0]) / (11 / 6), atol=1e-6)
    draws = jax.jit(jax.vmap(lambda k: buffer.sample(state, k, 4)[1]))(
        jax.random.split(jax.random.key(3), 2000)
    )
    counts = np.bincount(np.asarray(draws).reshape(-1), minlength=4) / draws.size
    # 8000 draws: each frequency within 0.02 of its probability (about 4 standard deviations).
    np.testing.assert_allclose(counts, p, atol=0.02)


def test_insert_and_update_refuse_arguments_that_do_not_fit_the_buffer():
    buffer = make_level_buffer(8)
    state = buffer.init(LEVEL)
    batch = levels([1, 2, 3])
    with pytest.raises(
        ValueError, match=r"LevelBuffer\.insert: scores must be float \(num,\), one per level"
    ):
        buffer.insert(state, batch, jnp.zeros((3, 1)), jnp.zeros(3))
    with pytest.raises(
        ValueError,
        match=r"LevelBuffer\.insert: best_returns has shape \(2,\) but scores \(3,\); give one per level",
    ):
        buffer.insert(state, batch, jnp.zeros(3), jnp.zeros(2))
    with pytest.raises(
        ValueError,
        match=r"LevelBuffer\.insert: levels\['walls'\] has shape \(3, 4\), but the buffer holds levels\['walls'\] "
        r"of shape \(2,\) \(its init example's\); give a batch of 3 levels",
    ):
        buffer.insert(
            state, {"walls": jnp.zeros((3, 4), bool), "goal": jnp.arange(3)}, jnp.zeros(3), jnp.zeros(3)
        )
    with pytest.raises(
        ValueError, match=r"LevelBuffer\.insert: levels\['goal'\] has shape \(4,\).*batch of 3 levels"
    ):
        buffer.insert(state, levels([1, 2, 3, 4]), jnp.zeros(3), jnp.zeros(3))
    with pytest.raises(
        ValueError,
        match=r"LevelBuffer\.insert: levels\['goal'\] is float32, which the buffer's int32 levels\['goal'\]",
    ):
        buffer.insert(state, {**batch, "goal": jnp.array([0.5, 1.5, 2.5])}, jnp.zeros(3), jnp.zeros(3))
    with pytest.raises(ValueError, match=r"LevelBuffer\.insert: levels is a tuple but the buffer holds dict"):
        buffer.insert(state, (batch,), jnp.zeros(3), jnp.zeros(3))
    with pytest.raises(
        ValueError, match=r"LevelBuffer\.update: scores has shape \(2,\) but slots \(3,\); give one per slot"
    ):
        buffer.update(state, jnp.arange(3), jnp.zeros(2), jnp.zeros(2))
