"""The rollout collector on auto-reset, bare, multi-agent and per-env-params envs, and GAE on its output."""

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs
from lamella.agents import PolicyStep, Transition, losses, make_rollout
from lamella.agents.actor_critic import (
    FeedForwardActorCriticNet,
    RecurrentActorCriticNet,
    feedforward_actor_critic,
    recurrent_actor_critic,
)
from lamella.agents.rollout import actor_critic_policy, next_memory
from lamella.agents.testing import scan_unrolls
from lamella.envs import spaces
from lamella.envs.testing import assert_same_up_to_rounding
from lamella.envs.wrappers import EpisodeStatistics

NUM_STEPS, NUM_ENVS = 40, 3


def always(action_value, value=0.0):
    """A policy that plays one action everywhere and reports a constant value."""

    def policy(key, obs, memory, reset):
        batch = jax.tree.leaves(obs)[0].shape[0]
        action = jnp.full((batch,), action_value, jnp.int32)
        return memory, PolicyStep(action, action, jnp.zeros(batch), jnp.full(batch, value))

    return policy


@pytest.mark.parametrize("autoreset", [True, False], ids=["autoreset", "bare"])
def test_collects_time_major_batch_with_final_observations(autoreset):
    env, params = lamella.envs.make("CartPole-v1", autoreset=autoreset)
    rollout = make_rollout(env, NUM_STEPS, NUM_ENVS)
    state = rollout.init(jax.random.key(0), params)
    # Always pushing right ends a CartPole episode in about 10 steps.
    state, batch = jax.jit(rollout.collect, static_argnums=1)(state, always(1), jax.random.key(1), params)
    assert isinstance(batch, Transition)
    assert batch.obs.shape == (NUM_STEPS, NUM_ENVS, 4)
    assert batch.reward.shape == batch.terminated.shape == batch.reset.shape == (NUM_STEPS, NUM_ENVS)
    done = np.asarray(batch.done)
    assert done.sum() >= NUM_ENVS * 2, "episodes must end inside the rollout for this test to check anything"
    obs, final = np.asarray(batch.obs), np.asarray(batch.final_obs)
    # Where an episode goes on, the final observation is the next one acted on (to float32
    # rounding: jax 0.12.1's XLA computes the two in separate fusions, 1 ulp apart in some entries;
    # jax 0.10.2's are equal) ...
    np.testing.assert_array_max_ulp(final[:-1][~done[:-1]], obs[1:][~done[:-1]], maxulp=1)
    # ... where it ended, the next one is a fresh episode's, and the step after is marked as a reset.
    assert not np.allclose(final[:-1][done[:-1]], obs[1:][done[:-1]])
    np.testing.assert_array_equal(np.asarray(batch.reset)[1:], done[:-1])
    assert np.asarray(batch.reset)[0].all()  # the first step after init starts episodes
    np.testing.assert_array_equal(np.asarray(state.reset), done[-1])
    # A terminated CartPole pole is out of bounds in its final observation, never in the fresh one.
    assert np.all(np.abs(final[done][:, 2]) > 0.2)
    assert np.all(np.abs(obs[np.asarray(batch.reset)][:, 2]) <= 0.05)


def test_multi_agent_env_keeps_the_agent_axis_and_gae_runs_per_agent():
    env, params = lamella.envs.make("IteratedMatrixGame-v0", num_inner_steps=5)

    def defect_and_cooperate(key, obs, memory, reset):  # (batch, 2, 5) observations
        action = jnp.broadcast_to(jnp.array([1, 0], jnp.int32), obs.shape[:2])
        return memory, PolicyStep(action, action, jnp.zeros(obs.shape[:2]), jnp.ones(obs.shape[:2]))

    rollout = make_rollout(env, 12, NUM_ENVS)
    state = rollout.init(jax.random.key(0), params)
    _, batch = rollout.collect(state, defect_and_cooperate, jax.random.key(1), params)
    assert batch.obs.shape == (12, NUM_ENVS, 2, 5)
    assert batch.reward.shape == batch.truncated.shape == (12, NUM_ENVS, 2)
    assert batch.reset.shape == (12, NUM_ENVS)
    # Truncated after 5 rounds: steps 4 and 9 end episodes, 5 and 10 start new ones.
    np.testing.assert_array_equal(np.asarray(batch.truncated)[:, 0, 0], np.arange(12) % 5 == 4)
    np.testing.assert_array_equal(np.asarray(batch.reset)[:, 0], (np.arange(12) % 5 == 0))
    payoff = np.asarray(params.payoff)
    np.testing.assert_allclose(np.asarray(batch.reward)[0, 0], payoff[1, 0])
    # GAE takes the (time, env, agent) batch directly and equals one stream at a time.
    value_next = jnp.full(batch.reward.shape, 2.0)
    adv, _ = losses.gae_advantages(
        batch.reward, batch.value, value_next, batch.terminated, batch.done, 0.9, 0.8
    )
    one = losses.gae_advantages(
        batch.reward[:, 1, 0],
        batch.value[:, 1, 0],
        value_next[:, 1, 0],
        batch.terminated[:, 1, 0],
        batch.done[:, 1, 0],
        0.9,
        0.8,
    )[0]
    np.testing.assert_allclose(adv[:, 1, 0], one, rtol=1e-6)


def test_per_env_params_are_levels():
    env, params = lamella.envs.make("CartPole-v1")
    lengths = jnp.array([3, 5, 7], jnp.int32)  # one episode-length limit per env
    levels = jax.tree.map(lambda x: jnp.broadcast_to(x, (NUM_ENVS, *jnp.shape(x))), params)
    levels = levels.replace(max_steps_in_episode=lengths)
    rollout = make_rollout(env, 14, NUM_ENVS, params_axis=0)
    state = rollout.init(jax.random.key(0), levels)
    # Pushing left ends an episode by termination after about 9 steps; these limits come first.
    _, batch = rollout.collect(state, always(0), jax.random.key(1), levels)
    truncated = np.asarray(batch.truncated)
    for env_index, limit in enumerate([3, 5, 7]):
        np.testing.assert_array_equal(np.flatnonzero(truncated[:, env_index])[:2], [limit - 1, 2 * limit - 1])
    assert not np.asarray(batch.terminated).any()


def test_recurrent_memory_is_recorded_and_continues():
    space = spaces.Discrete(2)
    network = RecurrentActorCriticNet(space, hidden_sizes=(8,), rnn_hidden_size=8)
    actor_critic = recurrent_actor_critic(network, network.initial_memory)
    env, params = lamella.envs.make("CartPole-v1")
    rollout = make_rollout(env, 30, NUM_ENVS)
    state = rollout.init(jax.random.key(0), params, actor_critic.initial_memory(NUM_ENVS))
    net_params = actor_critic.init(jax.random.key(2), state.obs)
    end, batch = rollout.collect(
        state, actor_critic_policy(actor_critic, net_params), jax.random.key(3), params
    )
    assert batch.memory.shape == (30, NUM_ENVS, 8)
    after = next_memory(batch, end.memory)
    np.testing.assert_array_equal(after[:-1], batch.memory[1:])
    np.testing.assert_array_equal(after[-1], end.memory)
    # Replaying the sequence from the first memory gives the log-probs and values of the rollout.
    log_prob, value, _ = actor_critic.evaluate_actions(
        net_params, batch.memory[0], batch.obs, batch.reset, batch.raw_action
    )
    np.testing.assert_allclose(log_prob, batch.log_prob, atol=1e-5)
    np.testing.assert_allclose(value, batch.value, atol=1e-5)


def test_a_policy_that_does_not_record_values_acts_the_same():
    """``record_value=False`` (what an update that computes the values of the whole batch asks
    for) records zeros as values; actions and log-probabilities are those of the default."""
    actor_critic = feedforward_actor_critic(FeedForwardActorCriticNet(spaces.Discrete(2), hidden_sizes=(8,)))
    env, params = lamella.envs.make("CartPole-v1")
    rollout = make_rollout(env, 12, NUM_ENVS)
    state = rollout.init(jax.random.key(0), params)
    net_params = actor_critic.init(jax.random.key(2), state.obs)
    batches = [
        rollout.collect(
            state,
            actor_critic_policy(actor_critic, net_params, record_value=record),
            jax.random.key(3),
            params,
        )[1]
        for record in (True, False)
    ]
    recorded, unrecorded = batches
    np.testing.assert_array_equal(unrecorded.action, recorded.action)
    np.testing.assert_array_equal(unrecorded.log_prob, recorded.log_prob)
    assert not np.asarray(unrecorded.value).any()
    values = actor_critic.value(net_params, (), recorded.obs)
    assert float(jnp.abs(values).min()) > 0.0
    np.testing.assert_allclose(recorded.value, values, rtol=1e-5, atol=1e-6)


def test_dict_observations_work_with_both_kinds_of_actor_critic():
    """A network over dict observations (an image and a direction, as AMaze's) initialises from
    an example batch and acts, feed-forward or recurrent, through the same functions."""
    import flax.linen as nn

    from lamella.agents.actor_critic import feedforward_actor_critic
    from lamella.agents.distributions import ActionHead
    from lamella.agents.networks import RecurrentCore, zero_carry

    space = spaces.Discrete(3)

    def features(obs):
        image = obs["image"].reshape((*obs["image"].shape[:-2], -1)).astype(jnp.float32)
        return jnp.concatenate([image, jax.nn.one_hot(obs["dir"].astype(jnp.int32), 4)], -1)

    class FeedForward(nn.Module):
        @nn.compact
        def __call__(self, obs):
            x = nn.Dense(8)(features(obs))
            return ActionHead(space)(x), nn.Dense(1)(x)[..., 0]

    class Recurrent(nn.Module):
        @nn.compact
        def __call__(self, carry, inputs):
            obs, reset = inputs
            carry, x = RecurrentCore("gru", 8)(carry, (features(obs), reset))
            return carry, (ActionHead(space)(x), nn.Dense(1)(x)[..., 0])

    obs = {"image": jnp.ones((NUM_ENVS, 2, 2), jnp.uint8), "dir": jnp.array([0, 1, 3], jnp.int32)}
    reset = jnp.ones((NUM_ENVS,), bool)
    for actor_critic in (
        feedforward_actor_critic(FeedForward()),
        recurrent_actor_critic(Recurrent(), lambda batch: zero_carry("gru", batch, 8)),
    ):
        params = actor_critic.init(jax.random.key(0), obs)
        memory = actor_critic.initial_memory(NUM_ENVS)
        _, dist, value = actor_critic.step(params, memory, obs, reset)
        assert dist.sample(jax.random.key(1)).shape == (NUM_ENVS,) and value.shape == (NUM_ENVS,)
        assert actor_critic.value(params, memory, obs).shape == (NUM_ENVS,)
        sequence = jax.tree.map(lambda x: jnp.stack([x, x]), obs)
        log_prob, _, _ = actor_critic.evaluate_actions(
            params, memory, sequence, jnp.stack([reset, ~reset]), jnp.zeros((2, NUM_ENVS), jnp.int32)
        )
        assert log_prob.shape == (2, NUM_ENVS)


def test_bad_arguments_raise_early():
    env, params = lamella.envs.make("CartPole-v1")
    with pytest.raises(ValueError, match="num_steps"):
        make_rollout(env, 0, 4)
    with pytest.raises(ValueError, match="params_axis"):
        make_rollout(env, 4, 4, params_axis=1)
    rollout = make_rollout(env, 4, 2, info_keys=("returned_episode",))
    state = rollout.init(jax.random.key(0), params)
    with pytest.raises(KeyError, match="EpisodeStatistics"):
        rollout.collect(state, always(0), jax.random.key(1), params)


def test_on_an_accelerator_the_rollout_and_gae_loops_unroll_with_the_same_values(monkeypatch):
    """On a GPU (or TPU) the rollout's and GAE's scans run ``ACCELERATOR_UNROLL`` steps per loop
    iteration (there each iteration of a compiled loop costs tens of microseconds besides its
    kernels); on the CPU they stay rolled. Unrolled, they give the same values (actions, flags and
    integers bit for bit; floats but for the last-bit rounding of differently fused programs:
    XLA's CPU backend makes ``a*b+c`` one FMA inside a fusion). The backend is
    faked: the choice reads ``jax.default_backend()`` at trace time, and the unrolled program runs
    here, on the CPU."""
    from lamella.agents import _unroll

    actor_critic = feedforward_actor_critic(FeedForwardActorCriticNet(spaces.Discrete(2), hidden_sizes=(8,)))
    env, params = lamella.envs.make("CartPole-v1")
    key = jax.random.key(3)

    def collect_and_gae():
        rollout = make_rollout(env, NUM_STEPS, NUM_ENVS)  # a fresh closure: traced anew
        state = rollout.init(jax.random.key(0), params)
        net_params = actor_critic.init(jax.random.key(2), state.obs)
        policy = actor_critic_policy(actor_critic, net_params)

        def run(state, key):
            _, batch = rollout.collect(state, policy, key, params)
            value = batch.value
            advantages = losses.gae_advantages(
                batch.reward, value, jnp.roll(value, -1, 0), batch.terminated, batch.done, 0.99, 0.95
            )
            return batch, advantages

        return scan_unrolls(run, state, key), jax.jit(run)(state, key)

    rolled_unrolls, rolled = collect_and_gae()
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert _unroll.loop_unroll(NUM_STEPS) == _unroll.ACCELERATOR_UNROLL > 1
    assert _unroll.loop_unroll(3) == 3
    unrolled_unrolls, unrolled = collect_and_gae()
    assert rolled_unrolls.count(1) >= 2 and _unroll.ACCELERATOR_UNROLL not in rolled_unrolls
    assert unrolled_unrolls.count(_unroll.ACCELERATOR_UNROLL) == 2  # the rollout and GAE
    assert np.asarray(rolled[0].done).sum() >= NUM_ENVS, "episodes must end inside the rollout"

    assert_same_up_to_rounding(unrolled, rolled, rtol=1e-6, atol=1e-6)


def test_packed_scan_writes_one_array_per_step_and_gives_back_the_same_bits(monkeypatch):
    """``packed_scan`` stacks a step's 32-bit and bool outputs with the batch's leading axis as one
    uint32 array and cuts it back after the loop: every leaf comes back with its dtype, shape and
    bits (NaN payloads, -0.0, infinities, extreme integers); leaves it cannot pack (another leading
    axis, int8, scalars) are stacked as ``lax.scan`` stacks them."""
    from lamella.agents import _unroll

    batch, steps = 3, 5
    weird = np.array([np.nan, -0.0, np.inf], np.float32)
    weird[0] = np.frombuffer(np.uint32(0x7FC01234).tobytes(), np.float32)[0]  # a NaN with a payload

    def body(carry, x):
        out = {
            "f": jnp.stack([carry, weird + x, -carry], axis=0),  # (batch, 3) float32
            "i": jnp.full((batch, 2, 2), jnp.iinfo(jnp.int32).min, jnp.int32) + x.astype(jnp.int32),
            "u": jnp.full((batch,), jnp.iinfo(jnp.uint32).max, jnp.uint32) - x.astype(jnp.uint32),
            "b": jnp.arange(batch) % 2 == x.astype(jnp.int32) % 2,
            "small": jnp.full((batch,), 7, jnp.int8),
            "other_axis": jnp.full((batch + 1,), x),
            "scalar": x * 2.0,
        }
        return carry + 1.0, out

    init, xs = jnp.arange(3, dtype=jnp.float32) - 1.0, jnp.arange(steps, dtype=jnp.float32)
    reference = jax.lax.scan(body, init, xs)
    packed = jax.jit(lambda init, xs: _unroll.packed_scan(body, init, xs, batch=batch))(init, xs)

    def bits(leaf):
        leaf = np.asarray(leaf)
        return (leaf.dtype, leaf.shape, leaf.view(np.uint32) if leaf.dtype == np.float32 else leaf)

    for got, want in zip(jax.tree.leaves(packed), jax.tree.leaves(reference), strict=True):
        got, want = bits(got), bits(want)
        assert got[:2] == want[:2]
        np.testing.assert_array_equal(got[2], want[2])
    assert np.isnan(np.asarray(packed[1]["f"])).any() and (np.asarray(packed[1]["f"]) == np.inf).any()

    stacked = [
        tuple(var.aval.shape)
        for eqn in jax.make_jaxpr(lambda i, x: _unroll.packed_scan(body, i, x, batch=batch))(init, xs).eqns
        if eqn.primitive.name == "scan"
        for var in eqn.outvars[1:]
    ]
    # one (steps, batch, 3 + 4 + 1 + 1) array for f, i, u, b; small, other_axis and scalar as they are
    assert sorted(stacked) == sorted([(steps, batch, 9), (steps, batch), (steps, batch + 1), (steps,)])
    monkeypatch.setattr(_unroll, "PACK_OUTPUTS", False)
    unpacked = jax.make_jaxpr(lambda i, x: _unroll.packed_scan(body, i, x, batch=batch))(init, xs)
    assert sum(len(eqn.outvars) - 1 for eqn in unpacked.eqns if eqn.primitive.name == "scan") == 7


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Foraging-8x8-2p-2f-coop-v3"])
def test_packed_rollout_is_the_stacked_rollout_bit_for_bit(monkeypatch, env_id):
    """The rollout writes each step's transition as one packed array (``_unroll.PACK_OUTPUTS``):
    the batch it returns is the one the per-leaf stacking returns, bit for bit, on a single-agent
    env and on a multi-agent env with dict observations (action masks)."""
    from lamella.agents import _unroll

    env, params = lamella.envs.make(env_id)
    env = EpisodeStatistics(env)
    space = env.action_space(params)

    def random_policy(key, obs, memory, reset):
        batch = jax.tree.leaves(obs)[0].shape[0]
        action = jax.random.randint(key, (batch, *space.shape), 0, 2, jnp.int32)
        value = jnp.sum(jax.tree.leaves(obs)[0].reshape(batch, -1), -1)
        return memory, PolicyStep(action, action, jnp.zeros(action.shape), value)

    def collect():
        rollout = make_rollout(env, 60, NUM_ENVS, info_keys=("returned_episode",))  # LBF: 50 steps
        state = rollout.init(jax.random.key(0), params)
        return jax.jit(lambda state, key: rollout.collect(state, random_policy, key, params))(
            state, jax.random.key(1)
        )

    packed = collect()
    monkeypatch.setattr(_unroll, "PACK_OUTPUTS", False)
    stacked = collect()
    assert np.asarray(packed[1].done).any(), "episodes must end inside the rollout"
    for got, want in zip(jax.tree.leaves(packed), jax.tree.leaves(stacked), strict=True):
        if jnp.issubdtype(got.dtype, jax.dtypes.prng_key):
            got, want = jax.random.key_data(got), jax.random.key_data(want)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
