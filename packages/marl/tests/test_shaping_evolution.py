"""Evolved meta-agents (M-FOS with ES) against exact-gradient naive learners on the infinite IPD."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents.config import ConfigError, resolve_config
from lamella.agents.runner import make_train
from lamella.marl.shaping.evolution import MetaESConfig, make_meta_es_runner, make_search

SEEDS = 3
GENERATIONS = 100
SMALL = MetaESConfig(
    strategy="Open_ES",
    population_size=32,
    num_opps=2,
    num_envs=2,
    num_outer_steps=50,
    total_timesteps=GENERATIONS * 32 * 2 * 50,
)


@pytest.fixture(scope="module")
def es_metrics():
    """Per-generation metrics ``(seed, generation)`` of OpenES vs NL, 3 seeds in one compile."""
    runner = make_meta_es_runner(SMALL)
    assert runner.num_iterations == GENERATIONS

    def train_and_draw(key):  # with the episode --gif draws from the final state
        state, metrics = make_train(runner)(key)
        frames, length = runner.render_episode(state, jax.random.fold_in(key, 1))
        return {**metrics, "frames": frames, "length": length}

    return jax.tree.map(
        np.asarray, jax.jit(jax.vmap(train_and_draw))(jax.random.split(jax.random.key(0), SEEDS))
    )


def test_es_meta_agent_extorts_a_naive_learner(es_metrics):
    # The last 10 generations' members, each against freshly drawn naive learners (new opponents
    # every generation): mean per-step exact value over a 50-step outer episode.
    meta = es_metrics["episode_return"][:, -10:].mean(-1)
    naive = es_metrics["opponent_return"][:, -10:].mean(-1)
    first = es_metrics["episode_return"][:, 0]
    assert np.all(meta > -1.0) and np.all(naive < -1.0), (
        f"meta-agent {meta.round(3).tolist()} (want > -1, better than mutual cooperation) vs naive learner "
        f"{naive.round(3).tolist()} (want < -1) mean per-step reward per seed; first generation {first.round(3)}"
    )
    assert np.all(meta > first + 0.5), f"ES improved the meta-agent only from {first} to {meta}"


def test_the_gif_draws_the_evolved_meta_agent_extorting_a_fresh_learner(es_metrics, drawn_values):
    """``render_episode`` (``lamella train mfos_es --gif``): one outer episode of the search's
    centre against a fresh naive learner in the meta-game M-FOS-RL plays, each frame the pair of
    policies just played (``LearningOpponentGame.render``). Scored from the drawn policies alone
    (read back from the bars), the episode is the outcome above: the meta-agent above mutual
    cooperation's -1 per step, the learner below it (measured: -0.48 and -2.2 on every seed)."""
    frames, length = es_metrics["frames"], es_metrics["length"]
    assert frames.shape[1:] == (SMALL.num_outer_steps + 1, 140, 130, 3)
    assert np.all(length == SMALL.num_outer_steps + 1)
    values = drawn_values(frames[:, 1:]).mean(1)  # (seed, player): the played pairs' mean values
    assert np.all(values[:, 0] > -1.0) and np.all(values[:, 1] < -1.0), values


@pytest.mark.parametrize("strategy", ["Open_ES", "CMA_ES", "PGPE", "SimpleGA"])
def test_search_strategies_climb_a_concave_fitness(strategy):
    target = jnp.asarray([1.0, -0.5, 0.25, 2.0])
    start = {"w": jnp.zeros(4)}
    search = make_search(strategy, 16, start, sigma_init=0.3, learning_rate=0.1)

    def fitness(params):
        return -jnp.sum((params["w"] - target) ** 2)

    def generation(state, key):
        key_ask, key_tell = jax.random.split(key)
        population, state = search.ask(key_ask, state)
        state, _ = search.tell(key_tell, population, jax.vmap(fitness)(population), state)
        return state, None

    @jax.jit
    def run(key):
        state = search.init(key, start)
        state, _ = jax.lax.scan(generation, state, jax.random.split(key, 60))
        return fitness(search.center(state))

    final = float(run(jax.random.key(0)))
    initial = float(fitness(start))
    assert final > 0.2 * initial, (
        f"{strategy}: fitness {initial:.3f} at the start, {final:.3f} after 60 generations"
    )


def test_bad_input_is_rejected_with_the_fix():
    solution = {"w": jnp.zeros(3)}
    with pytest.raises(
        ValueError, match=r"Open_ES rejects population_size=7.*even population_size \(e.g. 8\)"
    ):
        make_search("OpenES", 7, solution)
    with pytest.raises(ValueError, match=r"PGPE rejects population_size=5"):
        make_search("pgpe", 5, solution)
    with pytest.raises(ValueError, match=r"CMA_ES turns fitness into its recombination weights.*'default'"):
        make_search("CMA-ES", 8, solution, fitness_shaping="centered_rank")
    with pytest.raises(ValueError, match="Unknown evosax strategy 'NotAnES'"):
        make_search("NotAnES", 8, solution)
    with pytest.raises(ValueError, match=r"num_opps \(3\) must divide num_envs \(4\).*e.g. num_envs=3"):
        MetaESConfig(num_opps=3, num_envs=4).validate()
    with pytest.raises(ValueError, match=r"MetaESConfig.payoff.*shape \(2, 2, 2\)"):
        MetaESConfig(payoff=np.zeros((3, 3))).validate()
    with pytest.raises(ValueError, match="must name an InfiniteMatrixGame"):
        make_meta_es_runner(MetaESConfig(env_id="IteratedMatrixGame-v0"))
    with pytest.raises(ValueError, match="less than one generation"):
        make_meta_es_runner(MetaESConfig(total_timesteps=10))
    with pytest.raises(ValueError, match="opponent must be one of"):
        MetaESConfig(opponent="ppo").validate()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # A search scale of 0 never moves, a negative one is none: both ran without a word.
        (
            {"sigma_init": 0.0},
            r"MetaESConfig.sigma_init must be a finite number > 0.*got 0; e.g. sigma_init=0.1",
        ),
        ({"sigma_init": -0.1}, r"MetaESConfig.sigma_init must be a finite number > 0.*got -0.1"),
        ({"learning_rate": -1.0}, r"MetaESConfig.learning_rate must be >= 0"),
        ({"opponent_lr": float("nan")}, r"MetaESConfig.opponent_lr is NaN"),
        ({"payoff": (float("nan"),) * 8}, r"MetaESConfig.payoff is NaN"),
        ({"hidden_sizes": (0,)}, r"MetaESConfig.hidden_sizes must hold sizes >= 1"),
    ],
)
def test_meta_es_config_refuses_numbers_out_of_range(changes, message):
    with pytest.raises(ValueError, match=message):
        MetaESConfig(**changes).validate()


def test_make_search_refuses_a_scale_that_is_not_positive():
    with pytest.raises(ValueError, match=r"sigma_init must be a finite number > 0.*got -1"):
        make_search("Open_ES", 8, {"w": jnp.zeros(3)}, sigma_init=-1.0)


@pytest.mark.parametrize("payoff", [None, (-1, -1, -3, 0, 0, -3, -2, -2)])
def test_the_runner_builds_inside_a_trace(payoff):
    # lamella eval report builds each checkpoint's runner inside jax.jit to draw its episode; the
    # GIF's game read its discount with float() of a traced array there (ConcretizationTypeError),
    # and a payoff override (payoff=... on the command line) became a traced array that the GIF's
    # InfiniteMatrixGame turned into numpy (TracerArrayConversionError).
    config = MetaESConfig(
        population_size=4, num_opps=1, num_envs=1, num_outer_steps=3, total_timesteps=12, payoff=payoff
    )

    def build_and_draw(key):
        runner = make_meta_es_runner(config)
        return runner.render_episode(runner.init(key), key)

    frames, length = jax.eval_shape(build_and_draw, jax.random.key(0))
    assert frames.shape[0] == config.num_outer_steps + 1
    assert length.shape == ()


@pytest.mark.parametrize("strategy", ["CMA_ES", "SimpleGA"])
def test_a_learning_rate_of_a_strategy_without_an_optimiser_is_refused(strategy):
    # CMA-ES and the genetic algorithms take no optimiser; before, the rate was accepted and never read.
    with pytest.raises(
        ConfigError, match=rf"MetaESConfig.learning_rate=0.2 .*{strategy} takes no optimiser.*Open_ES.*0.05"
    ):
        resolve_config("mfos_es", None, None, [f"strategy={strategy}", "learning_rate=0.2"])
    resolve_config("mfos_es", None, None, [f"strategy={strategy}"])
    resolve_config("mfos_es", None, None, ["strategy=Open_ES", "learning_rate=0.2"])
