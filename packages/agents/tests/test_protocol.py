"""The minimal custom agent of docs/architecture.md (and the agents README) runs under jit, vmap and scan, and learns."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

import lamella.envs
from lamella.agents import Agent, evaluate_agent, reset_memory_where


# --- the example from docs/architecture.md, verbatim ---
def make_linear_reinforce(num_obs: int, num_actions: int, learning_rate: float = 0.05) -> Agent:
    optimizer = optax.adam(learning_rate)

    def init(key, obs_example=None):
        params = {"w": 0.01 * jax.random.normal(key, (num_obs, num_actions)), "b": jnp.zeros(num_actions)}
        return (params, optimizer.init(params)), ()  # train state, memory (none: feed-forward)

    def logits(params, obs):
        return obs @ params["w"] + params["b"]

    def policy(key, train_state, obs, memory, eval=False):
        params, _ = train_state
        out = logits(params, obs)
        action = jnp.argmax(out, -1) if eval else jax.random.categorical(key, out)
        return action, train_state, memory

    def update(trajectory, train_state, memory):
        obs, action, returns = trajectory  # (T, B, num_obs), (T, B), (T, B) returns-to-go
        params, opt_state = train_state

        def loss(params):
            log_p = jax.nn.log_softmax(logits(params, obs))
            chosen = jnp.take_along_axis(log_p, action[..., None], -1)[..., 0]
            advantage = (returns - returns.mean()) / (returns.std() + 1e-8)
            return -(chosen * advantage).mean()

        value, grads = jax.value_and_grad(loss)(params)
        updates, opt_state = optimizer.update(grads, opt_state)
        return (optax.apply_updates(params, updates), opt_state), memory, {"loss": value}

    def reset_memory(memory, eval=False):
        return ()

    return Agent(init, policy, update, reset_memory)


# --- end of the example ---


def rollout_and_update(agent, env, env_params, num_envs, num_steps, gamma=0.99):
    reset = jax.vmap(env.reset, in_axes=(0, None))
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def iteration(carry, key):
        train_state, memory, obs, env_state = carry
        keys = jax.random.split(key, num_steps)

        def one_step(carry, key):
            train_state, memory, obs, env_state = carry
            key_act, key_env = jax.random.split(key)
            action, train_state, memory = agent.policy(key_act, train_state, obs, memory)
            next_obs, env_state, reward, terminated, truncated, _ = step(
                jax.random.split(key_env, num_envs), env_state, action, env_params
            )
            done = terminated | truncated
            memory = reset_memory_where(agent, done, memory)
            return (train_state, memory, next_obs, env_state), (obs, action, reward, done)

        (train_state, memory, obs, env_state), (o, a, r, d) = jax.lax.scan(
            one_step, (train_state, memory, obs, env_state), keys
        )

        def discount(following, x):
            reward, done = x
            value = reward + gamma * following * (1 - done)
            return value, value

        _, returns = jax.lax.scan(discount, jnp.zeros(num_envs), (r, d), reverse=True)
        train_state, memory, metrics = agent.update((o, a, returns), train_state, memory)
        return (train_state, memory, obs, env_state), metrics["loss"]

    def train(key, num_iterations):
        key_init, key_env, key_loop = jax.random.split(key, 3)
        obs, env_state = reset(jax.random.split(key_env, num_envs), env_params)
        train_state, memory = agent.init(key_init, obs)
        carry, losses = jax.lax.scan(
            iteration, (train_state, memory, obs, env_state), jax.random.split(key_loop, num_iterations)
        )
        return carry[0], losses

    return train


def test_custom_agent_runs_under_jit_vmap_scan_and_learns():
    env, env_params = lamella.envs.make("CartPole-v1")
    agent = make_linear_reinforce(4, 2)
    train = rollout_and_update(agent, env, env_params, num_envs=8, num_steps=64)
    seeds = jax.random.split(jax.random.key(0), 2)
    train_states, losses = jax.jit(jax.vmap(train, in_axes=(0, None)), static_argnums=1)(seeds, 60)
    assert losses.shape == (2, 60)

    def greedy_return(train_state):
        return evaluate_agent(agent, train_state, env, env_params, jax.random.key(1), 8, 500, ())[
            "episode_return"
        ]

    trained = jax.jit(jax.vmap(greedy_return))(train_states)
    untrained = greedy_return(agent.init(jax.random.key(0))[0])
    assert np.all(np.asarray(trained).mean(1) > max(100.0, 2 * float(untrained.mean())))


def test_actor_critic_protocol_is_the_same_for_feedforward_and_recurrent_networks():
    """``step`` one step at a time and ``evaluate_actions`` on the whole sequence agree, for both kinds."""
    from lamella.agents import feedforward_actor_critic, recurrent_actor_critic
    from lamella.agents.actor_critic import FeedForwardActorCriticNet, RecurrentActorCriticNet
    from lamella.envs import spaces

    space = spaces.Discrete(3)
    recurrent_net = RecurrentActorCriticNet(space, hidden_sizes=(8,), rnn_hidden_size=8)
    kinds = {
        "feedforward": feedforward_actor_critic(FeedForwardActorCriticNet(space, hidden_sizes=(8,))),
        "recurrent": recurrent_actor_critic(recurrent_net, recurrent_net.initial_memory),
    }
    time, batch = 5, 4
    obs = jax.random.normal(jax.random.key(0), (time, batch, 6))
    reset = jnp.zeros((time, batch), bool).at[0].set(True).at[3, 1].set(True)
    raw_action = jax.random.randint(jax.random.key(1), (time, batch), 0, 3)
    for name, actor_critic in kinds.items():
        assert actor_critic.recurrent == (name == "recurrent")
        params = actor_critic.init(jax.random.key(2), obs[0])
        memory = first = actor_critic.initial_memory(batch)
        step_log_probs, step_values = [], []
        for t in range(time):
            before = memory
            memory, dist, value = actor_critic.step(params, memory, obs[t], reset[t])
            step_log_probs.append(dist.log_prob(raw_action[t]))
            step_values.append(value)
            # The bootstrap value continues from the memory it is given, without a reset.
            keep = ~np.asarray(reset[t])
            bootstrap = actor_critic.value(params, before, obs[t])
            np.testing.assert_allclose(np.asarray(bootstrap)[keep], np.asarray(value)[keep], atol=1e-5)
        log_prob, value, entropy = jax.jit(actor_critic.evaluate_actions)(
            params, first, obs, reset, raw_action
        )
        assert log_prob.shape == value.shape == entropy.shape == (time, batch)
        np.testing.assert_allclose(log_prob, jnp.stack(step_log_probs), atol=1e-5, err_msg=name)
        np.testing.assert_allclose(value, jnp.stack(step_values), atol=1e-5, err_msg=name)
        assert np.all(np.asarray(entropy) > 0) and np.all(np.asarray(entropy) <= np.log(3) + 1e-6)


def test_recurrent_step_keeps_each_dimension_of_a_box_distribution():
    """One recurrent step is the first entry of a length-1 sequence: every field of a Gaussian
    (per-dimension log_std and bounds included) must come out for the whole batch, not its
    first dimension's entry."""
    from lamella.agents import recurrent_actor_critic
    from lamella.agents.actor_critic import RecurrentActorCriticNet
    from lamella.envs import spaces

    space = spaces.Box(np.array([-1.0, 0.0, -5.0]), np.array([1.0, 2.0, 5.0]))
    net = RecurrentActorCriticNet(space, hidden_sizes=(8,), rnn_hidden_size=8)
    actor_critic = recurrent_actor_critic(net, net.initial_memory)
    obs = jax.random.normal(jax.random.key(0), (4, 6))

    @jax.jit
    def step(key):
        params = actor_critic.init(key, obs)
        log_std = params["params"]["ActionHead_0"]["log_std"]
        params["params"]["ActionHead_0"]["log_std"] = log_std + jnp.array([-1.0, 0.0, 0.5])
        _, dist, _ = actor_critic.step(params, actor_critic.initial_memory(4), obs, jnp.ones((4,), bool))
        return dist

    dist = step(jax.random.key(1))
    assert dist.mean.shape == dist.log_std.shape == dist.low.shape == (4, 3)
    np.testing.assert_allclose(dist.log_std, np.broadcast_to([-1.0, 0.0, 0.5], (4, 3)), atol=1e-6)
    np.testing.assert_allclose(dist.low, np.broadcast_to([-1.0, 0.0, -5.0], (4, 3)))
    np.testing.assert_allclose(dist.high, np.broadcast_to([1.0, 2.0, 5.0], (4, 3)))


def test_fast_gradient_recurrent_network_has_the_default_parameters_values_and_gradients():
    """``fast_gradient=True`` swaps flax's dense layers for lamella's (a faster CPU gradient): the
    parameter tree (names, shapes, initial values) must be the default network's, so checkpoints
    load either way, and outputs and gradients equal up to float rounding. Without the layers
    after the core (``post_core_layers=False``, Pax's PPO_memory) the heads read the core.
    (The feed-forward network's fast layers are lamella.agents.networks.MLP's and ActionHead's,
    tested in test_networks.)"""
    from lamella.agents import recurrent_actor_critic
    from lamella.agents.actor_critic import RecurrentActorCriticNet
    from lamella.envs import spaces

    space = spaces.Discrete(4)
    obs = jax.random.normal(jax.random.key(0), (3, 5, 6))  # (T, batch, features)
    reset = jnp.zeros((3, 5), bool).at[0].set(True)
    action = jax.random.randint(jax.random.key(1), (3, 5), 0, 4)

    def build(**options):
        net = RecurrentActorCriticNet(space, hidden_sizes=(8,), rnn_hidden_size=8, **options)
        return recurrent_actor_critic(net, net.initial_memory)

    def loss(actor_critic):
        def total(params):
            memory = actor_critic.initial_memory(5)
            log_prob, value, entropy = actor_critic.evaluate_actions(params, memory, obs, reset, action)
            return jnp.sum(log_prob * jnp.arange(5.0)) + jnp.sum(jnp.sin(value)) + jnp.sum(entropy)

        return jax.jit(jax.value_and_grad(total))

    default, fast = build(), build(fast_gradient=True)
    params = default.init(jax.random.key(2), obs[0])
    fast_params = fast.init(jax.random.key(2), obs[0])
    assert jax.tree.structure(fast_params) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(fast_params), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(a, b)
    (value, grads), (fast_value, fast_grads) = loss(default)(params), loss(fast)(params)
    np.testing.assert_allclose(fast_value, value, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(fast_grads), jax.tree.leaves(grads), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    bare = build(post_core_layers=False)
    bare_params = bare.init(jax.random.key(2), obs[0])["params"]
    # The torso (Dense_0), the core, the policy head and the value layer: no Dense_1 / Dense_2.
    assert sorted(bare_params) == ["ActionHead_0", "Dense_0", "Dense_1", "core"]
    assert bare_params["Dense_1"]["kernel"].shape == (8, 1)
    assert bare_params["ActionHead_0"]["Dense_0"]["kernel"].shape == (8, 4)
    assert sorted(params["params"]) == ["ActionHead_0", "Dense_0", "Dense_1", "Dense_2", "Dense_3", "core"]
