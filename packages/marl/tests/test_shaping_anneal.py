"""Annealed self-play in the meta runner (``MetaConfig.self_play_anneal``, Pax's ``self_play_anneal``).

Every generation each seat plays the meta-agent with probability ``generation / num_iterations``,
at least one seat; the count is data in one compiled program (``lax.switch`` over one outer
episode per count), logged as ``meta_seats``.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from lamella.agents.config import ConfigError
from lamella.marl.shaping.meta import (
    MetaConfig,
    _outer_episode_by_seats,
    draw_meta_seats,
    make_meta_runner,
    make_outer_episode,
)
from lamella.marl.shaping.presets import PRESETS

# The 3-player IPD at the smallest scale that still has a learner: 2 members, 2 envs, 4-round
# inner episodes, one per outer episode.
SMALL = MetaConfig(
    env_id="IteratedTensorGame-v0",
    num_players=3,
    population_size=2,
    num_envs=2,
    num_opponents=1,
    num_inner_steps=4,
    num_outer_steps=1,
    num_minibatches=1,
    self_play_anneal=True,
)


def _expected_seats(probability, players):
    """E[max(1, Binomial(players, p))] = n p + P(no seat drawn)."""
    return players * probability + (1 - probability) ** players


def test_seat_draw_follows_the_annealing():
    """``draw_meta_seats`` over 50 generations x 400 keys, for 2 and 3 players: generation 0 is
    always 1 seat; each generation's mean count is ``n p + (1 - p) ** n`` within 5 standard
    errors; early generations mostly 1 seat, late ones mostly all."""
    generations, draws = 50, 400
    for players in (2, 3):
        keys = jax.random.split(jax.random.key(players), (generations, draws))
        draw = jax.vmap(jax.vmap(draw_meta_seats, in_axes=(0, None, None, None)), in_axes=(0, 0, None, None))
        seats = np.asarray(
            jax.jit(draw, static_argnums=(2, 3))(keys, np.arange(generations), generations, players)
        )
        assert seats.min() == 1 and seats.max() == players
        assert (seats[0] == 1).all()
        probability = np.arange(generations) / generations
        expected = _expected_seats(probability, players)
        standard_error = np.maximum(seats.std(1), 0.05) / np.sqrt(draws)
        np.testing.assert_array_less(np.abs(seats.mean(1) - expected), 5 * standard_error)
        assert (seats[:5] == 1).mean() > 0.8, (seats[:5] == 1).mean()
        assert (seats[-5:] == players).mean() > 0.8, (seats[-5:] == players).mean()


def test_annealed_run_is_one_program_and_draws_the_seats():
    """40 generations on the 3-player IPD, the runner's jitted step called once per generation:
    ``meta_seats`` starts at 1, averages near the annealing's expectation, mostly 1 in the first
    quarter and mostly 3 in the last, and the counts change with no second compile: the state
    starts strongly typed (as the driver's ``init`` makes it), so the step compiles once, for
    every generation."""
    config = dataclasses.replace(SMALL, total_timesteps=40 * SMALL.steps_per_iteration)
    runner = make_meta_runner(config)
    step = jax.jit(runner.step)
    # A Python scalar in the init's state is weakly typed and the step returns it strong: without
    # this, the first call's program would be compiled a second time for the second call.
    state = jax.tree.map(_strong, runner.init(jax.random.key(0)))
    seats, returns = [], []
    for _ in range(config.num_iterations):
        state, metrics = step(state)
        seats.append(float(metrics["meta_seats"]))
        returns.append(float(metrics["episode_return"]))
    assert step._cache_size() == 1
    seats = np.asarray(seats)
    print("meta seats per generation:", seats.astype(int))
    assert set(np.unique(seats)) == {1.0, 2.0, 3.0}
    assert seats[0] == 1.0
    expected = _expected_seats(np.arange(40) / 40, 3)
    # Each generation's count has variance at most 0.75: the mean's standard error is < 0.14.
    assert abs(seats.mean() - expected.mean()) < 0.45, (seats.mean(), expected.mean())
    assert (seats[:10] == 1).mean() >= 0.6 and (seats[-10:] == 3).mean() >= 0.6, seats
    assert np.isfinite(returns).all()


def _strong(x):
    """``x`` without a weak type (keys, an extended dtype, as they are)."""
    if isinstance(x, jax.Array) and not jax.dtypes.issubdtype(x.dtype, jax.dtypes.extended):
        return jax.lax.convert_element_type(x, x.dtype)
    return x


def test_each_seat_count_plays_its_seats():
    """The switch plays the meta-agent in the drawn number of seats: an always-defecting meta-agent
    (payoff[k, a] for k defectors: C 4, 2, 0; D 5, 3, 1) cooperates 0 times at every count; with
    2 seats its single co-player's reward is ``1 - c`` and its own ``1 + 2c`` (``c`` the
    co-player's cooperation), with 3 seats every reward is 1 and nothing learns (KL 0)."""
    config = dataclasses.replace(SMALL, num_outer_steps=2)
    outer_episode, players = _outer_episode_by_seats(config)
    assert players == 3
    _, init_params = make_outer_episode(dataclasses.replace(config, self_play_anneal=False))
    defect = jax.tree.map(np.zeros_like, init_params(jax.random.key(0)))
    defect["params"]["head"]["Dense_0"]["bias"] = np.array([-20.0, 20.0], np.float32)
    play = jax.jit(outer_episode)
    for seats in (1, 2, 3):
        out = play(defect, jax.random.key(1), np.int32(seats))
        c = float(out["co_player_cooperation"])
        assert float(out["meta_cooperation"]) == 0.0, seats
        if seats == 1:
            assert 1.0 < float(out["meta_return"]) < 5.0
        elif seats == 2:
            np.testing.assert_allclose(out["co_player_return"], 1 - c, atol=1e-5)
            np.testing.assert_allclose(out["meta_return"], 1 + 2 * c, atol=1e-5)
        else:
            assert c == 0.0
            np.testing.assert_allclose([out["meta_return"], out["co_player_return"]], 1.0, atol=1e-6)
            assert not np.asarray(out["co_player_first_minibatch_kl"]).any()
    assert play._cache_size() == 1


def test_fixed_seats_unchanged_and_refusals():
    """Without ``self_play_anneal`` nothing is drawn and no ``meta_seats`` is logged; with it a
    fixed ``meta_roles`` is refused before anything compiles; the preset has it."""
    runner = make_meta_runner(dataclasses.replace(SMALL, self_play_anneal=False, meta_roles=2))
    metrics = jax.eval_shape(runner.step, jax.eval_shape(runner.init, jax.random.key(0)))[1]
    assert "meta_seats" not in metrics
    with pytest.raises(
        ConfigError, match=r"meta_roles \(2\) with self_play_anneal=True.*leave meta_roles at 1"
    ):
        make_meta_runner(dataclasses.replace(SMALL, meta_roles=2))
    preset = PRESETS["meta_es"]["shaper_v_ppo_3p_self_play_anneal"]
    assert (preset.env_id, preset.num_players, preset.meta_roles) == ("IteratedTensorGame-v0", 3, 1)
    assert preset.self_play_anneal
    preset.validate()
