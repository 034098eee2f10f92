"""Exact-gradient learners on the infinite IPD: values, updates, and the documented outcomes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.envs.multi_agent.infinite_matrix_game import memory_one_values
from lamella.envs.multi_agent.matrix_game import PAYOFFS
from lamella.marl.shaping import exact

IPD = PAYOFFS["prisoners_dilemma"]
GAME = exact.ExactGame.prisoners_dilemma()
# Jitted once: op-by-op dispatch of the solve and its derivatives costs seconds per call.
values = jax.jit(exact.exact_values)
SEEDS = 3
PAIRINGS = {"nl_vs_nl": (0.0, 0.0), "lola_vs_lola": (1.0, 1.0), "lola_vs_nl": (1.0, 0.0)}


def test_exact_values_equal_the_envs_closed_form_and_the_reference_table():
    thetas = jnp.asarray(np.random.default_rng(0).normal(size=(6, 2, 5)).astype(np.float32))
    expected = jax.jit(jax.vmap(lambda p, q: memory_one_values(p, q, IPD, 0.96)))(
        jax.nn.sigmoid(thetas[:, 0]), jax.nn.sigmoid(thetas[:, 1])
    )
    got = jax.vmap(values, in_axes=(0, 0, None))(thetas[:, 0], thetas[:, 1], GAME)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    tft, all_d = exact.make_fixed_learner("tit_for_tat"), exact.make_fixed_learner("all_d")
    key = jax.random.key(0)
    # TFT vs ALL-D from the reference note's numpy port of Pax's formula: (-2.04, -1.92).
    np.testing.assert_allclose(values(tft.init(key), all_d.init(key), GAME), (-2.04, -1.92), atol=1e-3)


def test_swap_roles_puts_the_other_player_first():
    payoff = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    swapped = np.asarray(exact.swap_roles(payoff))
    for a0 in range(2):
        for a1 in range(2):
            np.testing.assert_array_equal(swapped[a1, a0], payoff[a0, a1][::-1])
    theta = np.random.default_rng(1).normal(size=(2, 5)).astype(np.float32)
    game = exact.ExactGame.make(payoff, 0.9)
    np.testing.assert_allclose(
        values(theta[1], theta[0], game.swapped()),
        np.asarray(values(theta[0], theta[1], game))[::-1],
        atol=1e-5,
    )


def test_naive_step_is_the_gradient_of_the_unnormalised_return_and_lola_adds_its_correction():
    theta = np.random.default_rng(2).normal(size=(2, 5)).astype(np.float32)
    own, other = jnp.asarray(theta[0]), jnp.asarray(theta[1])
    # Central finite differences of the unnormalised return V / (1 - gamma).
    eps = 1e-2
    steps = eps * jnp.eye(5)
    plus = jax.vmap(values, in_axes=(0, None, None))(own + steps, other, GAME)[:, 0]
    minus = jax.vmap(values, in_axes=(0, None, None))(own - steps, other, GAME)[:, 0]
    grad = (plus - minus) / (2 * eps) / (1 - 0.96)
    naive = jax.jit(exact.make_naive_learner(lr=0.5).update)(own, other, GAME)
    np.testing.assert_allclose(naive - own, 0.5 * grad, rtol=2e-2, atol=2e-3)
    # lookahead_lr=0 is the naive learner; a positive one changes the step (one compile for both).
    lola_step = jax.jit(lambda la: exact.make_lola_learner(lr=0.5, lookahead_lr=la).update(own, other, GAME))
    np.testing.assert_allclose(lola_step(0.0), naive, atol=1e-5)
    lola = lola_step(0.5)
    assert float(jnp.abs(lola - naive).max()) > 1e-3


def test_the_learners_call_no_lapack_routine():
    # A batched LU call per update was 8x slower for 4,000 games and, with jaxlib 0.10.2, could
    # deadlock XLA's CPU thread pool (M-FOS's RL runner on Pax's 4,000 games hung on 2 cores).
    thetas = jnp.zeros((8, 5))
    for learner in (exact.make_naive_learner(), exact.make_lola_learner()):
        lowered = jax.jit(jax.vmap(lambda a, b, learner=learner: learner.update(a, b, GAME))).lower(
            thetas, thetas
        )
        assert "lapack" not in lowered.as_text().lower()
    # What jnp.linalg.solve lowers to on the CPU, so the check above checks something.
    solve = jax.jit(jax.vmap(jnp.linalg.solve)).lower(jnp.ones((8, 4, 4)), jnp.ones((8, 4)))
    assert "lapack" in solve.as_text().lower()


def test_fixed_learner_plays_its_strategy_and_never_moves():
    tft = exact.make_fixed_learner("tit_for_tat")
    theta = tft.init(jax.random.key(0))
    np.testing.assert_allclose(jax.nn.sigmoid(theta), [1, 1, 0, 1, 0], atol=1e-6)
    np.testing.assert_array_equal(tft.update(theta, jnp.zeros(5), GAME), theta)
    random = exact.make_fixed_learner("random").init(jax.random.key(0))
    np.testing.assert_allclose(random, np.zeros(5), atol=1e-6)


@pytest.fixture(scope="module")
def outcomes():
    """Mean per-step reward ``(pairing, seed, player)`` over 100 steps, batch 32, one compile.

    NL is LOLA with ``lookahead_lr=0``, so the three pairings are one program
    vmapped over the two learners' (traced) look-ahead rates.
    """

    def one(key, lookahead):
        play = exact.make_exact_play(
            exact.make_lola_learner(lookahead_lr=lookahead[0]),
            exact.make_lola_learner(lookahead_lr=lookahead[1]),
            num_steps=100,
            batch_size=32,
        )
        return play(key, GAME)["reward"].mean(axis=(0, 1))

    run = jax.jit(jax.vmap(jax.vmap(one, in_axes=(0, None)), in_axes=(None, 0)))
    keys = jax.random.split(jax.random.key(0), SEEDS)
    rewards = np.asarray(run(keys, jnp.asarray(list(PAIRINGS.values()))))
    return dict(zip(PAIRINGS, rewards, strict=True))


def test_exact_gradient_outcomes_nl_defect_lola_cooperates_lola_beats_nl(outcomes):
    # One test for the three pairings: under xdist a module fixture shared by several tests is
    # compiled once per worker.
    naive = outcomes["nl_vs_nl"]
    assert np.all(naive < -1.9), (
        f"NL vs NL mean per-step rewards (seed, player) {naive.round(3).tolist()}, want < -1.9"
    )
    lola = outcomes["lola_vs_lola"]
    assert np.all(lola > -1.2), (
        f"LOLA vs LOLA mean per-step rewards (seed, player) {lola.round(3).tolist()}, want > -1.2"
    )
    head = outcomes["lola_vs_nl"]
    assert np.all(head[:, 0] > head[:, 1] + 0.1), (
        f"LOLA {head[:, 0].round(3).tolist()} vs NL {head[:, 1].round(3).tolist()} mean per-step rewards per "
        "seed; want LOLA ahead by > 0.1 in every seed"
    )
    # And LOLA does better against NL than NL does against NL.
    assert np.all(head[:, 0] > naive[:, 0])


def test_naive_learner_against_fixed_strategies_cooperates_with_tft_and_defects_against_all_d():
    # Pax's documented finite-game outcome (TitForTat -> ALL-C; Defect -> ALL-D), on the exact game.
    # A fixed co-player is an ExactLearner whose update returns its logits; one compile for both.
    fixed = jnp.stack(
        [exact.make_fixed_learner(name).init(jax.random.key(0)) for name in ("tit_for_tat", "all_d")]
    )

    def one(logits, key):
        opponent = exact.ExactLearner(lambda _key: logits, lambda theta, other, game: theta)
        return exact.make_exact_play(exact.make_naive_learner(), opponent, num_steps=60, batch_size=16)(
            key, GAME
        )

    out = jax.jit(jax.vmap(jax.vmap(one, in_axes=(None, 0)), in_axes=(0, None)))(
        fixed, jax.random.split(jax.random.key(1), SEEDS)
    )
    final = np.asarray(out["reward"][:, :, -1, :, 0].mean(-1))  # (opponent, seed): NL's last-step value
    coop = np.asarray(out["policy"][:, :, -1, :, 0].mean((-2,)))  # (opponent, seed, 5): NL's final policy
    assert np.all(final[0] > -1.05), (
        f"NL vs TFT last-step value per seed {final[0].round(3).tolist()}, want > -1.05 (CC)"
    )
    assert np.all(final[1] < -1.95), (
        f"NL vs ALL-D last-step value per seed {final[1].round(3).tolist()}, want < -1.95"
    )
    # Against ALL-D only the start and the states after the other's defection (CD, DD) are visited.
    visited = coop[1][:, [0, 2, 4]]
    assert np.all(visited < 0.1), (
        f"NL's cooperation vs ALL-D (start, CD, DD) per seed {visited.round(3).tolist()}"
    )


def test_bad_input_is_rejected_with_the_fix():
    with pytest.raises(ValueError, match=r"shape \(2, 2, 2\).*reshape\(2, 2, 2\)"):
        exact.ExactGame.make(np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\)"):
        exact.ExactGame.make(IPD, gamma=1.0)
    with pytest.raises(ValueError, match=r"lr must be a finite number >= 0"):
        exact.make_naive_learner(lr=-1.0)
    with pytest.raises(ValueError, match=r"logits must have shape \(5,\)"):
        exact.exact_values(jnp.zeros(4), jnp.zeros(5), GAME)
    with pytest.raises(ValueError, match="Unknown strategy"):
        exact.make_fixed_learner("tit_for_two_tats")
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        exact.make_exact_play(exact.make_naive_learner(), exact.make_naive_learner(), batch_size=0)
    # A fraction ran int(2.5) = 2 steps silently; NaN was int()'s "cannot convert float NaN to integer".
    with pytest.raises(ValueError, match=r"make_exact_play: num_steps must be a whole number >= 1, got 2.5"):
        exact.make_exact_play(exact.make_naive_learner(), exact.make_naive_learner(), num_steps=2.5)
    with pytest.raises(
        ValueError, match=r"make_exact_play: warmup_updates must be a whole number >= 0, got nan"
    ):
        exact.make_exact_play(
            exact.make_naive_learner(), exact.make_naive_learner(), warmup_updates=float("nan")
        )
    # A learner's name or its factory where the learner goes (an AttributeError when play ran).
    with pytest.raises(
        TypeError, match=r"learner_0 must be an ExactLearner.*got 'lola' \(str\).*make_lola_learner\(\)"
    ):
        exact.make_exact_play("lola", exact.make_naive_learner())
    with pytest.raises(TypeError, match=r"learner_1 must be an ExactLearner.*make_lola_learner \(function\)"):
        exact.make_exact_play(exact.make_naive_learner(), exact.make_lola_learner)


def test_a_game_built_without_make_is_checked_where_it_is_used():
    # ExactGame(payoff, 1.0) skips ExactGame.make's check: gamma=1 made every value NaN, silently.
    bad = exact.ExactGame(jnp.asarray(IPD), jnp.float32(1.0))
    theta = jnp.zeros(5)
    message = r"gamma must be in \[0, 1\) \(the infinite sum diverges at 1\), got 1.0.*ExactGame.make"
    with pytest.raises(ValueError, match=r"exact_values: " + message):
        exact.exact_values(theta, theta, bad)
    with pytest.raises(ValueError, match=message):
        exact.make_naive_learner().update(theta, theta, bad)
    with pytest.raises(ValueError, match=r"play: " + message):
        exact.make_exact_play(exact.make_naive_learner(), exact.make_naive_learner())(jax.random.key(0), bad)
    with pytest.raises(ValueError, match=r"exact_values: gamma must be in \[0, 1\).*got -0.5"):
        exact.exact_values(theta, theta, exact.ExactGame(jnp.asarray(IPD), -0.5))
    with pytest.raises(
        ValueError, match=r"exact_values\(game.payoff\): every entry must be a finite number, got nan"
    ):
        exact.exact_values(theta, theta, exact.ExactGame(jnp.full((2, 2, 2), jnp.nan), jnp.float32(0.9)))
    # make read only Python numbers: a NumPy or JAX 1.0 passed.
    for gamma in (np.float32(1.0), jnp.float32(1.0), np.array(1.5)):
        with pytest.raises(ValueError, match=r"ExactGame.make: gamma must be in \[0, 1\)"):
            exact.ExactGame.make(IPD, gamma)
    # A traced gamma (a sweep under jit or vmap) is not read.
    swept = jax.eval_shape(lambda g: exact.exact_values(theta, theta, exact.ExactGame.make(IPD, g)), 1.0)
    assert swept.shape == (2,)


def test_bad_learner_settings_are_refused_before_anything_runs():
    # A NumPy or JAX number is checked like a Python one (a negative lr descends: silently wrong).
    with pytest.raises(ValueError, match=r"make_naive_learner: lr must be a finite number >= 0, got -1"):
        exact.make_naive_learner(lr=np.float32(-1.0))
    with pytest.raises(ValueError, match=r"make_lola_learner: lr must be a finite number >= 0, got -0.5"):
        exact.make_lola_learner(lr=jnp.float32(-0.5))
    with pytest.raises(TypeError, match=r"lr must be one number, e.g. 1.0, got '0.1' \(str\)"):
        exact.make_naive_learner(lr="0.1")
    # init_scale was not checked: NaN or inf logits from the first init.
    with pytest.raises(
        ValueError, match=r"make_naive_learner: init_scale must be a finite number >= 0, got nan"
    ):
        exact.make_naive_learner(init_scale=float("nan"))
    with pytest.raises(
        ValueError, match=r"make_lola_learner: init_scale must be a finite number >= 0, got -1"
    ):
        exact.make_lola_learner(init_scale=-1.0)
    with pytest.raises(TypeError, match=r"init_scale must be one number.*\(list\)"):
        exact.make_lola_learner(init_scale=[1.0, 2.0])
    with pytest.raises(
        ValueError, match=r"a name \(all_c.*or 5 cooperation probabilities.*got \{'p': 0.5\} \(dict\)"
    ):
        exact.make_fixed_learner({"p": 0.5})
    # A traced learning rate (a sweep) is not read: it still builds.
    lr = jax.jit(lambda lr: exact.make_naive_learner(lr=lr).update(jnp.zeros(5), jnp.zeros(5), GAME))
    assert lr(0.5).shape == (5,)
