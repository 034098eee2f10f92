"""Recurrent IPPO (rec_ippo) needs and uses memory: a cue-recall task, three seeds, and its pieces.

``CueRecall`` (defined here, a bare lamella multi-agent env): two agents, each shown its own
random bit (the cue) at the first step only; then ``DELAY - 1`` blank steps; then a query
flag. The action taken on the query step scores 1 if it equals the agent's cue, and the
episode ends. The query observation is the same whatever the cue, so a policy without memory
answers right with probability 1/2 at best: **its team return (the sum over both agents) is at
most 1.0 in expectation, and so is a uniformly random policy's** (measured in the test: the
random agent over 1024 episodes). A recurrent policy that keeps each agent's own cue in that
agent's hidden state scores 2.0. Every rollout crosses episode boundaries (episodes of
``DELAY + 1`` steps, rollouts of 16), so the hidden state must be reset where an episode starts.

rec_ippo trains three seeds (``jax.random.split(jax.random.key(0), 3)``) in one vmapped compile;
each seed is then evaluated greedily on 64 episodes. Threshold: a team return of at least 1.8 per
seed, well above the 1.0 ceiling of any memoryless policy.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from lamella.agents import evaluate_agent, make_random_agent, make_train
from lamella.envs import spaces
from lamella.envs.environment import Environment
from lamella.marl import (
    MultiAgentRecurrentActorCriticNet,
    RecIPPOConfig,
    make_rec_ippo_runner,
)

DELAY = 3
NO_ANSWER = jnp.full((2,), -1, jnp.int32)
SEEDS = jax.random.split(jax.random.key(0), 3)


class CueRecallState(struct.PyTreeNode):
    cue: jax.Array  # int32 (2,): each agent's bit
    time: jax.Array  # int32 ()
    answer: jax.Array  # int32 (2,): each agent's action on the query step (-1 before it)


class CueRecallParams(struct.PyTreeNode):
    max_steps_in_episode: int = struct.field(pytree_node=False, default=DELAY + 1)


class CueRecall(Environment[CueRecallState, CueRecallParams]):
    """Observation float32 (2, 3): ``[one-hot cue (first step only), query flag]`` per agent.
    Action int32 (2,) in {0, 1}. Reward float32 (2,): 1 on the query step if the action is the
    agent's cue. Terminated (2,) after the query step; never truncated."""

    num_agents = 2  # type: ignore[misc]

    @property
    def default_params(self) -> CueRecallParams:
        return CueRecallParams()

    def _obs(self, state: CueRecallState) -> jax.Array:
        cue = jax.nn.one_hot(state.cue, 2) * (state.time == 0)
        query = jnp.broadcast_to(state.time == DELAY, (2, 1)).astype(jnp.float32)
        return jnp.concatenate([cue, query], axis=-1)

    def reset_env(self, key: jax.Array, params: CueRecallParams) -> tuple[jax.Array, CueRecallState]:
        cue = jax.random.bernoulli(key, 0.5, (2,)).astype(jnp.int32)
        state = CueRecallState(cue, jnp.zeros((), jnp.int32), NO_ANSWER)
        return self._obs(state), state

    def step_env(self, key: jax.Array, state: CueRecallState, action: Any, params: CueRecallParams) -> Any:
        asked = state.time == DELAY
        reward = (asked & (jnp.asarray(action) == state.cue)).astype(jnp.float32)
        answer = jnp.where(asked, jnp.asarray(action, jnp.int32), state.answer)
        state = CueRecallState(state.cue, state.time + 1, answer)
        done = jnp.broadcast_to(asked, (2,))
        return self._obs(state), state, reward, done, jnp.zeros((2,), bool), {}

    def observation_space(self, params: Any = None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (2, 3), jnp.float32)

    def action_space(self, params: Any = None) -> spaces.MultiDiscrete:
        return spaces.MultiDiscrete([2, 2])

    def render(self, state: CueRecallState, params: Any = None) -> jax.Array:
        """uint8 ``(16, 24, 3)``, one row of 8x8 cells per agent: its cue (black 0, white 1), its
        answer (grey before the query step, then black or white), the time (grey level 60 t)."""
        answer = jnp.where(state.answer < 0, 128, 255 * state.answer)
        cells = jnp.stack([255 * state.cue, answer, jnp.broadcast_to(60 * state.time, (2,))], axis=1)
        return jnp.repeat(jnp.repeat(cells, 8, 0), 8, 1)[..., None].repeat(3, -1).astype(jnp.uint8)


CONFIG = RecIPPOConfig(
    env_id="CueRecall",
    total_timesteps=16 * 16 * 32,
    num_envs=16,
    num_steps=16,
    hidden_sizes=(32,),
    post_torso_sizes=(32,),
    rnn_hidden_size=32,
    learning_rate=3e-3,
    num_minibatches=2,
    eval_episodes=64,
    eval_greedy=True,
)


def test_the_query_observation_does_not_reveal_the_cue():
    """What makes a memoryless policy's ceiling 1.0: every observation after the first is the
    same for both cues."""
    env = CueRecall()
    trajectories = []
    for cue in ([0, 1], [1, 0]):
        state = CueRecallState(jnp.asarray(cue, jnp.int32), jnp.zeros((), jnp.int32), NO_ANSWER)
        observations = [env._obs(state)]
        for _ in range(DELAY):
            observations.append(env.step(jax.random.key(0), state, jnp.zeros(2, jnp.int32))[0])
            state = CueRecallState(state.cue, state.time + 1, state.answer)
        trajectories.append(np.stack(observations))
    assert not np.array_equal(trajectories[0][0], trajectories[1][0])  # the cue is shown first
    np.testing.assert_array_equal(trajectories[0][1:], trajectories[1][1:])  # then never again
    assert trajectories[0][-1][:, 2].tolist() == [1.0, 1.0]  # the query flag


@pytest.fixture(scope="module")
def trained():
    runner = make_rec_ippo_runner(CONFIG, env=CueRecall())
    state, metrics = jax.jit(jax.vmap(make_train(runner)))(SEEDS)
    evaluation = jax.jit(jax.vmap(runner.evaluate))(state, jax.random.split(jax.random.key(1), len(SEEDS)))
    return state, metrics, evaluation


def random_team_return() -> float:
    env = CueRecall()
    agent = make_random_agent(env.action_space())
    train_state, memory = agent.init(jax.random.key(0))
    out = evaluate_agent(
        agent, train_state, env, env.default_params, jax.random.key(1), 1024, 10, memory, greedy=False
    )
    return float(out["episode_return"].mean())


def test_rec_ippo_remembers_each_agents_cue_for_three_seeds(trained):
    _, metrics, evaluation = trained
    random_return = random_team_return()
    assert 0.9 < random_return < 1.1  # the baseline: a coin flip per agent
    returns = np.asarray(evaluation["episode_return"].mean(axis=1))
    print(
        f"rec_ippo CueRecall: team return per seed {returns}, random {random_return:.3f}, memoryless <= 1.0"
    )
    assert np.all(returns >= 1.8), returns
    # Each agent recalls its own cue (per-agent hidden states): both agents score.
    assert np.all(np.asarray(evaluation["return"].mean(axis=1)) >= 0.85)
    # The update recomputes, from the memory each rollout started with and the episode resets,
    # exactly the distributions the rollout acted with (first minibatch, before any step).
    assert float(jnp.max(jnp.abs(metrics["first_minibatch_kl"]))) < 1e-5


@pytest.mark.parametrize("share", [True, False])
def test_recurrent_network_resets_each_agents_memory_where_an_episode_starts(share):
    """A sequence that crosses an episode boundary gives, after the boundary, exactly what a
    fresh sequence gives; before it, every agent's memory is its own."""
    n, size, num_actions, batch = 2, 3, 2, 2
    net = MultiAgentRecurrentActorCriticNet(
        n, num_actions, pre_torso_sizes=(8,), post_torso_sizes=(8,), rnn_hidden_size=8, share_parameters=share
    )
    obs = {
        "obs": jax.random.normal(jax.random.key(0), (6, batch, n, size)),
        "action_mask": jnp.ones((6, batch, n, num_actions), bool),
    }
    reset = jnp.zeros((6, batch), bool).at[0].set(True).at[3, 0].set(True)  # env 0 restarts at t=3
    tail = jax.tree.map(lambda x: x[3:], obs)
    # Agent 1's observations change before t=2; agent 0's do not.
    changed = {**obs, "obs": obs["obs"].at[:2, :, 1].add(5.0)}

    @jax.jit
    def run(key):
        fresh_memory = net.initial_memory(batch)
        params = net.init(key, fresh_memory, (obs, reset))
        memory, (dist, value) = net.apply(params, fresh_memory, (obs, reset))
        _, (fresh, fresh_value) = net.apply(params, fresh_memory, (tail, reset[3:].at[0].set(True)))
        _, (_, value_changed) = net.apply(params, fresh_memory, (changed, reset))
        return memory, dist.logits, value, fresh.logits, fresh_value, value_changed

    memory, logits, value, fresh_logits, fresh_value, value_changed = run(jax.random.key(1))
    assert logits.shape == (6, batch, n, num_actions) and value.shape == (6, batch, n)
    assert all(leaf.shape == (batch, n, 8) for leaf in jax.tree.leaves(memory))  # actor and critic
    # Env 0 restarted at t=3: from there on, exactly a fresh sequence's outputs.
    np.testing.assert_allclose(logits[3:, 0], fresh_logits[:, 0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value[3:, 0], fresh_value[:, 0], rtol=1e-5, atol=1e-6)
    # Env 1 did not restart: its memory carries over, so its outputs differ from a fresh start.
    assert float(jnp.max(jnp.abs(value[3:, 1] - fresh_value[:, 1]))) > 1e-4
    # Each agent has its own hidden state: agent 1's past observations change agent 1's later
    # values and never agent 0's.
    np.testing.assert_allclose(value_changed[:, :, 0], value[:, :, 0], rtol=1e-5, atol=1e-6)
    assert float(jnp.max(jnp.abs(value_changed[2:, :, 1] - value[2:, :, 1]))) > 1e-4
