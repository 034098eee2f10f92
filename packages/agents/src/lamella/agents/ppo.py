"""Proximal Policy Optimisation (Schulman et al. 2017), feed-forward and recurrent.

``make_ppo_runner(PPOConfig(...))`` builds a :class:`~lamella.agents.runner.Runner`
whose ``step`` collects ``num_steps`` steps from ``num_envs`` auto-resetting envs
and runs ``num_epochs`` epochs of ``num_minibatches`` minibatch updates on them,
all inside one compiled function::

    runner = make_ppo_runner(PPOConfig(env_id="CartPole-v1"))
    train = jax.jit(jax.vmap(make_train(runner)))
    state, metrics = train(jax.random.split(jax.random.key(0), 3))

What it does: truncation-correct GAE (a truncated step bootstraps from the
value of ``info["final_observation"]``, a terminated one from 0), the clipped
surrogate objective, clipped value loss, entropy bonus, per-minibatch advantage
normalisation, global-norm gradient clipping, linear learning-rate annealing,
running observation normalisation (statistics in the train state, so greedy
evaluation uses them) and reward scaling (``NormalizeReward`` on the training
envs). ``recurrent=True`` puts a GRU/LSTM core (reset at episode starts)
between the torso and the heads; its minibatches are whole env sequences.

Hyper-parameters that are not shapes (``learning_rate``, ``gamma``, ``ent_coef``,
...) may be traced, so a sweep is a ``jax.vmap`` over a function that builds
the runner from a config holding them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

import lamella.envs
from lamella.agents import losses
from lamella.agents.distributions import ActionHead, check_action_space
from lamella.agents.networks import (
    MLP,
    MinAtarCNN,
    RecurrentCore,
    activation_by_name,
    orthogonal,
    zero_carry,
)
from lamella.agents.protocol import Agent
from lamella.agents.runner import Runner, evaluate_agent, hashed_keys, hashed_permutation
from lamella.envs import spaces, wrappers

__all__ = [
    "ActorCritic",
    "PPOConfig",
    "PPORunnerState",
    "PPOTrainState",
    "RecurrentActorCritic",
    "Trajectory",
    "make_ppo",
    "make_ppo_runner",
]

_AXIS = "envs"
_SEQUENCE_FIELDS = (
    "obs",
    "raw_action",
    "log_prob",
    "value",
    "value_next",
    "reward",
    "terminated",
    "done",
    "reset",
)


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """PPO's settings. Defaults are for CartPole-v1 (see ``PRESETS["ppo"]`` for tuned ones).

    Attributes:
        env_id: registered environment id.
        total_timesteps: env steps of training over all envs.
        eval_episodes: episodes of each greedy evaluation.
        eval_max_steps: step cap of an evaluation (0: the env's
            ``max_steps_in_episode`` if it has one, else 1000).
        num_envs: parallel envs.
        num_steps: steps per env per rollout.
        num_epochs: passes over each rollout.
        num_minibatches: minibatches per pass.
        learning_rate: Adam step size.
        anneal_lr: decay the step size linearly to 0 over training.
        gamma: discount.
        gae_lambda: GAE lambda.
        clip_eps: PPO ratio clipping (and value clipping) range.
        clip_value: use the clipped value loss.
        vf_coef: weight of the value loss.
        ent_coef: weight of the entropy bonus.
        max_grad_norm: global gradient-norm clip.
        normalize_advantages: standardise advantages per minibatch.
        normalize_observations: running mean/std observation normalisation.
        normalize_rewards: scale rewards by the running std of the discounted return.
        torso: ``"mlp"`` or ``"cnn"`` (MinAtar-sized, for image observations).
        hidden_sizes: widths of the MLP torso (actor and critic each have one).
        activation: activation name (``"tanh"``, ``"relu"``, ...).
        recurrent: put a recurrent core between torso and heads (PPO-memory).
        cell: ``"gru"`` or ``"lstm"``.
        rnn_hidden_size: width of the recurrent carry.
        continuous_action: Box actions ``"tanh"``-squashed or ``"clip"``-ped Gaussian.
        log_std_init: initial log standard deviation for Box actions.
    """

    env_id: str = "CartPole-v1"
    total_timesteps: int = 200_000
    eval_episodes: int = 16
    eval_max_steps: int = 0
    num_envs: int = 16
    num_steps: int = 128
    num_epochs: int = 4
    num_minibatches: int = 4
    learning_rate: float = 2.5e-3
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    clip_value: bool = True
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    max_grad_norm: float = 0.5
    normalize_advantages: bool = True
    normalize_observations: bool = False
    normalize_rewards: bool = False
    torso: str = "mlp"
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    recurrent: bool = False
    cell: str = "gru"
    rnn_hidden_size: int = 64
    continuous_action: str = "tanh"
    log_std_init: float = 0.0

    @property
    def steps_per_iteration(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // self.steps_per_iteration

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first inconsistent setting."""
        positive = ("num_envs", "num_steps", "num_epochs", "num_minibatches", "eval_episodes")
        for name in positive:
            if int(getattr(self, name)) < 1:
                raise ValueError(f"PPOConfig.{name} must be >= 1, got {getattr(self, name)}.")
        if self.num_iterations < 1:
            raise ValueError(
                f"PPOConfig.total_timesteps ({self.total_timesteps}) is less than one iteration "
                f"(num_envs * num_steps = {self.steps_per_iteration}); raise it."
            )
        if self.recurrent:
            if self.num_envs % self.num_minibatches:
                raise ValueError(
                    f"Recurrent PPO splits minibatches over envs: num_envs ({self.num_envs}) must be "
                    f"a multiple of num_minibatches ({self.num_minibatches})."
                )
        elif self.steps_per_iteration % self.num_minibatches:
            raise ValueError(
                f"num_envs * num_steps ({self.steps_per_iteration}) must be a multiple of "
                f"num_minibatches ({self.num_minibatches})."
            )
        if self.torso not in ("mlp", "cnn"):
            raise ValueError(f"PPOConfig.torso must be 'mlp' or 'cnn', got {self.torso!r}.")
        if self.cell not in ("gru", "lstm"):
            raise ValueError(f"PPOConfig.cell must be 'gru' or 'lstm', got {self.cell!r}.")
        activation_by_name(self.activation)


# Networks ------------------------------------------------------------------------------------


def _torso(config: PPOConfig, name: str) -> nn.Module:
    if config.torso == "cnn":
        return MinAtarCNN(name=name)
    return MLP(tuple(config.hidden_sizes), config.activation, name=name)


class ActorCritic(nn.Module):
    """Separate actor and critic torsos; ``__call__(obs) -> (distribution, value)``."""

    config: PPOConfig
    action_space: Any

    def setup(self) -> None:
        self.actor_torso = _torso(self.config, "actor_torso")
        self.critic_torso = _torso(self.config, "critic_torso")
        self.head = ActionHead(self.action_space, self.config.continuous_action, self.config.log_std_init)
        self.critic_out = nn.Dense(1, kernel_init=orthogonal(1.0))

    def __call__(self, obs: jax.Array) -> tuple[Any, jax.Array]:
        return self.head(self.actor_torso(obs)), self.value(obs)

    def value(self, obs: jax.Array) -> jax.Array:
        return self.critic_out(self.critic_torso(obs))[..., 0]


class RecurrentActorCritic(nn.Module):
    """Torso, a recurrent core shared by actor and critic, then one dense layer each.

    ``__call__(carry, (obs, reset)) -> (carry, (distribution, value))`` with a
    leading time axis on ``obs`` and ``reset``.
    """

    config: PPOConfig
    action_space: Any

    @nn.compact
    def __call__(self, carry: Any, inputs: tuple[jax.Array, jax.Array]) -> tuple[Any, tuple[Any, jax.Array]]:
        obs, reset = inputs
        config = self.config
        act = activation_by_name(config.activation)
        if config.torso == "cnn":
            x = MinAtarCNN(name="torso")(obs)
        else:
            x = act(nn.Dense(config.rnn_hidden_size, kernel_init=orthogonal(np.sqrt(2)))(obs))
        carry, x = RecurrentCore(config.cell, config.rnn_hidden_size, name="core")(carry, (x, reset))
        width = config.hidden_sizes[-1] if config.hidden_sizes else config.rnn_hidden_size
        actor = act(nn.Dense(width, kernel_init=orthogonal(np.sqrt(2)))(x))
        dist = ActionHead(self.action_space, config.continuous_action, config.log_std_init)(actor)
        critic = act(nn.Dense(width, kernel_init=orthogonal(np.sqrt(2)))(x))
        value = nn.Dense(1, kernel_init=orthogonal(1.0))(critic)[..., 0]
        return carry, (dist, value)


# State ---------------------------------------------------------------------------------------


class ObsStats(struct.PyTreeNode):
    """Running observation mean/variance (parallel Welford)."""

    mean: jax.Array  # float32, observation shape
    var: jax.Array  # float32, observation shape
    count: jax.Array  # float32 ()

    def normalize(self, obs: jax.Array) -> jax.Array:
        return jnp.clip((obs - self.mean) / jnp.sqrt(self.var + 1e-8), -10.0, 10.0)

    def update(self, batch: jax.Array) -> ObsStats:
        batch = batch.reshape((-1, *self.mean.shape))
        batch_mean, batch_var = batch.mean(0), batch.var(0)
        batch_count = jnp.asarray(batch.shape[0], jnp.float32)
        delta = batch_mean - self.mean
        total = self.count + batch_count
        mean = self.mean + delta * batch_count / total
        m2 = (
            self.var * self.count
            + batch_var * batch_count
            + jnp.square(delta) * self.count * batch_count / total
        )
        return ObsStats(mean, m2 / total, total)


class PPOTrainState(struct.PyTreeNode):
    """What learning changes: ``params`` (network), ``opt_state`` (optax), ``obs_stats``."""

    params: Any
    opt_state: Any
    obs_stats: ObsStats


class Trajectory(struct.PyTreeNode):
    """One rollout, time-major: leading axes ``(num_steps, num_envs)``.

    ``raw_action`` is the distribution's raw sample (see
    :mod:`lamella.agents.distributions`); ``value_next`` the value of the
    observation each step led to (the final one where the episode ended);
    ``reset`` marks the first step of an episode (recurrent cores reset there);
    ``initial_memory`` is the recurrent carry before the first step (``()`` for
    feed-forward); ``key`` drives the minibatch shuffles.
    """

    obs: jax.Array
    raw_action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    value_next: jax.Array
    reward: jax.Array
    terminated: jax.Array
    done: jax.Array
    reset: jax.Array
    initial_memory: Any
    key: jax.Array


class PPORunnerState(struct.PyTreeNode):
    """Everything one PPO run carries between iterations (arrays only)."""

    train_state: PPOTrainState
    env_state: Any
    obs: jax.Array  # (num_envs, *obs_shape): raw observations
    memory: Any  # recurrent carry (num_envs, hidden) or ()
    reset: jax.Array  # bool (num_envs,): the next step starts an episode
    key: jax.Array
    iteration: jax.Array  # int32 ()
    last_return: jax.Array  # float32 (): last reported mean episode return


# Agent ---------------------------------------------------------------------------------------


def _make_ppo_parts(
    config: PPOConfig, observation_space: spaces.Space, action_space: spaces.Space
) -> _PPOParts:
    config.validate()
    check_action_space(action_space, config.continuous_action)
    obs_shape = tuple(observation_space.shape)
    network: Any = (
        RecurrentActorCritic(config, action_space) if config.recurrent else ActorCritic(config, action_space)
    )
    num_updates = config.num_iterations * config.num_epochs * config.num_minibatches
    if config.anneal_lr:
        learning_rate: Any = optax.linear_schedule(config.learning_rate, 0.0, num_updates)
    else:
        learning_rate = config.learning_rate
    # One flat vector for the optimiser: a dozen small leaves cost a dozen copies of every
    # Adam operation, in run time and in compile time.
    optimizer = optax.flatten(
        optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(learning_rate, eps=1e-5))
    )

    def normalize(train_state: PPOTrainState, obs: jax.Array) -> jax.Array:
        if config.normalize_observations:
            return train_state.obs_stats.normalize(obs)
        return obs.astype(jnp.float32)

    def fresh_memory(batch: int) -> Any:
        return zero_carry(config.cell, batch, config.rnn_hidden_size) if config.recurrent else ()

    def apply(params: Any, memory: Any, obs: jax.Array, reset: jax.Array) -> tuple[Any, Any, jax.Array]:
        """One step for a batch: ``(memory, distribution, value)``."""
        if config.recurrent:
            memory, (dist, value) = network.apply(params, memory, (obs[None], reset[None]))
            return memory, jax.tree.map(lambda x: x[0], dist), value[0]
        dist, value = network.apply(params, obs)
        return memory, dist, value

    def init(key: jax.Array, obs_example: jax.Array) -> tuple[PPOTrainState, Any]:
        batch = obs_example.shape[0]
        obs = jnp.zeros((1, *obs_shape), jnp.float32)
        if config.recurrent:
            params = network.init(key, fresh_memory(1), (obs[None], jnp.zeros((1, 1), bool)))
        else:
            params = network.init(key, obs)
        stats = ObsStats(
            jnp.zeros(obs_shape, jnp.float32), jnp.ones(obs_shape, jnp.float32), jnp.asarray(1e-4)
        )
        return PPOTrainState(params, optimizer.init(params), stats), fresh_memory(batch)

    def policy(
        key: jax.Array, train_state: PPOTrainState, obs: jax.Array, memory: Any, eval: bool = False
    ) -> tuple[jax.Array, PPOTrainState, Any]:
        reset = jnp.zeros(obs.shape[:1], bool)
        memory, dist, _ = apply(train_state.params, memory, normalize(train_state, obs), reset)
        raw = dist.mode() if eval else dist.sample(key)
        return dist.to_action(raw), train_state, memory

    def reset_memory(memory: Any, eval: bool = False) -> Any:
        return fresh_memory(config.eval_episodes if eval else config.num_envs)

    def loss_fn(
        params: Any, batch: Trajectory, advantage: jax.Array, target: jax.Array
    ) -> tuple[jax.Array, Any]:
        if config.recurrent:
            _, (dist, value) = network.apply(params, batch.initial_memory, (batch.obs, batch.reset))
        else:
            dist, value = network.apply(params, batch.obs)
        log_prob = dist.log_prob(batch.raw_action)
        if config.normalize_advantages:
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        flat = lambda x: x.reshape(-1)  # noqa: E731
        policy_loss, clip_fraction = losses.ppo_policy_loss(
            flat(log_prob), flat(batch.log_prob), flat(advantage), config.clip_eps
        )
        value_loss = losses.clipped_value_loss(
            flat(value), flat(batch.value), flat(target), config.clip_eps, config.clip_value
        )
        entropy = dist.entropy().mean()
        total = policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy
        # KL(old || new) estimate; exactly 0 before the first update if the update recomputes the
        # rollout's distributions (same observations, same recurrent carries and resets).
        approx_kl = jnp.mean(flat(batch.log_prob) - flat(log_prob))
        return total, (policy_loss, value_loss, entropy, clip_fraction, approx_kl)

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def update(
        trajectory: Trajectory, train_state: PPOTrainState, memory: Any
    ) -> tuple[PPOTrainState, Any, dict[str, jax.Array]]:
        gae = jax.vmap(losses.gae_advantages, in_axes=(1, 1, 1, 1, 1, None, None), out_axes=1)
        advantage, target = gae(
            trajectory.reward,
            trajectory.value,
            trajectory.value_next,
            trajectory.terminated,
            trajectory.done,
            config.gamma,
            config.gae_lambda,
        )
        data = (trajectory.replace(key=jnp.zeros((), jnp.uint32)), advantage, target)
        num_steps, num_envs = trajectory.reward.shape

        def split_minibatches(key: jax.Array) -> Any:
            if config.recurrent:
                # Whole sequences: shuffle envs, keep time; initial memory has envs first.
                order = hashed_permutation(key, num_envs)
                size = num_envs // config.num_minibatches

                def take(x: jax.Array, env_axis: int) -> jax.Array:
                    x = jnp.take(x, order, axis=env_axis)
                    shape = (*x.shape[:env_axis], config.num_minibatches, size, *x.shape[env_axis + 1 :])
                    return jnp.moveaxis(x.reshape(shape), env_axis, 0)

                traj, adv, tgt = data
                moved = traj.replace(
                    **{name: take(getattr(traj, name), 1) for name in _SEQUENCE_FIELDS},
                    initial_memory=jax.tree.map(lambda x: take(x, 0), traj.initial_memory),
                    key=jnp.zeros((config.num_minibatches,), jnp.uint32),
                )
                return moved, take(adv, 1), take(tgt, 1)
            total = num_steps * num_envs
            order = hashed_permutation(key, total)
            size = total // config.num_minibatches

            def shuffle(x: jax.Array) -> jax.Array:
                x = x.reshape((total, *x.shape[2:]))[order]
                return x.reshape((config.num_minibatches, size, *x.shape[1:]))

            traj, adv, tgt = data
            moved = traj.replace(
                **{name: shuffle(getattr(traj, name)) for name in _SEQUENCE_FIELDS},
                initial_memory=(),
                key=jnp.zeros((config.num_minibatches,), jnp.uint32),
            )
            return moved, shuffle(adv), shuffle(tgt)

        def minibatch_step(train_state: PPOTrainState, batch: Any) -> tuple[PPOTrainState, Any]:
            traj, adv, tgt = batch
            (loss, aux), grads = grad_fn(train_state.params, traj, adv, tgt)
            updates, opt_state = optimizer.update(grads, train_state.opt_state, train_state.params)
            params = optax.apply_updates(train_state.params, updates)
            return train_state.replace(params=params, opt_state=opt_state), (loss, *aux)

        def epoch(train_state: PPOTrainState, key: jax.Array) -> tuple[PPOTrainState, Any]:
            return jax.lax.scan(minibatch_step, train_state, split_minibatches(key))

        keys = hashed_keys(trajectory.key, (config.num_epochs,))
        train_state, stats = jax.lax.scan(epoch, train_state, keys)
        loss, policy_loss, value_loss, entropy, clip_fraction, approx_kl = (jnp.mean(s) for s in stats)
        metrics = {
            "loss": loss,
            "policy_loss": policy_loss,
            "value_loss": value_loss,
            "entropy": entropy,
            "clip_fraction": clip_fraction,
            "approx_kl": approx_kl,
            # Minibatch 0 of epoch 0 sees the parameters that collected the rollout.
            "first_minibatch_kl": stats[5][0, 0],
        }
        return train_state, memory, metrics

    agent = Agent(init=init, policy=policy, update=update, reset_memory=reset_memory)
    return _PPOParts(agent, network, apply, normalize)


class _PPOParts(NamedTuple):
    agent: Agent
    network: Any
    apply: Any  # (params, memory, obs, reset) -> (memory, distribution, value)
    normalize: Any  # (train_state, obs) -> network input


def make_ppo(
    config: PPOConfig, observation_space: spaces.Space, action_space: spaces.Space
) -> tuple[Agent, nn.Module]:
    """PPO as an :class:`~lamella.agents.protocol.Agent` (and its network).

    ``agent.update`` takes a :class:`Trajectory` and runs ``num_epochs`` epochs of
    minibatch updates; ``agent.policy`` samples (``eval=True``: the mode).
    """
    parts = _make_ppo_parts(config, observation_space, action_space)
    return parts.agent, parts.network


# Runner --------------------------------------------------------------------------------------


def _eval_max_steps(config: PPOConfig | Any, env_params: Any) -> int:
    if config.eval_max_steps > 0:
        return int(config.eval_max_steps)
    limit = getattr(env_params, "max_steps_in_episode", None)
    return int(limit) if limit is not None else 1000


def make_ppo_runner(config: PPOConfig) -> Runner:
    """A :class:`~lamella.agents.runner.Runner` training PPO on ``config.env_id``."""
    config.validate()
    # Spaces and env params are static facts of the env: evaluate them eagerly even when the
    # runner is built inside a trace (a vmap over hyper-parameters).
    with jax.ensure_compile_time_eval():
        env, env_params = lamella.envs.make(config.env_id)
        observation_space, action_space = env.observation_space(env_params), env.action_space(env_params)
    eval_env = env
    train_env: Any = wrappers.EpisodeStatistics(env)
    if config.normalize_rewards:
        train_env = wrappers.NormalizeReward(train_env, gamma=config.gamma, axis_name=_AXIS)
    parts = _make_ppo_parts(config, observation_space, action_space)
    agent, network, apply, normalize = parts
    num_envs, num_steps = config.num_envs, config.num_steps
    max_eval_steps = _eval_max_steps(config, env_params)

    env_reset = jax.vmap(train_env.reset, in_axes=(0, None), axis_name=_AXIS)
    env_step = jax.vmap(train_env.step, in_axes=(0, 0, 0, None), axis_name=_AXIS)

    def init(key: jax.Array) -> PPORunnerState:
        key, key_net, key_env = jax.random.split(key, 3)
        obs, env_state = env_reset(jax.random.split(key_env, num_envs), env_params)
        train_state, memory = agent.init(key_net, obs)
        return PPORunnerState(
            train_state=train_state,
            env_state=env_state,
            obs=obs,
            memory=memory,
            reset=jnp.ones((num_envs,), bool),
            key=key,
            iteration=jnp.zeros((), jnp.int32),
            last_return=jnp.zeros((), jnp.float32),
        )

    def step(state: PPORunnerState) -> tuple[PPORunnerState, dict[str, jax.Array]]:
        key, key_act, key_env, key_update = hashed_keys(state.key, (4,))
        train_state = state.train_state
        params = train_state.params
        env_keys = hashed_keys(key_env, (num_steps, num_envs))
        act_keys = hashed_keys(key_act, (num_steps,))

        def rollout_step(carry: Any, keys: tuple[jax.Array, jax.Array]) -> tuple[Any, Any]:
            env_state, obs, memory, reset = carry
            key_a, keys_e = keys
            obs_in = normalize(train_state, obs)
            memory_next, dist, value = apply(params, memory, obs_in, reset)
            raw = dist.sample(key_a)
            log_prob = dist.log_prob(raw)
            next_obs, env_state, reward, terminated, truncated, info = env_step(
                keys_e, env_state, dist.to_action(raw), env_params
            )
            done = jnp.logical_or(terminated, truncated)
            final_in = normalize(train_state, info["final_observation"])
            if config.recurrent:
                # The value of the observation this step led to, with the carry this step produced.
                _, _, value_next = apply(params, memory_next, final_in, jnp.zeros_like(done))
            else:
                value_next = jnp.zeros_like(value)  # computed for the whole rollout below
            out = (
                obs_in,
                final_in,
                raw,
                log_prob,
                value,
                value_next,
                reward,
                terminated,
                done,
                reset,
                info["returned_episode"],
                info["returned_episode_returns"],
                obs,
            )
            return (env_state, next_obs, memory_next, done), out

        carry0 = (state.env_state, state.obs, state.memory, state.reset)
        (env_state, obs, memory, reset), out = jax.lax.scan(rollout_step, carry0, (act_keys, env_keys))
        (obs_in, final_in, raw, log_prob, value, value_next, reward, terminated, done, resets) = out[:10]
        ended, ended_returns, raw_obs = out[10:]
        if not config.recurrent:
            value_next = agent_network_value(params, final_in)
        trajectory = Trajectory(
            obs=obs_in,
            raw_action=raw,
            log_prob=log_prob,
            value=value,
            value_next=value_next,
            reward=reward,
            terminated=terminated,
            done=done,
            reset=resets,
            initial_memory=state.memory,
            key=key_update,
        )
        train_state, _, metrics = agent.update(trajectory, train_state, memory)
        if config.normalize_observations:
            train_state = train_state.replace(obs_stats=train_state.obs_stats.update(raw_obs))
        num_ended = ended.sum()
        mean_return = jnp.where(
            num_ended > 0, (ended_returns * ended).sum() / jnp.maximum(num_ended, 1), state.last_return
        )
        metrics = {
            **metrics,
            "episode_return": mean_return.astype(jnp.float32),
            "episodes": num_ended.astype(jnp.float32),
        }
        new_state = PPORunnerState(
            train_state=train_state,
            env_state=env_state,
            obs=obs,
            memory=memory,
            reset=reset,
            key=key,
            iteration=state.iteration + 1,
            last_return=mean_return.astype(jnp.float32),
        )
        return new_state, metrics

    def agent_network_value(params: Any, obs: jax.Array) -> jax.Array:
        return network.apply(params, obs, method=ActorCritic.value)

    def evaluate(state: PPORunnerState, key: jax.Array) -> dict[str, jax.Array]:
        memory = agent.reset_memory(state.memory, eval=True)
        return evaluate_agent(
            agent,
            state.train_state,
            eval_env,
            env_params,
            key,
            config.eval_episodes,
            max_eval_steps,
            memory,
            greedy=True,
        )

    return Runner(
        init=init,
        step=step,
        evaluate=evaluate,
        steps_per_iteration=config.steps_per_iteration,
        num_iterations=config.num_iterations,
    )
