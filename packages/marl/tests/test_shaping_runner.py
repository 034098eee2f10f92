"""The opponent-shaping runner: Pax's documented outcomes against fixed strategies, the watchers,
the driver (run log, resume), and bad input.

Outcomes (Pax ``docs/experiments.md``, reference note MARL.md 5.5: PPO vs TitForTat -> ALL-C;
PPO vs Defect / Altruistic -> ALL-D) on Pax's IPD (CC -1, CD -3, DC 0, DD -2; 100 rounds;
discount 0.96), 16 envs x 100 steps per iteration, 20 iterations (32,000 env steps per seed),
three seeds. PPO vs TitForTat runs through the driver (3 seeds in one program, stopped after
10 iterations and resumed); PPO vs ALL-D and vs ALL-C are one program of 2 x 3 members (the
strategy's table is a vmapped train state). Baselines per step for the learner (exact, from the
payoff):

* vs TitForTat: ALL-C earns -1 (CC every round), ALL-D -2, random about -1.5 (measured at
  iteration 0: -1.50, -1.50, -1.48).
* vs ALL-D: ALL-D earns -2, ALL-C -3, random about -2.5 (measured -2.49, -2.49, -2.51).
* vs ALL-C: ALL-D earns 0, ALL-C -1, random about -0.5.

Measured when the test was written (seeds 0, 1, 2): vs TitForTat, over iterations 11-20,
P(C | CC) 0.9975, 0.9968, 0.9949 and reward -1.003, -1.005, -1.007 per step (evaluation returns
-100.25, -100.13, -100.5 over 100 rounds); vs ALL-D at the last iteration P(D | DD) 0.997,
0.998, 0.997 and reward -2.002, -2.002, -2.004; vs ALL-C P(D | DC) 1.0, 1.0, 1.0 and reward
0.0, 0.0, -0.001.
"""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents.config import ConfigError, resolve_config
from lamella.agents.driver import run_experiment
from lamella.agents.protocol import Agent
from lamella.envs.cli import main as lamella_main
from lamella.marl.shaping import make_memory_one_agent, strategy
from lamella.marl.shaping.presets import SHAPING_PRESETS
from lamella.marl.shaping.runner import ShapingConfig, make_shaping_runner
from lamella.marl.shaping.watchers import STATE_NAMES, empirical_cooperation, own_coin_share, state_visits

SEEDS = jax.random.split(jax.random.key(0), 3)
OUTCOME = ShapingConfig(total_timesteps=32_000, num_envs=16, num_steps=100)


def table_agent():
    """A memory-one strategy whose cooperation table (by observation: CC, CD, DC, DD, START) is
    its train state, so one compiled program plays several strategies (a vmap over tables).
    It acts as :func:`make_memory_one_agent` does: cooperate (0) with the table's probability."""

    def init(key, obs_example=None):
        return jnp.zeros((5,), jnp.float32), ()

    def policy(key, table, obs, memory, eval=False):
        cooperate = obs @ table
        return (jax.random.uniform(key, cooperate.shape) >= cooperate).astype(jnp.int32), table, memory

    return Agent(
        init, policy, lambda trajectory, table, memory: (table, memory, {}), lambda memory, eval=False: ()
    )


def against_tables(tables):
    """The last iteration's metrics of PPO against each table, 3 seeds each, one program."""
    runner = make_shaping_runner(OUTCOME, agents=["ppo", table_agent()])

    def train(key, table):
        state = runner.init(key)
        state = state.replace(train_states=(state.train_states[0], table[None]))
        return jax.lax.scan(lambda s, _: runner.step(s), state, None, length=runner.num_iterations)

    keys = jnp.concatenate([SEEDS] * len(tables))
    table_of = jnp.repeat(jnp.asarray(np.stack(tables)), len(SEEDS), axis=0)
    _, metrics = jax.jit(jax.vmap(train))(keys, table_of)
    return {
        name: np.asarray(value[:, -1]).reshape(len(tables), len(SEEDS), -1) for name, value in metrics.items()
    }


@pytest.fixture(scope="module")
def versus_tit_for_tat(tmp_path_factory):
    """PPO vs TitForTat through the driver: stopped after the first of two chunks of 10
    iterations, resumed to the end, and run again without stopping (the same compiled programs)."""
    out = tmp_path_factory.mktemp("shaping")
    config = dataclasses.replace(OUTCOME, agents=("ppo", "tit_for_tat"))
    common = {"seeds": 3, "chunk_iterations": 10, "progress": False, "plot": False}
    first = run_experiment(config, out_dir=out / "run", max_chunks=1, **common)
    second = run_experiment(config, out_dir=out / "run", resume=True, **common)
    whole = run_experiment(config, out_dir=out / "whole", gif=True, **common)
    log = json.loads((out / "run" / "metrics.json").read_text())
    runs = log["multi_agent"]["IteratedPrisonersDilemma-v0"]["shaping"]
    steps = lambda run: [name for name in run if name.startswith("step_")]  # noqa: E731
    last = [runs[seed][max(steps(runs[seed]), key=lambda step: int(step[5:]))] for seed in sorted(runs)]
    return first, second, whole, out, last


@pytest.fixture(scope="module")
def versus_defector_and_altruist():
    """PPO vs ALL-D and PPO vs ALL-C (Pax's Defect and Altruistic), 3 seeds each, one program."""
    by_obs = lambda name: strategy(name)[[1, 2, 3, 4, 0]]  # noqa: E731  (start, CC, ...) -> obs order
    return against_tables([by_obs("all_d"), by_obs("all_c")])


def test_ppo_against_tit_for_tat_learns_to_cooperate(versus_tit_for_tat):
    last = versus_tit_for_tat[-1]  # per seed: the run log's last entry (train_* are means of its chunk)
    assert len(last) == 3
    for logged in last:
        entry = {key: value[0] if key.startswith("train_") else value for key, value in logged.items()}
        for key in ("mean_episode_return", "train_learner_0_policy_loss", "train_cooperation_START_agent_1"):
            assert key in entry, sorted(entry)
        # ALL-C: cooperates where it lives (CC) with probability >= 0.9 over iterations 10-19 ...
        assert entry["train_cooperation_CC_agent_0"] >= 0.9, entry
        assert entry["train_visits_CC_agent_0"] >= 0.9, entry
        # ... and earns the ALL-C value -1 per step (within 0.05; ALL-D would earn -2, random -1.5),
        assert abs(entry["train_reward_agent_0"] + 1.0) <= 0.05, entry
        # also in the evaluation episodes (100 rounds: ALL-C -100, ALL-D -199, random about -150).
        assert np.mean(entry["return_agent_0"]) >= -105, entry
        # The fixed agent's watcher is its table: tit-for-tat cooperates after CC and DC only.
        assert entry["train_cooperation_CC_agent_1"] == 1.0 and entry["train_cooperation_CD_agent_1"] == 0.0


def test_the_gif_shows_the_learner_and_tit_for_tat_cooperating(versus_tit_for_tat, framed_joint_actions):
    """``gif=True`` (``lamella train shaping --gif``): one evaluation episode of the first seed's
    final state (100 rounds), drawn by the IPD's renderer, frames mutual cooperation."""
    import imageio.v3 as iio

    whole = versus_tit_for_tat[2]
    frames = iio.imread(whole.gif_path, index=None)
    assert frames.shape == (100 + 1, 140, 128, 3), frames.shape  # the IPD's 100 rounds and its reset
    joint = framed_joint_actions(frames)
    assert not joint[0].any() and np.all(joint[1:].sum((-1, -2)) == 1)  # one joint action per round
    assert joint[1:, 0, 0].mean() >= 0.9, joint[1:].mean(0)  # CC, as in training (>= 0.9 of the visits)


def test_driver_resume_matches_a_run_that_never_stopped(versus_tit_for_tat):
    first, second, whole, out, _ = versus_tit_for_tat
    assert not first.finished and second.finished
    plain = lambda x: jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x  # noqa: E731
    for a, b in zip(jax.tree.leaves(second.state), jax.tree.leaves(whole.state), strict=True):
        np.testing.assert_array_equal(np.asarray(plain(a)), np.asarray(plain(b)))
    assert (out / "run" / "metrics.json").read_text() == (out / "whole" / "metrics.json").read_text()


@pytest.mark.parametrize(
    ("opponent", "home", "value", "worst"),
    [
        # vs ALL-D: ALL-D lives in DD and earns -2 per step (ALL-C -3, random about -2.5).
        (0, "DD", -2.0, -3.0),
        # vs ALL-C: ALL-D lives in DC and earns 0 per step (ALL-C -1, random about -0.5).
        (1, "DC", 0.0, -1.0),
    ],
    ids=["all_d", "all_c"],
)
def test_ppo_against_all_d_and_all_c_learns_to_defect(
    versus_defector_and_altruist, opponent, home, value, worst
):
    m = {name: values[opponent] for name, values in versus_defector_and_altruist.items()}  # (seeds, n)
    # ALL-D: defects where it lives with probability >= 0.9 on every seed, and defected in at
    # least 90 % of the rounds it played (its own action is the first letter of its state) ...
    assert np.all(1.0 - m[f"cooperation_{home}"][:, 0] >= 0.9), m[f"cooperation_{home}"]
    rounds = 1.0 - m["visits_START"][:, 0]
    defected = (m["visits_DC"][:, 0] + m["visits_DD"][:, 0]) / rounds
    assert np.all(defected >= 0.9), defected
    # ... and earns the ALL-D value per step within 0.05 (ALL-C would earn `worst`).
    np.testing.assert_allclose(m["reward"][:, 0], value, atol=0.05)
    assert np.all(m["reward"][:, 0] > worst + 0.5)


def test_watchers_by_hand():
    # Two rounds of one env, two agents: agent 0 sees START then CD, agent 1 START then DC.
    eye = np.eye(5, dtype=np.float32)
    obs = np.stack([np.stack([eye[4], eye[4]]), np.stack([eye[1], eye[2]])])[:, None]  # (T=2, E=1, n=2, 5)
    action = np.array([[[0, 1]], [[1, 1]]])  # agent 0: C then D; agent 1: D, D
    np.testing.assert_allclose(state_visits(obs), [[0, 0.5, 0, 0, 0.5], [0, 0, 0.5, 0, 0.5]])
    np.testing.assert_allclose(empirical_cooperation(obs, action), [[0, 0, 0, 0, 1], [0, 0, 0, 0, 0]])
    assert STATE_NAMES == ("CC", "CD", "DC", "DD", "START")
    # Own coins 3 and other coins 1 for agent 0; nothing picked up for agent 1 (share 0).
    own = np.array([[[1, 0]], [[2, 0]]])
    other = np.array([[[1, 0]], [[0, 0]]])
    np.testing.assert_allclose(own_coin_share(own, other), [0.75, 0.0])


TINY = ShapingConfig(
    agents=("ppo", "all_d"),
    num_inner_steps=10,
    num_envs=4,
    num_steps=10,
    num_minibatches=2,
    num_epochs=1,
    hidden_sizes=(8,),
    eval_episodes=4,
    total_timesteps=4 * 4 * 10,
)


def test_coin_game_and_opponent_instances_build_with_coin_watchers():
    config = dataclasses.replace(
        SHAPING_PRESETS["ppo_v_ppo_coin_game"], num_envs=4, num_steps=4, num_opponents=2, total_timesteps=16
    )
    runner = make_shaping_runner(config)
    state = jax.eval_shape(runner.init, jax.random.key(0))
    # Agent 0 is one learner; agent 1 two independent ones (a leading instance axis of 2).
    assert jax.tree.leaves(state.train_states[0].params)[0].shape[0] == 1
    assert jax.tree.leaves(state.train_states[1].params)[0].shape[0] == 2
    _, metrics = jax.eval_shape(runner.step, state)
    assert metrics["own_coin_share"].shape == (2,) and metrics["coins_per_step"].shape == (2,)
    assert "cooperation_CC" not in metrics
    assert runner.metric_axes["own_coin_share"] == ("agent",)


def test_recurrent_learners_carry_memory_per_instance():
    config = dataclasses.replace(
        TINY, agents=("ppo", "ppo"), recurrent=True, num_opponents=2, rnn_hidden_size=4
    )
    runner = make_shaping_runner(config)
    state = jax.eval_shape(runner.init, jax.random.key(0))
    # (instances, envs per instance, hidden): agent 0 one GRU carry on 4 envs, agent 1 two on 2 each.
    assert jax.tree.leaves(state.memory[0])[0].shape == (1, 4, 4)
    assert jax.tree.leaves(state.memory[1])[0].shape == (2, 2, 4)
    _, metrics = jax.eval_shape(runner.step, state)
    assert "learner_1_first_minibatch_kl" in metrics


def test_any_agent_can_be_the_fixed_one():
    config = dataclasses.replace(TINY, agents=("ppo", "ppo"))
    runner = make_shaping_runner(config, agents=["ppo", make_memory_one_agent("grim_trigger")])
    state = jax.eval_shape(runner.init, jax.random.key(0))
    assert state.train_states[1] == ()  # fixed: nothing learns
    _, metrics = jax.eval_shape(runner.step, state)
    assert "learner_0_loss" in metrics and not any(name.startswith("learner_1") for name in metrics)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"num_opponents": 3}, ["num_envs (4) must be a multiple of num_opponents (3)", "num_envs=6"]),
        ({"num_opponents": 2, "eval_episodes": 3}, ["eval_episodes (3)", "eval_episodes=4"]),
        ({"agents": ("ppo",)}, ["has 2", "agents=ppo,ppo"]),
        ({"agents": ("ppo", "ppo", "all_d")}, ["names 3 agent(s)", "one entry per agent"]),
        ({"agents": ("ppo", "tft")}, ["unknown entry 'tft'", "tit_for_tat"]),
        ({"agents": ("all_c", "all_d")}, ["every agent is fixed", "'ppo'"]),
        (
            {"env_id": "CoinGame-v0", "agents": ("ppo", "tit_for_tat")},
            ["one-hot over 5 states", "observation space has shape (36,)", "Use a learning agent"],
        ),
        ({"env_id": "CartPole-v1", "num_inner_steps": 0}, ["multi-agent envs", "single agent"]),
        ({"num_minibatches": 3}, ["num_minibatches (3) must divide"]),
        # Checked by ShapingConfig.validate itself (were the learners' PPOConfig's, or unchecked).
        ({"learning_rate": -1.0}, ["ShapingConfig.learning_rate must be >= 0"]),
        ({"gae_lambda": float("nan")}, ["ShapingConfig.gae_lambda is NaN"]),
        ({"hidden_sizes": (0,)}, ["ShapingConfig.hidden_sizes must hold sizes >= 1"]),
        # One string: was "unknown entry 'p'" (its characters taken as entries).
        (
            {"agents": "ppo,tit_for_tat"},
            ["agents is the string 'ppo,tit_for_tat'", "agents=('ppo', 'tit_for_tat')"],
        ),
    ],
)
def test_bad_input_is_refused_naming_the_fix(changes, words):
    with pytest.raises(ConfigError) as error:
        make_shaping_runner(dataclasses.replace(TINY, **changes))
    assert all(word in str(error.value) for word in words), str(error.value)
    with pytest.raises(ConfigError, match=r"agents=\('ppo', 'ppo'\)"):
        make_shaping_runner(TINY, agents="ppo,ppo")


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("cell=lstm", ["ShapingConfig.cell='lstm'", "recurrent=False", "recurrent=True", "'gru'"]),
        ("rnn_hidden_size=64", ["ShapingConfig.rnn_hidden_size=64", "recurrent=False", "16"]),
        ("recurrent_update=stored_memory", ["recurrent_update='stored_memory'", "recurrent=True"]),
        ("post_core_layers=false", ["post_core_layers=False", "feed-forward", "recurrent=True"]),
    ],
)
def test_a_recurrent_setting_of_a_feed_forward_learner_is_refused(override, words):
    # Was accepted and never read: `lamella train shaping rnn_hidden_size=64` trained a feed-forward learner.
    with pytest.raises(ConfigError) as error:
        resolve_config("shaping", None, None, [override])
    assert all(word in str(error.value) for word in words), str(error.value)
    resolve_config("shaping", None, None, [override, "recurrent=true"])


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        (lambda key, obs: 0, ["agents entry 1", "got <function", "or a lamella Agent"]),
        ({"start": 1.0}, ["agents entry 1", "(dict)", "five cooperation probabilities"]),
        ([0.5, 0.5], ["agents entry 1", "got shape (2,)"]),
    ],
)
def test_an_agents_entry_of_the_wrong_kind_names_the_entry_and_the_kinds(entry, words):
    # A function or a dict was numpy's "float() argument must be ..." TypeError.
    with pytest.raises(ConfigError) as error:
        make_shaping_runner(TINY, agents=["ppo", entry])
    assert all(word in str(error.value) for word in words), str(error.value)


def test_command_line_bad_input_exits_2_with_one_line(capsys, tmp_path):
    argv = [
        "train",
        "shaping",
        "--preset",
        "ppo_v_tft",
        "num_opponents=3",
        "--out-dir",
        str(tmp_path / "run"),
    ]
    with pytest.raises(SystemExit) as exit_info:
        lamella_main(argv)
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "multiple of num_opponents (3)" in errors[0], errors
    assert not (tmp_path / "run").exists()
