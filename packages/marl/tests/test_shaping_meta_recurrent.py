"""Recurrent (GRU, Pax's ``PPO_memory``) co-players in the meta runner.

* Where the co-player's memory is reset: a recording player 0 stores every round's observation
  of one inner episode; replaying the co-player's GRU over that episode (its own view of it, from
  zeros at the episode's first round, with the parameters it acted with) must give the GRU state
  the runner holds at the episode's end. Starting instead from the previous episode's final state
  (no reset between inner episodes) or resetting at every round gives a different state, checked
  too, so the test can fail.
* The co-player's update recomputes the policy it acted with: ``first_minibatch_kl`` 0 up to
  float error (the recurrent update re-runs the GRU over each inner episode from its stored first
  memory and the reset flags).
* The recurrent co-player learns: over one outer episode (80 inner episodes of 20 rounds on 8
  envs, one co-player: ``co_player_config()`` of ``LEARNS``) against a fixed meta-agent it learns
  Pax's documented responses, ALL-C against tit-for-tat and ALL-D against ALL-D (Pax
  ``docs/experiments.md``: PPO_memory vs TitForTat -> ALL-C, vs Defect -> ALL-D), 3 seeds each,
  one program. Baselines per round for the co-player: vs tit-for-tat ALL-C -1, ALL-D -2, random
  about -1.5; vs ALL-D ALL-D -2, ALL-C -3, random about -2.5. Medians over the last 10 inner
  episodes; it starts at 0.45 to 0.5. 60 inner episodes, not 40: some seeds learn slowly, and
  the float path decides which (a program of another number of seeds, or another jax, gives
  another). With 40 and the mean over episodes 36-40, the test's seed 2 against tit-for-tat
  ended at 0.8975 on jax 0.12 (plateau at 0.70 to 0.77 from episode 12), and the same key at
  0.75 on jax 0.10.2 in a program of 32 seeds; over the test's program and programs of 12 and
  32 seeds (94 runs per jax version), 2 runs (jax 0.10.2) and 3 (jax 0.12) missed these bars.
  With 60, in a program of 32 seeds (the test's 3 and 29 more, 64 runs) every run on both jax
  0.10.2 and 0.12 meets them (median cooperation over episodes 51-60 at least 0.994 against
  tit-for-tat, 0.0 against ALL-D); one run on jax 0.10.2 dipped to 0.11 in episode 59 (its
  sampled policy), which the median over 10 episodes ignores and a mean over 5 did not.
  80, not 60 (2026-12-07): with 60, the test's seed 2 against tit-for-tat ended at 0.944
  cooperation and -1.056 a round on jax 0.7.0 (the lowest lamella-marl supports; outside the
  reward's 0.05), and in a program of tit-for-tat alone over 16 seeds on jax 0.10.2 one run
  defected (0.04 over episodes 51-60). With 80, every run meets the bars (medians over episodes
  71-80) on jax 0.7.0, 0.10.2 and 0.12.1 in the test's program, in programs of 16 seeds per
  table, and (0.7.0 and 0.10.2) in that tit-for-tat-only program of 16 seeds, where the run that
  defected cooperates again by then.
* A tiny meta run (2 generations) compiles and gives finite metrics; the presets and
  ``lamella train meta_es`` overrides take the setting; bad input is refused naming the fix.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lamella.agents.config import ConfigError, resolve_config
from lamella.agents.ppo import PPOConfig, make_actor_critic
from lamella.agents.protocol import Agent
from lamella.agents.runner import make_train
from lamella.envs import spaces
from lamella.envs.cli import main as lamella_main
from lamella.marl.shaping import strategy
from lamella.marl.shaping.meta import MetaConfig, make_meta_runner
from lamella.marl.shaping.presets import PRESETS
from lamella.marl.shaping.runner import LEARNER, make_shaping_runner

TINY = MetaConfig(
    num_envs=4,
    num_opponents=2,
    num_inner_steps=6,
    num_outer_steps=3,
    num_minibatches=2,
    population_size=4,
    strategy="Open_ES",
    sigma_init=0.1,
    eval_episodes=2,
    co_player_recurrent=True,
    co_player_rnn_hidden_size=4,
    learning_rate=0.2,
)
TINY = dataclasses.replace(TINY, total_timesteps=2 * TINY.steps_per_iteration)
#: The co-player of the learning test: a 8-unit GRU on the one-hot state, Adam 0.05, no entropy bonus.
LEARNS = MetaConfig(
    num_envs=8,
    num_opponents=1,
    num_inner_steps=20,
    num_outer_steps=80,
    num_minibatches=2,
    learning_rate=0.05,
    ent_coef=0.0,
    co_player_recurrent=True,
    co_player_rnn_hidden_size=8,
)
# Player 0's one-hot state (CC, CD, DC, DD, START; own action first) as the co-player sees it.
SWAP = np.array([0, 2, 1, 3, 4])


def recording_player(rounds: int) -> Agent:
    """Plays uniformly at random and keeps every round's observation of the current inner episode
    in its memory, ``(E, rounds, 5)`` plus a per-env round counter (never reset)."""

    def init(key, obs):
        return (), (jnp.zeros(obs.shape[:1], jnp.int32), jnp.zeros((obs.shape[0], rounds, *obs.shape[1:])))

    def policy(key, train_state, obs, memory, eval=False):
        count, seen = memory
        seen = seen.at[jnp.arange(obs.shape[0]), count % rounds].set(obs)
        action = jax.random.bernoulli(key, 0.5, obs.shape[:1]).astype(jnp.int32)
        return action, train_state, (count + 1, seen)

    return Agent(init, policy, lambda t, s, m: (s, m, {}), lambda memory, eval=False: memory)


def table_agent() -> Agent:
    """A fixed memory-one meta-agent whose cooperation table (by observation: CC, CD, DC, DD,
    START) is its train state, so one program plays several (a vmap over tables)."""

    def init(key, obs=None):
        return jnp.zeros((5,), jnp.float32), ()

    def policy(key, table, obs, memory, eval=False):
        cooperate = obs @ table
        return (jax.random.uniform(key, cooperate.shape) >= cooperate).astype(jnp.int32), table, memory

    return Agent(init, policy, lambda t, table, m: (table, m, {}), lambda memory, eval=False: ())


@pytest.fixture(scope="module")
def two_inner_episodes():
    """The meta runner's inner runner (``co_player_config()``, the co-players learning) with the
    recorder as player 0: its state at the start and after one and two inner episodes."""
    inner = make_shaping_runner(
        TINY.co_player_config(), agents=[recording_player(TINY.num_inner_steps), LEARNER]
    )
    step = jax.jit(inner.step)
    start = jax.jit(inner.init)(jax.random.key(3))
    first, first_metrics = step(start)
    second, second_metrics = step(first)
    return start, (first, first_metrics), (second, second_metrics)


CO_PLAYER_NETWORK = make_actor_critic(
    PPOConfig(
        hidden_sizes=tuple(TINY.hidden_sizes),
        activation=TINY.activation,
        recurrent=True,
        rnn_hidden_size=TINY.co_player_rnn_hidden_size,
    ),
    spaces.Discrete(2),
)


@jax.jit
def _replay(params, obs, memory, resets):
    """The co-player's GRU over one inner episode, ``obs`` ``(rounds, envs, 5)``, from ``memory``
    and reset at the rounds where ``resets[t]`` (bool ``(rounds,)``): its final state."""

    def round_(memory, inputs):
        obs_t, reset_t = inputs
        memory, _, _ = CO_PLAYER_NETWORK.step(params, memory, obs_t, jnp.full(obs_t.shape[:1], reset_t))
        return memory, None

    return jax.lax.scan(round_, memory, (obs, jnp.asarray(resets)))[0]


def _leaf(memory):
    (leaf,) = jax.tree.leaves(memory)  # a GRU's state: one array (envs, hidden)
    return np.asarray(leaf)


def test_co_player_memory_is_reset_at_every_inner_episode_and_carried_within(two_inner_episodes):
    start, (first, _), (second, _) = two_inner_episodes
    rounds = TINY.num_inner_steps
    # A fresh outer episode starts every co-player's GRU at zeros (inner.init).
    np.testing.assert_array_equal(_leaf(start.memory[1]), 0.0)
    # The inner episode ended with the rollout: the next round starts an episode (a reset step).
    assert bool(np.all(first.reset)) and bool(np.all(second.reset))
    # Player 0's observations of the second inner episode, as each co-player saw them.
    seen = np.asarray(second.memory[0][1])[0]  # (envs, rounds, 5)
    assert np.all(seen.sum(-1) == 1) and np.all(seen[:, 0, 4] == 1) and not np.any(seen[:, 1:, 4])
    co_obs = jnp.asarray(np.swapaxes(seen[..., SWAP], 0, 1))  # (rounds, envs, 5)
    per = TINY.num_envs // TINY.num_opponents
    for c in range(TINY.num_opponents):
        mine = co_obs[:, c * per : (c + 1) * per]
        params = jax.tree.map(lambda x, c=c: x[c], first.train_states[1].params)  # what it acted with
        before = jax.tree.map(lambda x, c=c: x[c], first.memory[1])  # its state after episode 1
        held = _leaf(jax.tree.map(lambda x, c=c: x[c], second.memory[1]))  # after episode 2
        assert np.abs(held).max() > 1e-2  # carried through the episode: not zeros
        # Reset at the first round only: the state the runner holds.
        reset_first = [True] + [False] * (rounds - 1)
        np.testing.assert_allclose(_leaf(_replay(params, mine, before, reset_first)), held, atol=1e-5)
        # What a wrong reset would hold: none between inner episodes, or one at every round.
        for wrong in ([False] * rounds, [True] * rounds):
            assert np.abs(_leaf(_replay(params, mine, before, wrong)) - held).max() > 1e-3, wrong


def test_co_player_update_recomputes_what_it_acted_with(two_inner_episodes):
    _, (_, first_metrics), (_, second_metrics) = two_inner_episodes
    for metrics in (first_metrics, second_metrics):
        kl = float(metrics["learner_1_first_minibatch_kl"])
        assert abs(kl) < 1e-5, kl
        assert float(metrics["learner_1_approx_kl"]) != 0.0  # later minibatches moved the policy


def test_tiny_meta_run_with_recurrent_co_players():
    runner = make_meta_runner(TINY)
    state, metrics = jax.jit(make_train(runner))(jax.random.key(0))
    assert runner.num_iterations == 2
    for name, value in metrics.items():
        value = np.asarray(value)
        assert value.shape[0] == 2 and np.all(np.isfinite(value)), (name, value)
    for name in ("episode_return", "co_player_return"):
        assert np.all((metrics[name] >= -3.0) & (metrics[name] <= 0.0)), (name, metrics[name])
    for name in ("meta_cooperation", "co_player_cooperation_first", "co_player_cooperation_last"):
        assert np.all((metrics[name] >= 0.0) & (metrics[name] <= 1.0)), (name, metrics[name])
    # Every co-player update of every member recomputed the policy it acted with.
    assert np.all(np.asarray(metrics["co_player_update_kl"]) < 1e-5), metrics["co_player_update_kl"]


def test_presets_and_command_line_overrides_take_it():
    for name in ("good_shepherd_v_ppo_memory", "shaper_v_ppo_memory"):
        config = PRESETS["meta_es"][name]
        assert config.co_player_recurrent and config.co_player_rnn_hidden_size == 16
        config.validate()
        assert config.co_player_config().recurrent
    assert PRESETS["meta_es"]["shaper_v_ppo_memory"].meta_recurrent
    config = resolve_config(
        "meta_es",
        preset="shaper_v_ppo",
        overrides=["co_player_recurrent=true", "co_player_rnn_hidden_size=8"],
    )
    shaping = config.co_player_config()
    assert (shaping.recurrent, shaping.cell, shaping.rnn_hidden_size) == (True, "gru", 8)
    assert shaping.recurrent_update == "bptt"  # the default
    assert not MetaConfig().co_player_config().recurrent
    # Pax's update (each round from its stored GRU state) reaches the co-players' PPO.
    config = resolve_config(
        "meta_es", preset="shaper_v_ppo_memory", overrides=["co_player_recurrent_update=stored_memory"]
    )
    assert config.co_player_config().recurrent_update == "stored_memory"


def test_bad_input_is_refused_naming_the_fix(capsys, tmp_path):
    # 2 envs per co-player cannot be split into 4 minibatches of whole inner episodes.
    with pytest.raises(
        ConfigError, match=r"co_player_recurrent=True.*= 2 envs.*num_minibatches \(4\).*\[1, 2\]"
    ):
        make_meta_runner(dataclasses.replace(TINY, num_minibatches=4))
    # With stored memory the minibatches split rounds: a co-player's 2 x 6 = 12 rounds divide by
    # 4 (not by 5).
    dataclasses.replace(TINY, num_minibatches=4, co_player_recurrent_update="stored_memory").validate()
    with pytest.raises(ConfigError, match=r"12 steps per inner episode.*num_minibatches \(5\)"):
        dataclasses.replace(TINY, num_minibatches=5, co_player_recurrent_update="stored_memory").validate()
    with pytest.raises(ConfigError, match=r"co_player_recurrent_update must be one of"):
        dataclasses.replace(TINY, co_player_recurrent_update="truncated").validate()
    with pytest.raises(
        ConfigError, match=r"MetaConfig\.co_player_rnn_hidden_size must hold sizes >= 1, got 0\."
    ):
        dataclasses.replace(TINY, co_player_rnn_hidden_size=0).validate()
    # The same through lamella train: one error line, exit status 2, before anything compiles.
    argv = [
        "train",
        "meta_es",
        "--preset",
        "shaper_v_ppo_memory",
        "num_minibatches=4",
        "--out-dir",
        str(tmp_path / "run"),
    ]
    with pytest.raises(SystemExit) as exit_info:
        lamella_main(argv)
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "num_minibatches (4) must divide" in errors[0], errors
    assert not (tmp_path / "run").exists()


def test_recurrent_co_player_learns_the_best_response_to_fixed_meta_agents():
    runner = make_shaping_runner(LEARNS.co_player_config(), agents=[table_agent(), LEARNER])
    assert runner.num_iterations == LEARNS.num_outer_steps

    def outer_episode(key, table):
        state = runner.init(key)
        state = state.replace(train_states=(table[None], state.train_states[1]))
        return jax.lax.scan(lambda s, _: runner.step(s), state, None, length=runner.num_iterations)[1]

    tables = np.stack([strategy(name)[[1, 2, 3, 4, 0]] for name in ("tit_for_tat", "all_d")])  # obs order
    keys = jnp.concatenate([jax.random.split(jax.random.key(0), 3)] * 2)
    metrics = jax.jit(jax.vmap(outer_episode))(keys, jnp.repeat(jnp.asarray(tables), 3, axis=0))
    # The co-player's (agent 1) cooperation rate per inner episode: its per-state frequencies
    # (recurrent) weighted by its visits; its mean reward per round. (6 runs, 80 inner episodes).
    states = ("CC", "CD", "DC", "DD", "START")
    cooperation = sum(
        np.asarray(metrics[f"cooperation_{s}"])[..., 1] * np.asarray(metrics[f"visits_{s}"])[..., 1]
        for s in states
    )
    reward = np.asarray(metrics["reward"])[..., 1]
    assert np.all(np.abs(cooperation[:, 0] - 0.5) < 0.1), cooperation[:, 0]  # it starts at random
    # The median over inner episodes 71-80: the response it plays, not a one-episode dip of its
    # sampled policy (one seed of 64 on jax 0.10.2 fell to 0.11 in episode 59, then 0.8).
    late_cooperation, late_reward = np.median(cooperation[:, -10:], 1), np.median(reward[:, -10:], 1)
    print("cooperation, median of inner episodes 71-80:", late_cooperation, "reward per round:", late_reward)
    # vs tit-for-tat: ALL-C (cooperates in >= 90 % of the rounds; -1 per round within 0.05).
    assert np.all(late_cooperation[:3] >= 0.9), late_cooperation
    np.testing.assert_allclose(late_reward[:3], -1.0, atol=0.05)
    # vs ALL-D: ALL-D (cooperates in <= 10 % of the rounds; -2 per round within 0.05).
    assert np.all(late_cooperation[3:] <= 0.1), late_cooperation
    np.testing.assert_allclose(late_reward[3:], -2.0, atol=0.05)


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("meta_rnn_hidden_size=32", ["MetaConfig.meta_rnn_hidden_size=32", "meta_recurrent=False", "16"]),
        ("co_player_rnn_hidden_size=8", ["co_player_rnn_hidden_size=8", "co_player_recurrent=True"]),
        (
            "co_player_recurrent_update=stored_memory",
            ["co_player_recurrent_update='stored_memory'", "co_player_recurrent=False", "'bptt'"],
        ),
        ("co_player_post_core_layers=false", ["co_player_post_core_layers=False", "feed-forward"]),
    ],
)
def test_a_recurrent_setting_of_a_feed_forward_network_is_refused(override, words):
    # Before, each was accepted and never read (the network has no recurrent core).
    with pytest.raises(ConfigError) as error:
        resolve_config("meta_es", None, None, [override])
    assert all(word in str(error.value) for word in words), str(error.value)
    switch = "meta_recurrent=true" if override.startswith("meta_") else "co_player_recurrent=true"
    resolve_config("meta_es", None, None, [override, switch])
