"""Unit tests of the off-policy agents: protocol shapes, schedules, update rules, errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs
from lamella.agents.offpolicy import (
    AGENTS,
    Batch,
    DDPGConfig,
    DQNConfig,
    SACConfig,
    TD3Config,
    make_ddpg,
    make_dqn,
    make_sac,
    make_td3,
    make_tqc,
)
from lamella.agents.offpolicy.common import ActionScaler, flatten_observation, polyak
from lamella.envs import spaces

SMALL = (16,)


def _spaces(env_id):
    env, params = lamella.envs.make(env_id)
    return env.observation_space(params), env.action_space(params)


def _batch(obs_space, action, size=8, key=0):
    obs = jnp.ones((size, *obs_space.shape), jnp.float32)
    return Batch(obs, action, jnp.ones(size), jnp.full(size, 0.9), obs, jax.random.key(key))


@pytest.mark.parametrize("name", ["sac", "td3", "ddpg", "tqc"])
def test_continuous_agents_follow_the_protocol(name):
    config_cls, make = AGENTS[name]
    obs_space, act_space = _spaces("Pendulum-v1")
    agent = make(config_cls(hidden_sizes=SMALL), obs_space, act_space)
    train_state, memory = agent.init(jax.random.key(0), jnp.zeros((8, 3)))
    obs = jax.random.normal(jax.random.key(1), (8, 3))
    action, train_state, memory = jax.jit(agent.policy, static_argnames="eval")(
        jax.random.key(2), train_state, obs, memory
    )
    assert action.shape == (8, 1) and action.dtype == jnp.float32
    assert np.all(np.abs(np.asarray(action)) <= 2.0)  # Pendulum's torque bound
    greedy = [agent.policy(jax.random.key(k), train_state, obs, memory, eval=True)[0] for k in (3, 4)]
    np.testing.assert_array_equal(greedy[0], greedy[1])  # greedy actions ignore the key
    new_state, _, metrics = jax.jit(agent.update)(_batch(obs_space, action), train_state, memory)
    assert {"loss", "critic_loss", "actor_loss"} <= set(metrics)
    assert all(np.isfinite(np.asarray(v)) for v in metrics.values())
    assert int(new_state.updates) == 1
    assert agent.reset_memory(memory) == ()


def test_dqn_and_discrete_sac_follow_the_protocol():
    obs_space, act_space = _spaces("CartPole-v1")
    for agent in (
        make_dqn(DQNConfig(hidden_sizes=SMALL, dueling=True), obs_space, act_space),
        make_sac(SACConfig(hidden_sizes=SMALL), obs_space, act_space),
    ):
        state, memory = agent.init(jax.random.key(0))
        obs = jax.random.normal(jax.random.key(1), (8, 4))
        action, state, memory = agent.policy(jax.random.key(2), state, obs, memory)
        assert action.shape == (8,) and action.dtype == jnp.int32
        assert np.all((np.asarray(action) >= 0) & (np.asarray(action) < 2))
        state, _, metrics = jax.jit(agent.update)(_batch(obs_space, action), state, memory)
        assert np.isfinite(float(metrics["loss"]))


def test_dqn_epsilon_decays_linearly_with_acted_steps():
    obs_space, act_space = _spaces("CartPole-v1")
    config = DQNConfig(hidden_sizes=SMALL, epsilon_start=1.0, epsilon_end=0.1, exploration_steps=100)
    agent = make_dqn(config, obs_space, act_space)
    state, _ = agent.init(jax.random.key(0))
    obs = jnp.zeros((10, 4))
    for _ in range(5):  # 50 acted steps: epsilon 1 - 0.5 * 0.9 = 0.55
        _, state, _ = agent.policy(jax.random.key(1), state, obs, ())
    assert int(state.acted_steps) == 50
    _, _, metrics = agent.update(_batch(obs_space, jnp.zeros(8, jnp.int32)), state, ())
    np.testing.assert_allclose(metrics["epsilon"], 0.55, rtol=1e-6)
    # Greedy acting does not count.
    _, state2, _ = agent.policy(jax.random.key(1), state, obs, (), eval=True)
    assert int(state2.acted_steps) == 50


def test_dqn_hard_target_copy_period():
    obs_space, act_space = _spaces("CartPole-v1")
    agent = make_dqn(DQNConfig(hidden_sizes=SMALL, target_update_period=3), obs_space, act_space)
    state, _ = agent.init(jax.random.key(0))
    update = jax.jit(agent.update)
    batch = _batch(obs_space, jnp.zeros(8, jnp.int32))
    initial_target = state.target_params
    for i in range(3):
        state, _, _ = update(batch, state, ())
        same = jax.tree.all(
            jax.tree.map(lambda a, b: bool(jnp.all(a == b)), state.target_params, initial_target)
        )
        assert same == (i < 2)  # copied at the 3rd update
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), state.target_params, state.params))


def test_td3_delays_actor_updates():
    obs_space, act_space = _spaces("Pendulum-v1")
    agent = make_td3(TD3Config(hidden_sizes=SMALL, policy_frequency=2), obs_space, act_space)
    state, _ = agent.init(jax.random.key(0))
    update = jax.jit(agent.update)
    batch = _batch(obs_space, jnp.zeros((8, 1)))
    changed = []
    for _ in range(4):
        before = state.actor_params
        state, _, _ = update(batch, state, ())
        changed.append(
            not jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), before, state.actor_params))
        )
    assert changed == [True, False, True, False]


def test_ddpg_is_the_core_with_one_critic_and_no_smoothing():
    obs_space, act_space = _spaces("Pendulum-v1")
    config = DDPGConfig(hidden_sizes=SMALL)
    assert (config.num_critics, config.policy_noise, config.policy_frequency) == (1, 0.0, 1)
    state, _ = make_ddpg(config, obs_space, act_space).init(jax.random.key(0))
    kernel = jax.tree.leaves(state.critic_params)[0]
    assert kernel.shape[0] == 1  # one critic in the ensemble axis


def test_polyak_and_action_scaling():
    out = polyak({"w": jnp.array(1.0)}, {"w": jnp.array(3.0)}, 0.25)
    np.testing.assert_allclose(out["w"], 1.5)
    scaler = ActionScaler(spaces.Box(np.array([-2.0, 0.0]), np.array([2.0, 1.0]), (2,), jnp.float32))
    np.testing.assert_allclose(scaler.to_env(jnp.array([[1.0, -1.0]])), [[2.0, 0.0]])
    np.testing.assert_allclose(scaler.to_unit(jnp.array([[1.0, 0.75]])), [[0.5, 0.5]])


def test_flatten_goal_observation_uses_observation_and_desired_goal():
    obs = {
        "observation": jnp.ones((2, 3)),
        "achieved_goal": jnp.full((2, 2), 5.0),
        "desired_goal": jnp.full((2, 2), 7.0),
    }
    np.testing.assert_array_equal(flatten_observation(obs), [[1, 1, 1, 7, 7]] * 2)


def test_bad_inputs_raise_clear_errors():
    obs_space, box = _spaces("Pendulum-v1")
    _, discrete = _spaces("CartPole-v1")
    with pytest.raises(TypeError, match="Discrete action space"):
        make_dqn(DQNConfig(), obs_space, box)
    with pytest.raises(TypeError, match="1-D Box"):
        make_td3(TD3Config(), obs_space, discrete)
    with pytest.raises(ValueError, match="tau"):
        make_sac(SACConfig(tau=0.0), obs_space, box)
    from lamella.agents.offpolicy import TQCConfig

    with pytest.raises(ValueError, match="drop_per_critic"):
        make_tqc(TQCConfig(num_quantiles=2, drop_per_critic=2), obs_space, box)


@pytest.mark.parametrize("double", [False, True])
def test_dqn_honours_action_masks_in_acting_and_in_the_target(double):
    # A dict observation with "action_mask": illegal actions are never chosen (greedy or
    # random) and never valued by the target; the mask is not a network input.
    obs_space = spaces.Dict(
        {"obs": spaces.Box(-1.0, 1.0, (4,), np.float32), "action_mask": spaces.Box(0, 1, (5,), np.bool_)}
    )
    config = DQNConfig(hidden_sizes=SMALL, double=double, huber=False, epsilon_start=1.0, epsilon_end=1.0)
    agent = make_dqn(config, obs_space, spaces.Discrete(5))
    state, _ = agent.init(jax.random.key(0))
    kernels = {leaf.shape for leaf in jax.tree.leaves(state.params) if leaf.ndim == 2}
    assert kernels == {(4, 16), (16, 5)}  # the input is the 4 obs features only
    x = jax.random.normal(jax.random.key(1), (64, 4))
    q = np.asarray(make_dqn_q(agent, state, x))
    # Forbid each row's unmasked best action and the next one: three legal actions per row.
    best = q.argmax(-1)
    mask = np.ones((64, 5), bool)
    mask[np.arange(64), best] = False
    mask[np.arange(64), (best + 1) % 5] = False
    obs = {"obs": x, "action_mask": jnp.asarray(mask)}
    greedy, _, _ = agent.policy(jax.random.key(2), state, obs, (), eval=True)
    np.testing.assert_array_equal(greedy, np.where(mask, q, -np.inf).argmax(-1))
    assert np.all(greedy != best)
    # epsilon 1: uniform over the legal actions only, and every legal action is drawn.
    draws = np.concatenate(
        [np.asarray(agent.policy(jax.random.key(k), state, obs, ())[0]) for k in range(40)]
    )
    rows = np.tile(np.arange(64), 40)
    assert np.all(mask[rows, draws])
    assert np.all(np.bincount(draws, minlength=5) > 0)
    # Target r + 1 * max over the legal next actions (target and online networks equal at init).
    batch = Batch(obs, jnp.zeros(64, jnp.int32), jnp.zeros(64), jnp.ones(64), obs, jax.random.key(3))
    _, _, metrics = agent.update(batch, state, ())
    masked_max = np.where(mask, q, -np.inf).max(-1).mean()
    np.testing.assert_allclose(metrics["q_target"], masked_max, rtol=1e-5)
    assert abs(masked_max - q.max(-1).mean()) > 1e-3
    # A row with no legal action counts as all legal (no -inf reaches the target).
    none = {"obs": x, "action_mask": jnp.zeros((64, 5), bool)}
    _, _, metrics = agent.update(
        Batch(none, batch.action, batch.reward, batch.discount, none, batch.key), state, ()
    )
    np.testing.assert_allclose(metrics["q_target"], q.max(-1).mean(), rtol=1e-5)


def make_dqn_q(agent, state, x):
    """DQN's Q-values of observations ``x`` (greedy actions' values, read through the network)."""
    from lamella.agents.offpolicy.common import QNetwork

    return QNetwork(5, SMALL).apply(state.params, x)


@pytest.mark.parametrize("name", ["sac", "tqc", "discrete_sac"])
def test_reward_bounds_clip_the_critic_targets(name):
    """Rewards of 10 with gamma 0.5 give targets of 10 + 0.5 * (next soft value);
    ``reward_bounds=(-0.1, 0.1)`` allows returns in [-0.2, 0.2] only, so every target (TQC:
    every atom) is clipped to 0.2, and their mean is 0.2 (unclipped it would need a next soft
    value of exactly -19.6 at every sample)."""
    env_id = "CartPole-v1" if name == "discrete_sac" else "Pendulum-v1"
    config_cls, make = AGENTS["tqc" if name == "tqc" else "sac"]
    obs_space, act_space = _spaces(env_id)
    action = jnp.zeros(8, jnp.int32) if name == "discrete_sac" else jnp.zeros((8, 1))
    batch = _batch(obs_space, action).replace(reward=jnp.full(8, 10.0), discount=jnp.full(8, 0.5))
    config = config_cls(hidden_sizes=SMALL, gamma=0.5, reward_bounds=(-0.1, 0.1))
    agent = make(config, obs_space, act_space)
    # init and update in one compiled program (an eager init costs more than compiling it)
    q_target = jax.jit(lambda key: agent.update(batch, *agent.init(key, batch.obs))[2]["q_target"])(
        jax.random.key(0)
    )
    np.testing.assert_allclose(q_target, 0.2, rtol=1e-5)


def test_critic_sizes_and_layer_norm():
    """``critic_hidden_sizes`` shapes the critics only; ``critic_norm="layer"`` adds LayerNorm
    parameters to every hidden layer of each critic; an unknown norm is refused."""
    obs_space, act_space = _spaces("Pendulum-v1")
    config = SACConfig(hidden_sizes=SMALL, critic_hidden_sizes=(8, 8, 8), critic_norm="layer")
    agent = make_sac(config, obs_space, act_space)
    state = jax.eval_shape(
        lambda key: agent.init(key, jnp.zeros((1, 3)))[0], jax.random.key(0)
    )  # shapes only
    leaves = jax.tree_util.tree_leaves_with_path(state.critic_params)
    flat = {jax.tree_util.keystr(path): leaf.shape for path, leaf in leaves}
    norms = [key for key in flat if "LayerNorm" in key and "scale" in key]
    dense = sorted(shape for key, shape in flat.items() if "Dense" in key and "kernel" in key)
    assert len(norms) == 3 and all(flat[key] == (2, 8) for key in norms)  # 2 critics, 3 layers of 8
    assert dense == sorted([(2, 4, 8), (2, 8, 8), (2, 8, 8), (2, 8, 1)])  # obs 3 + action 1 in
    actor_kernels = [leaf.shape for leaf in jax.tree_util.tree_leaves(state.actor_params) if leaf.ndim == 2]
    assert actor_kernels[0] == (3, 16)  # the actor keeps hidden_sizes
    with pytest.raises(ValueError, match="critic_norm must be None or 'layer'"):
        make_sac(SACConfig(critic_norm="batch"), obs_space, act_space)


def _recording_agent():
    """An agent that acts with its observations' row sums and records what ``update`` got."""
    from lamella.agents.protocol import Agent

    def update(batch, state, memory):
        return state + 1, memory, {"obs": batch.obs, "reward": batch.reward, "next_obs": batch.next_obs}

    return Agent(
        init=lambda key, obs: (jnp.zeros((), jnp.int32), ()),
        policy=lambda key, state, obs, memory, eval=False: (obs.sum(-1, keepdims=True), state, memory),
        update=update,
        reset_memory=lambda memory, eval=False: (),
    )


def test_sac_reward_scaling_and_observation_normalisation_change_only_what_the_agent_sees():
    """``reward_scaling`` scales the rewards ``update`` sees; ``normalize_observations`` takes the
    training policy's observations into running statistics (not greedy evaluation's) and gives
    the agent observations normalised by them, in acting and learning; the defaults leave
    ``make_sac``'s agent as it was (about 2 CPU-s)."""
    from lamella.agents.offpolicy.sac import NormalizedSACTrainState, SACTrainState, normalize_and_scale

    obs_space, act_space = _spaces("Pendulum-v1")
    obs = 3.0 + 2.0 * jax.random.normal(jax.random.key(1), (8, 3))
    batch = Batch(obs, jnp.full((8, 1), 0.5), jnp.arange(8.0), jnp.full(8, 0.9), obs[::-1], jax.random.key(2))

    scaled = normalize_and_scale(_recording_agent(), obs_space, False, 5.0)
    state, memory = scaled.init(jax.random.key(0), obs)
    _, _, seen = scaled.update(batch, state, memory)
    np.testing.assert_allclose(seen["reward"], 5.0 * batch.reward)
    np.testing.assert_array_equal(seen["obs"], obs)

    both = normalize_and_scale(_recording_agent(), obs_space, True, 5.0)
    state, memory = both.init(jax.random.key(0), obs)
    assert isinstance(state, NormalizedSACTrainState)
    _, state, _ = both.policy(jax.random.key(3), state, obs, memory)
    stats = state.obs_stats
    np.testing.assert_allclose(stats.mean, obs.mean(0), rtol=1e-3)
    np.testing.assert_allclose(stats.var, obs.var(0), rtol=1e-3)
    action, after_eval, _ = both.policy(jax.random.key(3), state, obs + 1.0, memory, eval=True)
    np.testing.assert_array_equal(after_eval.obs_stats.count, stats.count)  # evaluation only reads them
    np.testing.assert_allclose(action, stats.normalize(obs + 1.0).sum(-1, keepdims=True), rtol=1e-6)
    learned, _, seen = both.update(batch, state, memory)
    np.testing.assert_allclose(seen["obs"], stats.normalize(obs), rtol=1e-6)
    np.testing.assert_allclose(seen["next_obs"], stats.normalize(obs[::-1]), rtol=1e-6)
    np.testing.assert_allclose(seen["reward"], 5.0 * batch.reward)
    assert int(learned.agent_state) == 1 and learned.obs_stats is stats
    assert float(jnp.abs(seen["obs"]).max()) < 3.0  # normalised: obs itself reaches about 3 + 2 x 2

    plain = make_sac(SACConfig(hidden_sizes=SMALL), obs_space, act_space)
    # Abstractly (nothing compiles): which train state each config's agent starts from.
    assert isinstance(jax.eval_shape(plain.init, jax.random.key(0), obs)[0], SACTrainState)
    wrapped = make_sac(SACConfig(hidden_sizes=SMALL, normalize_observations=True), obs_space, act_space)
    assert isinstance(jax.eval_shape(wrapped.init, jax.random.key(0), obs)[0], NormalizedSACTrainState)


def test_sac_log_std_bounds_set_the_fresh_actors_exploration():
    """A fresh actor's std is about exp(mean of ``log_std_bounds``): 0.22 by default, 0.69 with
    (-5, 4.26), brax.training's start; bounds the wrong way round are refused (about 2 CPU-s)."""
    obs_space, act_space = _spaces("Pendulum-v1")  # actions in [-2, 2]
    obs = jnp.zeros((512, 3))
    spreads = []
    for bounds in ((-5.0, 2.0), (-5.0, 4.26)):
        agent = make_sac(SACConfig(hidden_sizes=SMALL, log_std_bounds=bounds), obs_space, act_space)
        state, memory = agent.init(jax.random.key(0), obs)
        action, _, _ = agent.policy(jax.random.key(1), state, obs, memory)
        spreads.append(float(jnp.std(jnp.arctanh(jnp.clip(action / 2.0, -0.999999, 0.999999)))))
    np.testing.assert_allclose(spreads, [0.22, 0.69], rtol=0.15)
    with pytest.raises(ValueError, match="log_std_bounds"):
        make_sac(SACConfig(log_std_bounds=(2.0, -5.0)), obs_space, act_space)


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1"])
def test_sac_update_order_says_which_critic_the_actor_learns_from(env_id):
    """``update_order="simultaneous"`` (brax.training's order): the actor's step uses the critic
    from before this step's critic update, so it is the step ``"sequential"`` takes when the
    critic does not move (learning rate 0) and it does not depend on how far the critic moved;
    ``"sequential"``'s actor does. Continuous and discrete SAC (about 3 CPU-s each). The critic
    takes one large step (Adam's first step moves every parameter by about its learning rate,
    whatever the gradient's size, so only a critic moved far enough flips the sign of some of
    the actor's gradients)."""
    obs_space, act_space = _spaces(env_id)
    obs = jax.random.normal(jax.random.key(1), (8, *obs_space.shape))

    def one_step(order, critic_lr):
        config = SACConfig(hidden_sizes=SMALL, update_order=order, critic_learning_rate=critic_lr)
        agent = make_sac(config, obs_space, act_space)
        state, memory = agent.init(jax.random.key(0), obs)
        action, _, _ = agent.policy(jax.random.key(2), state, obs, memory)
        batch = Batch(obs, action, jnp.arange(8.0), jnp.full(8, 0.9), obs[::-1], jax.random.key(3))
        new, _, _ = jax.jit(agent.update)(batch, state, memory)
        return state, new

    start, frozen = one_step("sequential", 0.0)
    _, sequential = one_step("sequential", 1.0)
    _, simultaneous = one_step("simultaneous", 1.0)
    leaves = jax.tree_util.tree_leaves

    def max_diff(a, b):
        return max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(leaves(a), leaves(b), strict=True))

    assert max_diff(frozen.critic_params, start.critic_params) == 0.0
    assert max_diff(simultaneous.critic_params, start.critic_params) > 0.5  # the critic learned
    for a, b in zip(leaves(simultaneous.actor_params), leaves(frozen.actor_params), strict=True):
        np.testing.assert_array_equal(a, b)
    assert max_diff(sequential.actor_params, frozen.actor_params) > 1e-4  # a sign of Adam's step
    np.testing.assert_array_equal(simultaneous.log_alpha, sequential.log_alpha)
    with pytest.raises(ValueError, match=r"update_order must be one of .*'simultaneous'.*brax.training"):
        make_sac(SACConfig(update_order="brax"), obs_space, act_space)
