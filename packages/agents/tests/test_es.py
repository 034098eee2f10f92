"""Evolution strategies through evosax: strategy lookup, population evaluation, learning."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents import PRESETS, ESConfig, make_es, make_es_runner, make_train
from lamella.agents.config import ConfigError, resolve_config
from lamella.agents.es import make_strategy, strategy_names
from lamella.envs import spaces


@pytest.mark.parametrize(
    ("name", "expected"),
    [("OpenES", "Open_ES"), ("cma-es", "CMA_ES"), ("snes", "SNES"), ("PGPE", "PGPE"), ("xNES", "xNES")],
)
def test_strategy_names_are_forgiving(name, expected):
    strategy, _ = make_strategy(ESConfig(strategy=name), {"w": jnp.zeros(3)})
    assert type(strategy).__name__ == expected


def test_bad_strategy_names_raise():
    with pytest.raises(ValueError, match="Unknown evosax strategy"):
        ESConfig(strategy="NotAnES").validate()
    with pytest.raises(ValueError, match="population-based"):
        ESConfig(strategy="SimpleGA").validate()
    with pytest.raises(ValueError, match="fitness_shaping"):
        ESConfig(fitness_shaping="ranks").validate()
    assert "CMA_ES" in strategy_names()


def test_a_population_of_one_or_an_odd_one_for_an_antithetic_strategy_names_the_fix():
    """One member: CMA-ES's state turned NaN silently; an odd population for Open_ES was evosax's
    bare AssertionError."""
    with pytest.raises(ValueError, match=r"^ESConfig\.population_size must be >= 2 .* got 1"):
        make_es_runner(ESConfig(strategy="CMA_ES", population_size=1))
    with pytest.raises(
        ValueError,
        match=r"^evosax Open_ES rejects population_size=7 .*use an even population_size \(e\.g\. 8\)",
    ):
        make_strategy(ESConfig(strategy="Open_ES", population_size=7), {"w": jnp.zeros(3)})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # Each trained silently: no search (0), a negative standard deviation, the env's limit.
        ({"sigma_init": 0.0}, r"^ESConfig\.sigma_init must be > 0 and finite .*got 0"),
        ({"sigma_init": -0.1}, r"^ESConfig\.sigma_init must be > 0 and finite .*got -0\.1"),
        ({"sigma_init": float("inf")}, r"^ESConfig\.sigma_init must be > 0 and finite .*got inf"),
        ({"max_episode_steps": -5}, r"^ESConfig\.max_episode_steps must be >= 0 \(.*env's own limit.*got -5"),
        ({"eval_max_steps": -1}, r"^ESConfig\.eval_max_steps must be >= 0 \(.*env's own limit.*got -1"),
    ],
)
def test_a_search_width_or_step_cap_out_of_range_names_the_field(change, message):
    with pytest.raises(ConfigError, match=message):
        dataclasses.replace(ESConfig(), **change).validate()


def test_sigma_and_fitness_shaping_reach_evosax():
    strategy, params = make_strategy(ESConfig(strategy="SNES", sigma_init=0.3), {"w": jnp.zeros(3)})
    np.testing.assert_allclose(params.std_init, 0.3)
    config = ESConfig(strategy="Open_ES", fitness_shaping="standardize", population_size=4)
    strategy, params = make_strategy(config, {"w": jnp.zeros(3)})
    fitness = jnp.array([1.0, 2.0, 3.0, 4.0])
    shaped = strategy.fitness_shaping_fn(None, fitness, None, params)
    np.testing.assert_allclose(shaped, (fitness - 2.5) / np.std([1, 2, 3, 4]), rtol=1e-5)


@pytest.mark.parametrize("strategy", ["Open_ES", "CMA_ES", "PGPE"])
def test_one_generation_of_several_strategies(strategy):
    config = ESConfig(
        strategy=strategy, population_size=8, num_rollouts=1, total_timesteps=8 * 500, eval_episodes=2
    )
    runner = make_es_runner(config)
    state, metrics = jax.jit(make_train(runner))(jax.random.key(0))
    assert metrics["episode_return"].shape == (1,)
    assert np.isfinite(np.asarray(metrics["episode_return"])).all()
    np.testing.assert_array_equal(state.iteration, 1)


def test_population_is_evaluated_by_vmap_over_parameters():
    config = ESConfig(population_size=4, hidden_sizes=(4,))
    agent, member, strategy, es_params = make_es(config, spaces.Box(-1, 1, (3,)), spaces.Discrete(2))
    train_state, memory = agent.init(jax.random.key(0))
    population, _ = strategy.ask(jax.random.key(1), train_state.es_state, es_params)
    obs = jax.random.normal(jax.random.key(2), (5, 3))
    actions = jax.vmap(lambda p: member.policy(jax.random.key(3), (p, None), obs, ())[0])(population)
    assert actions.shape == (4, 5)
    # Members differ, so their actions differ somewhere.
    assert len({tuple(a) for a in np.asarray(actions)}) > 1
    action, _, _ = agent.policy(jax.random.key(3), train_state, obs, memory)
    assert action.shape == (5,)


def test_normalize_observations_keeps_statistics_of_every_observation_played():
    """With ``normalize_observations`` the train state's statistics count every step the
    population played (the count starts at 1e-4), their mean lies inside CartPole's observed
    range, and the members and the mean act on standardised observations; without it the train
    state has no statistics, so checkpoints of such runs keep their layout."""
    config = ESConfig(
        population_size=4,
        num_rollouts=2,
        max_episode_steps=50,
        total_timesteps=2 * 4 * 2 * 50,
        eval_episodes=2,
    )
    runner = make_es_runner(dataclasses.replace(config, normalize_observations=True))
    state, metrics = jax.jit(make_train(runner))(jax.random.key(0))
    stats = state.train_state.obs_stats
    played = float(np.asarray(metrics["env_steps"]).sum())
    assert 2 * 4 * 2 <= played <= 2 * 4 * 2 * 50
    np.testing.assert_allclose(float(stats.count), played + 1e-4, rtol=1e-6)
    assert stats.mean.shape == stats.var.shape == (4,)
    assert np.all(np.abs(np.asarray(stats.mean)) < 2.0) and np.all(np.asarray(stats.var) > 0)
    # CartPole's observations are nowhere near unit variance, so the statistics moved off the
    # initial (mean 0, variance 1).
    assert not np.allclose(np.asarray(stats.var), 1.0, atol=1e-2)
    plain = jax.eval_shape(make_es_runner(config).init, jax.random.key(0))
    assert plain.train_state.obs_stats is None
    agent, _, _, _ = make_es(
        dataclasses.replace(config, normalize_observations=True), spaces.Box(-1, 1, (3,)), spaces.Discrete(2)
    )
    train_state, memory = agent.init(jax.random.key(0))
    with pytest.raises(ValueError, match="observations are missing"):
        agent.update((None, jnp.zeros(4), jax.random.key(1)), train_state, memory)


def test_es_solves_cartpole_for_three_seeds():
    runner = make_es_runner(PRESETS["es"]["CartPole-v1"])

    def run(key):
        state, metrics = make_train(runner)(key)
        # The GIF of lamella train es --gif: one greedy episode of the strategy's mean, drawn.
        return metrics, runner.evaluate(state, jax.random.key(99)), runner.render_episode(state, key)

    metrics, evaluation, (frames, lengths) = jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(0), 3))
    per_seed = np.asarray(evaluation["episode_return"]).mean(1)
    assert np.all(per_seed >= 475), f"greedy returns of the strategy mean per seed: {per_seed}"
    assert np.all(np.asarray(metrics["max_return"])[:, -1] >= 475)
    # The drawn episode is a balancing one too (>= 475 steps, plus the reset's frame), and the
    # cart and pole move in it.
    frames, lengths = np.asarray(frames), np.asarray(lengths)
    assert frames.shape[:2] == (3, 501) and frames.dtype == np.uint8
    assert np.all(lengths >= 476), lengths
    assert all((f[: n - 1] != f[n - 1]).any() for f, n in zip(frames, lengths, strict=True))


def test_es_budget_too_small_raises():
    with pytest.raises(ValueError, match="less than one generation"):
        make_es_runner(dataclasses.replace(ESConfig(), total_timesteps=100))


def test_es_refuses_a_multi_agent_env_naming_lamella_marl():
    with pytest.raises(
        ValueError,
        match=r"es trains single-agent envs; Foraging-8x8-2p-2f-coop-v3 has 2 agents\. Train it with ippo or mappo",
    ):
        make_es_runner(dataclasses.replace(ESConfig(), env_id="Foraging-8x8-2p-2f-coop-v3"))


def test_a_learning_rate_for_a_strategy_without_an_optimiser_is_refused():
    """CMA-ES takes no optimiser: its learning_rate was accepted and never read."""
    with pytest.raises(
        ConfigError,
        match=r"^ESConfig\.learning_rate=0\.01 .*CMA_ES takes no optimiser, so it is never read; "
        r"pick a strategy that takes one \(.*Open_ES.*\), or leave learning_rate at 0\.05",
    ):
        resolve_config("es", overrides=["strategy=CMA_ES", "learning_rate=0.01"])
    # The Pendulum preset's learning rate (Open_ES's) is no error when a user picks CMA-ES.
    assert resolve_config("es", "Pendulum-v1", overrides=["strategy=CMA_ES"]).learning_rate == 0.02
    resolve_config("es", overrides=["strategy=Open_ES", "learning_rate=0.01"])
