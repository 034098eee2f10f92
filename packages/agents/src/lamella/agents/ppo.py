"""Proximal Policy Optimisation (Schulman et al. 2017), feed-forward and recurrent.

``make_ppo_runner(PPOConfig(...))`` builds a :class:`~lamella.agents.runner.Runner`
whose ``step`` collects ``num_steps`` steps from ``num_envs`` envs and runs
``num_epochs`` epochs of ``num_minibatches`` minibatch updates on them, all inside
one compiled function::

    runner = make_ppo_runner(PPOConfig(env_id="CartPole-v1"))
    runner = make_ppo_runner(config, env=my_env, env_params=my_params)  # any env object
    train = jax.jit(jax.vmap(make_train(runner)))
    state, metrics = train(jax.random.split(jax.random.key(0), 3))

It is assembled from public pieces that other runners reuse: the rollout collector
(:func:`lamella.agents.rollout.make_rollout`), the network as an
:class:`~lamella.agents.actor_critic.ActorCritic` (feed-forward or recurrent: chosen
once, in :func:`make_actor_critic`), :func:`lamella.agents.losses.gae_advantages`, and
the update :func:`lamella.agents.ppo_update.make_ppo_update`.

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
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

import lamella.envs
from lamella.agents import losses
from lamella.agents.actor_critic import (
    TORSOS,
    ActorCritic,
    FeedForwardActorCriticNet,
    RecurrentActorCriticNet,
    feedforward_actor_critic,
    recurrent_actor_critic,
)
from lamella.agents.config import ConfigError, check_config_type, check_single_agent, unused_settings_of
from lamella.agents.devices import DeviceAxis, runner_sharding
from lamella.agents.distributions import check_action_space
from lamella.agents.networks import activation_by_name
from lamella.agents.ppo_update import (
    RECURRENT_UPDATES,
    PPOSettings,
    check_ppo_sizes,
    make_ppo_update_from_config,
    ppo_batch,
)
from lamella.agents.protocol import Agent
from lamella.agents.rollout import (
    ENV_AXIS,
    RolloutState,
    Transition,
    actor_critic_policy,
    make_rollout,
    next_memory,
    recorded_experience,
)
from lamella.agents.runner import Runner, episode_frames, eval_max_steps, evaluate_agent, hashed_keys
from lamella.envs import spaces, wrappers
from lamella.envs.environment import Environment
from lamella.envs.wrappers import RunningMeanStd

__all__ = [
    "PPO",
    "RECURRENT_CORE_SETTINGS",
    "PPOConfig",
    "PPORunnerState",
    "PPOTrainState",
    "Trajectory",
    "make_actor_critic",
    "make_ppo",
    "make_ppo_runner",
]


#: What the recurrent core's settings set (``{field: meaning}``), for the never-read messages of a
#: config without ``recurrent`` (:func:`~lamella.agents.config.unused_settings_of`).
RECURRENT_CORE_SETTINGS = {
    "cell": "is the recurrent core's cell",
    "rnn_hidden_size": "is the width of the recurrent core",
    "post_core_layers": "shapes the layers after the recurrent core",
    "recurrent_update": "is how the update recomputes a recurrent network's rollout",
}


@dataclasses.dataclass(frozen=True)
class PPOConfig(PPOSettings):
    """PPO's settings. Defaults are for CartPole-v1 (see ``PRESETS["ppo"]`` for tuned ones).

    Attributes:
        (the run-size and update settings): see :class:`~lamella.agents.ppo_update.PPOSettings`;
            PPO keeps its defaults.
        normalize_observations: running mean/std observation normalisation.
        normalize_rewards: scale rewards by the running std of the discounted return.
        torso: ``"mlp"``, ``"cnn"`` (MinAtar-sized, for image observations ``(H, W, C)``, sides >= 3;
            another observation is refused) or ``"view_cnn"``
            (:class:`~lamella.agents.networks.ViewCNN`: an image view of ``view_shape`` inside a
            flat observation row, from index ``view_start``, convolved and joined by the row's
            other values; then an MLP of ``hidden_sizes``, or the recurrent core).
        hidden_sizes: widths of the MLP torso (actor and critic each have one).
        activation: activation name (``"tanh"``, ``"relu"``, ...).
        recurrent: put a recurrent core between torso and heads (PPO-memory).
        cell: ``"gru"`` or ``"lstm"``.
        rnn_hidden_size: width of the recurrent carry.
        post_core_layers: a recurrent network's actor and critic each have a dense layer of
            ``hidden_sizes[-1]`` units after the core; ``False``: the heads read the core's
            output (Pax's ``PPO_memory``;
            :class:`~lamella.agents.actor_critic.RecurrentActorCriticNet`).
        recurrent_update: how the recurrent network is updated (:func:`~lamella.agents.ppo_update.make_ppo_update`):
            ``"bptt"`` (the default), minibatches of whole env sequences with gradients through
            time (``num_minibatches`` must divide ``num_envs``); ``"stored_memory"``, minibatches
            of shuffled steps, each recomputed from the memory stored when it acted, no gradient
            through time (Pax's ``PPO_memory``; ``num_minibatches`` must divide ``num_envs *
            num_steps``): cheaper (no scan to differentiate), at the cost of never training the core on what
            its memory should keep for later steps.
        continuous_action: Box actions ``"tanh"``-squashed or ``"clip"``-ped Gaussian.
        log_std_init: initial log standard deviation for Box actions.
        view_shape: ``(H, W, C)`` of the view that ``torso="view_cnn"`` reads.
        view_start: where that view starts in the flat observation row.
        fast_gradient: the dense layers of the ``"mlp"`` torso, of the heads and (recurrent)
            around the core are :class:`~lamella.agents.networks.Dense`: the same parameters and
            values, a faster gradient on the CPU, float sums in another order.
    """

    normalize_observations: bool = False
    normalize_rewards: bool = False
    torso: str = "mlp"
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    recurrent: bool = False
    cell: str = "gru"
    rnn_hidden_size: int = 64
    post_core_layers: bool = True
    recurrent_update: str = "bptt"
    continuous_action: str = "tanh"
    log_std_init: float = 0.0
    view_shape: tuple[int, ...] = ()
    view_start: int = 0
    fast_gradient: bool = False

    def validate(self) -> None:
        """Raise :class:`~lamella.agents.config.ConfigError` (a ``ValueError``) naming the first
        inconsistent setting."""
        if self.recurrent_update not in RECURRENT_UPDATES:
            raise ValueError(
                f"PPOConfig.recurrent_update must be one of {RECURRENT_UPDATES}, got {self.recurrent_update!r}."
            )
        check_ppo_sizes(self, recurrent=self.sequence_minibatches)
        if self.torso not in TORSOS:
            raise ValueError(f"PPOConfig.torso must be one of {TORSOS}, got {self.torso!r}.")
        if self.torso == "view_cnn" and (
            len(self.view_shape) != 3 or min(self.view_shape) < 1 or self.view_start < 0
        ):
            raise ValueError(
                f"PPOConfig: torso='view_cnn' needs view_shape=(H, W, C) (each >= 1) and view_start >= 0, "
                f"the view's place in the flat observation row; got view_shape={tuple(self.view_shape)}, "
                f"view_start={self.view_start}."
            )
        if self.cell not in ("gru", "lstm"):
            raise ValueError(f"PPOConfig.cell must be 'gru' or 'lstm', got {self.cell!r}.")
        activation_by_name(self.activation)

    def unused_settings(self) -> dict[str, str]:
        """``{field: why it is never read}``: the recurrent core's ``cell``, ``rnn_hidden_size``
        and ``post_core_layers`` when ``recurrent=False``, and ``view_shape`` and ``view_start``
        when ``torso`` is not ``"view_cnn"``. ``lamella train`` refuses such a field set on the
        command line (:func:`~lamella.agents.config.check_unused_settings`)."""
        unused: dict[str, str] = {}
        if not self.recurrent:
            unused |= unused_settings_of(
                self,
                RECURRENT_CORE_SETTINGS,
                "recurrent=False builds a feed-forward network",
                "set recurrent=True",
            )
        if self.torso != "view_cnn":
            view = "places the image view that torso='view_cnn' reads"
            unused |= unused_settings_of(
                self,
                {"view_shape": view, "view_start": view},
                f"torso={self.torso!r} does not read a view",
                "set torso='view_cnn'",
            )
        return unused

    @property
    def sequence_minibatches(self) -> bool:
        """The update's minibatches are whole env sequences (a recurrent network updated with
        BPTT), so ``num_minibatches`` splits envs, not steps."""
        return self.recurrent and self.recurrent_update == "bptt"


# Networks ------------------------------------------------------------------------------------


def make_actor_critic(config: PPOConfig, action_space: spaces.Space) -> ActorCritic:
    """PPO's network as an :class:`~lamella.agents.actor_critic.ActorCritic`: the one place
    where ``config.recurrent`` matters (the rest of PPO only sees the protocol)."""
    common: dict[str, Any] = {
        "torso": config.torso,
        "hidden_sizes": tuple(config.hidden_sizes),
        "activation": config.activation,
        "continuous_action": config.continuous_action,
        "log_std_init": config.log_std_init,
        "view_shape": tuple(config.view_shape),
        "view_start": config.view_start,
        "fast_gradient": config.fast_gradient,
    }
    if config.recurrent:
        network = RecurrentActorCriticNet(
            action_space,
            cell=config.cell,
            rnn_hidden_size=config.rnn_hidden_size,
            post_core_layers=config.post_core_layers,
            **common,
        )
        return recurrent_actor_critic(network, network.initial_memory)
    return feedforward_actor_critic(FeedForwardActorCriticNet(action_space, **common))


# State ---------------------------------------------------------------------------------------


class PPOTrainState(struct.PyTreeNode):
    """What learning changes: ``params`` (network), ``opt_state`` (optax), ``obs_stats``
    (running observation statistics, :class:`lamella.envs.wrappers.RunningMeanStd`)."""

    params: Any
    opt_state: Any
    obs_stats: RunningMeanStd


class Trajectory(struct.PyTreeNode):
    """What PPO's ``agent.update`` takes: a collector's time-major ``transitions``
    (:class:`~lamella.agents.rollout.Transition`, leading axes ``(num_steps, num_envs)``), the
    memory after the last step (``()`` for feed-forward), and the key of the minibatch shuffles."""

    transitions: Transition
    last_memory: Any
    key: jax.Array


class PPORunnerState(struct.PyTreeNode):
    """Everything one PPO run carries between iterations (arrays only).

    The layout (field names and order) is that of lamella-agents 0.1.0, so its checkpoints load.
    """

    train_state: PPOTrainState
    env_state: Any
    obs: jax.Array  # (num_envs, *obs_shape): raw observations
    memory: Any  # recurrent carry (num_envs, hidden) or ()
    reset: jax.Array  # bool (num_envs,): the next step starts an episode
    key: jax.Array
    iteration: jax.Array  # int32 ()
    last_return: jax.Array  # float32 (): last reported mean episode return


# Agent ---------------------------------------------------------------------------------------


class PPO(NamedTuple):
    """PPO's pieces, all public: the :class:`~lamella.agents.protocol.Agent`, the network's
    :class:`~lamella.agents.actor_critic.ActorCritic`, and ``normalize(train_state, obs)``
    (the network input for raw observations).

    ``agent.policy`` samples (``eval=True``: the mode); ``agent.update`` takes a
    :class:`Trajectory` and runs ``num_epochs`` epochs of ``num_minibatches`` minibatch updates
    (GAE with :func:`~lamella.agents.losses.gae_advantages`, then
    :func:`~lamella.agents.ppo_update.make_ppo_update`'s update), then folds the rollout's
    observations into ``obs_stats`` when ``normalize_observations``.
    """

    agent: Agent
    actor_critic: ActorCritic
    normalize: Callable[[PPOTrainState, Any], jax.Array]


def make_ppo(
    config: PPOConfig,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    devices: DeviceAxis | None = None,
) -> PPO:
    """PPO for these spaces: ``agent, actor_critic, normalize = make_ppo(config, obs_space, act_space)``.

    ``devices``: the mesh axis when the envs are split over devices; ``agent.update`` then
    takes this device's block of envs and reduces over the devices (gradients, advantage and
    observation statistics), giving every device the one-device update of the whole batch.
    """
    config.validate()
    devices = devices or DeviceAxis()
    check_action_space(action_space, config.continuous_action)
    obs_shape = tuple(observation_space.shape)
    if config.torso == "view_cnn" and (
        len(obs_shape) != 1 or config.view_start + int(np.prod(config.view_shape)) > obs_shape[0]
    ):
        raise ConfigError(
            f"PPOConfig: torso='view_cnn' reads a view of {tuple(config.view_shape)} from index "
            f"{config.view_start} of a flat observation row; this observation has shape {obs_shape}. "
            "Set view_shape and view_start to where the view is, or use torso='mlp'."
        )
    if config.torso == "cnn" and (len(obs_shape) != 3 or min(obs_shape[:2]) < 3):
        raise ConfigError(
            f"PPOConfig: torso='cnn' convolves an image (height, width, channels), each side >= 3 (a "
            f"3x3 convolution without padding); this observation has shape {obs_shape}. Use "
            "torso='mlp' for a flat observation, or torso='view_cnn' for an image inside a flat row."
        )
    actor_critic = make_actor_critic(config, action_space)
    optimizer, ppo_update = make_ppo_update_from_config(actor_critic, config, devices)

    def normalize(train_state: PPOTrainState, obs: Any) -> jax.Array:
        if config.normalize_observations:
            return train_state.obs_stats.normalize(obs)
        return jnp.asarray(obs).astype(jnp.float32)

    def init(key: jax.Array, obs_example: jax.Array) -> tuple[PPOTrainState, Any]:
        params = actor_critic.init(key, jnp.zeros((1, *obs_shape), jnp.float32))
        stats = RunningMeanStd.zeros(obs_shape)
        return PPOTrainState(params, optimizer.init(params), stats), actor_critic.initial_memory(
            obs_example.shape[0]
        )

    def policy(
        key: jax.Array, train_state: PPOTrainState, obs: jax.Array, memory: Any, eval: bool = False
    ) -> tuple[jax.Array, PPOTrainState, Any]:
        reset = jnp.zeros(obs.shape[:1], bool)
        memory, dist, _ = actor_critic.step(train_state.params, memory, normalize(train_state, obs), reset)
        raw = dist.mode() if eval else dist.sample(key)
        return dist.to_action(raw), train_state, memory

    def reset_memory(memory: Any, eval: bool = False) -> Any:
        # Training memory is this device's block of envs (all of them on one device).
        return actor_critic.initial_memory(config.eval_episodes if eval else config.num_envs // devices.size)

    def update(
        trajectory: Trajectory, train_state: PPOTrainState, memory: Any
    ) -> tuple[PPOTrainState, Any, dict[str, jax.Array]]:
        transitions = trajectory.transitions
        params = train_state.params
        final_in = normalize(train_state, transitions.final_obs)
        # Values of the observations each step led to, continuing each step's memory.
        num_steps, num_envs = transitions.reward.shape[:2]
        flat = lambda x: x.reshape((num_steps * num_envs, *x.shape[2:]))  # noqa: E731
        after = jax.tree.map(flat, next_memory(transitions, trajectory.last_memory))
        value_next = actor_critic.value(params, after, flat(final_in)).reshape(transitions.value.shape)
        advantage, target = losses.gae_advantages(
            transitions.reward,
            transitions.value,
            value_next,
            transitions.terminated,
            transitions.done,
            config.gamma,
            config.gae_lambda,
        )
        batch = ppo_batch(
            transitions,
            advantage,
            target,
            obs=normalize(train_state, transitions.obs),
            stored_memory=config.recurrent and config.recurrent_update == "stored_memory",
        )
        params, opt_state, metrics = ppo_update(params, train_state.opt_state, batch, trajectory.key)
        obs_stats = train_state.obs_stats
        if config.normalize_observations:
            # Pooled over devices: the whole batch's moments from equal blocks.
            obs_stats = devices.update_stats(obs_stats, transitions.obs)
        return PPOTrainState(params, opt_state, obs_stats), memory, metrics

    agent = Agent(init=init, policy=policy, update=update, reset_memory=reset_memory)
    return PPO(agent, actor_critic, normalize)


# Runner --------------------------------------------------------------------------------------


def make_ppo_runner(
    config: PPOConfig, env: Environment[Any, Any] | None = None, env_params: Any = None
) -> Runner:
    """A :class:`~lamella.agents.runner.Runner` training PPO.

    Args:
        config: PPO's settings.
        env: the environment object to train on (any lamella env: auto-resetting or bare,
            wrapped, user-written). ``None``: ``lamella.envs.make(config.env_id)``.
        env_params: its params (default: ``env.default_params``).

    The runner splits its envs over devices (``Runner.sharding``, the driver's
    ``num_devices``): each device steps ``num_envs / num_devices`` envs and computes the update
    of an equal share of every minibatch (:func:`~lamella.agents.ppo_update.make_ppo_update`).
    The envs axis is the one to split: it is PPO's only batch axis that every part of an
    iteration is parallel over (the rollout steps envs independently, GAE runs per env), where
    the time axis is a sequential scan and the minibatches are sequential optimiser steps.
    """
    check_config_type(config, PPOConfig, "make_ppo_runner", algorithm="ppo")
    return _ppo_runner(config, env, env_params, DeviceAxis())


def _ppo_state_axes(state: PPORunnerState) -> Any:
    """The envs axis of each leaf of a PPO state (``None``: replicated on every device): a
    prefix tree of the state."""
    axes: dict[str, Any] = {
        "train_state": None,
        "env_state": 0,
        "obs": 0,
        "memory": 0,
        "reset": 0,
        "key": None,
        "iteration": None,
        "last_return": None,
    }
    return PPORunnerState(**axes)


def _ppo_runner(
    config: PPOConfig, env: Environment[Any, Any] | None, env_params: Any, devices: DeviceAxis
) -> Runner:
    """PPO's runner for one device's block of ``config.num_envs`` (all of them on one device)."""
    config.validate()
    check_ppo_sizes(config, recurrent=config.sequence_minibatches, num_devices=devices.size)
    given_env, given_params = env, env_params
    if env is not None:
        lamella.envs.check_env_object(env, env_params, "make_ppo_runner")
    # Spaces and env params are static facts of the env: evaluate them eagerly even when the
    # runner is built inside a trace (a vmap over hyper-parameters).
    with jax.ensure_compile_time_eval():
        if env is None:
            env, made_params = lamella.envs.make(config.env_id)
            env_params = made_params if env_params is None else env_params
        elif env_params is None:
            env_params = env.default_params
        check_single_agent(env, "ppo", config.env_id if given_env is None else None, "ippo or mappo")
        observation_space, action_space = env.observation_space(env_params), env.action_space(env_params)
    eval_env = env
    train_env: Any = wrappers.EpisodeStatistics(env)
    if config.normalize_rewards:
        train_env = wrappers.NormalizeReward(
            train_env, gamma=config.gamma, axis_name=devices.axis_names(ENV_AXIS)
        )
    agent, actor_critic, normalize = make_ppo(config, observation_space, action_space, devices)
    rollout = make_rollout(
        train_env,
        config.num_steps,
        config.num_envs,
        info_keys=("returned_episode", "returned_episode_returns"),
        axis_name=ENV_AXIS,
        devices=devices,
    )
    max_eval_steps = eval_max_steps(config, env_params)

    def init(key: jax.Array) -> PPORunnerState:
        key, key_net, key_env = jax.random.split(key, 3)
        start = rollout.init(key_env, env_params)
        train_state, memory = agent.init(key_net, start.obs)
        return PPORunnerState(
            train_state=train_state,
            env_state=start.env_state,
            obs=start.obs,
            memory=memory,
            reset=start.reset,
            key=key,
            iteration=jnp.zeros((), jnp.int32),
            last_return=jnp.zeros((), jnp.float32),
        )

    def record_step(state: PPORunnerState) -> tuple[PPORunnerState, dict[str, jax.Array], Any]:
        key, key_rollout, key_update = hashed_keys(state.key, (3,))
        train_state = state.train_state
        policy = actor_critic_policy(
            actor_critic,
            train_state.params,
            preprocess=lambda obs: normalize(train_state, obs),
            devices=devices,
        )
        start = RolloutState(state.env_state, state.obs, state.memory, state.reset)
        end, transitions = rollout.collect(start, policy, key_rollout, env_params)
        train_state, _, metrics = agent.update(
            Trajectory(transitions, end.memory, key_update), train_state, end.memory
        )
        ended = transitions.info["returned_episode"]
        ended_returns = transitions.info["returned_episode_returns"]
        num_ended, sum_returns = devices.sum((ended.sum(), (ended_returns * ended).sum()))
        mean_return = jnp.where(num_ended > 0, sum_returns / jnp.maximum(num_ended, 1), state.last_return)
        metrics = {
            **metrics,
            "episode_return": mean_return.astype(jnp.float32),
            "episodes": num_ended.astype(jnp.float32),
        }
        new_state = PPORunnerState(
            train_state=train_state,
            env_state=end.env_state,
            obs=end.obs,
            memory=end.memory,
            reset=end.reset,
            key=key,
            iteration=state.iteration + 1,
            last_return=mean_return.astype(jnp.float32),
        )
        return new_state, metrics, recorded_experience(transitions)

    def step(state: PPORunnerState) -> tuple[PPORunnerState, dict[str, jax.Array]]:
        new_state, metrics, _ = record_step(state)  # the unused experience costs nothing compiled
        return new_state, metrics

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
        record_step=record_step,
        # One greedy episode drawn with the env's render (lamella train --gif, lamella eval report).
        render_episode=lambda state, key: episode_frames(
            agent,
            state.train_state,
            eval_env,
            env_params,
            key,
            max_eval_steps,
            jax.tree.map(lambda x: x[:1], agent.reset_memory(state.memory, eval=True)),
        ),
        sharding=runner_sharding(
            devices,
            "num_envs",
            config.num_envs,
            lambda axis: _ppo_runner(config, given_env, given_params, axis),
            _ppo_state_axes,
        ),
    )
