"""IPPO and MAPPO (feed-forward or recurrent, discrete or continuous actions), assembled from
lamella-agents' PPO pieces.

``make_ippo_runner(IPPOConfig(...))``, ``make_mappo_runner(MAPPOConfig(...))`` and their
recurrent twins ``make_rec_ippo_runner(RecIPPOConfig(...))`` and
``make_rec_mappo_runner(RecMAPPOConfig(...))`` (Mava's ``rec_ippo`` / ``rec_mappo``) build a
:class:`~lamella.agents.runner.Runner` that the training driver runs like PPO's::

    runner = make_ippo_runner(IPPOConfig(env_id="Foraging-8x8-2p-2f-coop-v3"))
    state, metrics = jax.jit(jax.vmap(make_train(runner)))(jax.random.split(jax.random.key(0), 3))

Nothing of PPO is copied here. The pieces and what the agent axis does in each:

* the env is wrapped in :class:`~lamella.marl.observation.MultiAgentObservation` (dict
  observations holding the action mask and, for MAPPO, the global state) inside ``AutoReset``;
* :func:`lamella.agents.make_rollout` collects ``(num_steps, num_envs, n, ...)`` batches;
* :class:`~lamella.marl.networks.MultiAgentActorCriticNet` behind
  :func:`lamella.agents.feedforward_actor_critic` (or
  :class:`~lamella.marl.networks.MultiAgentRecurrentActorCriticNet` behind
  :func:`lamella.agents.recurrent_actor_critic`, memory ``(batch, n, H)`` per agent) gives
  per-agent log-probs and values ``(..., n)``;
* :func:`lamella.agents.losses.gae_advantages` runs over ``(T, num_envs, n)``: each agent of
  each env is its own stream, truncation-correct (a truncated step bootstraps from the value of
  the final observation, hence the final global state, a terminated one from 0);
* :func:`lamella.agents.make_ppo_update` shuffles env steps (all agents of a step stay
  together; recurrent: whole env sequences, from the memory the rollout started with) into
  minibatches; :func:`lamella.agents.losses.ppo_loss` takes one ratio per agent;
* with ``normalize_values`` the critic predicts values in units of a running mean and standard
  deviation of the value targets (:mod:`lamella.marl.value_norm`).

IPPO and MAPPO differ only in the critic's input (``centralised_critic``), feed-forward and
recurrent only in the network (``recurrent``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

import lamella.envs
from lamella.agents import losses
from lamella.agents.actor_critic import ActorCritic, feedforward_actor_critic, recurrent_actor_critic
from lamella.agents.config import ConfigError, check_config_type
from lamella.agents.devices import DeviceAxis, runner_sharding
from lamella.agents.networks import activation_by_name
from lamella.agents.ppo_update import PPOSettings, check_ppo_sizes, make_ppo_update_from_config, ppo_batch
from lamella.agents.protocol import Agent
from lamella.agents.rollout import RolloutState, Transition, actor_critic_policy, make_rollout, next_memory
from lamella.agents.runner import Runner, episode_frames, evaluate_agent, hashed_keys, step_limit
from lamella.envs import wrappers
from lamella.envs.environment import Environment
from lamella.envs.wrappers import RunningMeanStd
from lamella.marl import value_norm
from lamella.marl.networks import MultiAgentActorCriticNet, MultiAgentRecurrentActorCriticNet
from lamella.marl.observation import (
    MultiAgentObservation,
    action_bounds_of,
    check_multi_agent_env,
    num_actions_of,
)
from lamella.marl.recording import recorded_experience

__all__ = [
    "METRIC_AXES",
    "IPPOConfig",
    "MAPPOConfig",
    "MultiAgentPPO",
    "MultiAgentPPORunnerState",
    "MultiAgentTrainState",
    "RecIPPOConfig",
    "RecMAPPOConfig",
    "Trajectory",
    "make_ippo_runner",
    "make_mappo_runner",
    "make_multi_agent_actor_critic",
    "make_multi_agent_ppo",
    "make_multi_agent_ppo_runner",
    "make_rec_ippo_runner",
    "make_rec_mappo_runner",
]


@dataclasses.dataclass(frozen=True)
class IPPOConfig(PPOSettings):
    """IPPO's settings; the defaults are Mava's ``ff_ippo`` (``configs/system/ppo``, ``arch/anakin``,
    ``network/mlp``).

    Attributes:
        env_id: a registered multi-agent env id (discrete actions, or continuous ones such as
            ``MPE-simple_spread-v3`` made with ``continuous_actions=True``).
        total_timesteps: env steps of training over all envs (Mava: 1000 updates x 128 steps x
            2 x 16 envs = 4,096,000).
        eval_episodes: episodes of each greedy evaluation (Mava: 32).
        eval_max_steps: step cap of an evaluation (0: the env's ``max_steps_in_episode``, else 1000).
        eval_greedy: evaluate the most likely actions; the default samples the policy, as
            Mava's benchmark runs do (``arch.evaluation_greedy=False``): in LBF two greedy agents
            can block each other for the rest of an episode.
        num_envs: parallel envs.
        num_steps: steps per env per rollout.
        num_epochs: passes over each rollout.
        num_minibatches: minibatches per pass (of ``num_envs * num_steps`` env steps, all agents
            of a step together).
        learning_rate: Adam step size (Mava's actor and critic rates are both 2.5e-4).
        anneal_lr: decay the step size linearly to 0 over training (Mava: off).
        gamma: discount.
        gae_lambda: GAE lambda.
        clip_eps: PPO ratio (and value) clipping range.
        clip_value: use the clipped value loss.
        vf_coef: weight of the value loss.
        ent_coef: weight of the entropy bonus.
        max_grad_norm: global gradient-norm clip.
        normalize_advantages: standardise advantages per minibatch.
        hidden_sizes: widths of the actor's and the critic's MLP torsos.
        activation: activation name.
        share_parameters: one network for all agents (else one per agent).
        agent_id: append a one-hot agent id to each agent's inputs.
        team_reward: train every agent on the sum of the agents' rewards (Mava's default for LBF)
            instead of its own reward.
        normalize_values: the critic predicts ``(value - mean) / std`` of a running mean and
            standard deviation of the value targets (:mod:`lamella.marl.value_norm`; off in Mava).
        continuous_action: continuous actions ``"tanh"``-squashed into the action bounds or
            ``"clip"``-ped to them (ignored for discrete actions).
        log_std_init: initial log standard deviation of continuous actions.
        env_kwargs: keyword overrides of ``lamella.envs.make(env_id, ...)`` as ``"name=value"``
            strings (values ``true``/``false``, integers, floats, else strings), e.g.
            ``("continuous_actions=true",)`` for MPE's continuous actions (on the command line
            ``env_kwargs=continuous_actions=true``). Not used when an env object is given.
        eval_info: names of the env's per-env ``info`` entries to log from each evaluation
            episode's last step, one number per episode under the entry's name (see
            :func:`~lamella.agents.runner.evaluate_agent`'s ``final_info``): ``("won",)`` on
            SMAX logs ``won``, whose mean over the episodes is the win rate.
    """

    env_id: str = "Foraging-8x8-2p-2f-coop-v3"
    total_timesteps: int = 4_096_000
    eval_episodes: int = 32
    eval_greedy: bool = False
    num_minibatches: int = 2
    learning_rate: float = 2.5e-4
    anneal_lr: bool = False
    hidden_sizes: tuple[int, ...] = (128, 128)
    activation: str = "relu"
    share_parameters: bool = True
    agent_id: bool = True
    team_reward: bool = True
    normalize_values: bool = False
    continuous_action: str = "tanh"
    log_std_init: float = 0.0
    env_kwargs: tuple[str, ...] = ()
    eval_info: tuple[str, ...] = ()

    #: The critic reads the env's global state (MAPPO) rather than each agent's observation.
    centralised_critic = False
    #: A recurrent network (``RecIPPOConfig``, ``RecMAPPOConfig``).
    recurrent = False
    #: The algorithm's name in messages.
    algorithm = "ippo"

    def validate(self) -> None:
        """Raise :class:`~lamella.agents.config.ConfigError` naming the first inconsistent setting."""
        check_ppo_sizes(self, recurrent=self.recurrent)
        try:
            activation_by_name(self.activation)
        except (KeyError, ValueError) as error:
            raise ConfigError(str(error)) from None
        env_keyword_arguments(self)
        clash = sorted(set(self.eval_info) & {"episode_return", "episode_length", "return"})
        if clash:
            raise ConfigError(
                f"{type(self).__name__}.eval_info names {clash}, which the evaluation logs already; "
                "name env info entries such as 'won'."
            )
        if self.continuous_action not in ("tanh", "clip"):
            raise ConfigError(
                f"{type(self).__name__}.continuous_action must be 'tanh' or 'clip', got {self.continuous_action!r}."
            )


@dataclasses.dataclass(frozen=True)
class MAPPOConfig(IPPOConfig):
    """MAPPO's settings: IPPO's (Mava's ``ff_mappo`` defaults are the same), with a centralised
    critic on ``env.global_state(state, params)`` (plus the agent's id with ``agent_id``)."""

    centralised_critic = True
    algorithm = "mappo"


@dataclasses.dataclass(frozen=True)
class RecIPPOConfig(IPPOConfig):
    """Recurrent IPPO's settings (Mava's ``rec_ippo``): IPPO's fields and defaults (the same RL
    hyper-parameters in Mava), with Mava's ``network/rnn`` network: per actor and critic a
    pre-torso MLP (``hidden_sizes``, [128]), a GRU of 128 units, a post-torso MLP
    (``post_torso_sizes``, [128]), ReLU. Minibatches split envs (whole 128-step sequences, Mava's
    ``recurrent_chunk_size: ~``), so ``num_minibatches`` must divide ``num_envs``.

    Attributes:
        hidden_sizes: widths of the MLP before the recurrent core.
        post_torso_sizes: widths of the MLP after it.
        rnn_hidden_size: width of each agent's carry.
        cell: ``"gru"`` (Mava's) or ``"lstm"``.
    """

    hidden_sizes: tuple[int, ...] = (128,)
    post_torso_sizes: tuple[int, ...] = (128,)
    rnn_hidden_size: int = 128
    cell: str = "gru"

    recurrent = True
    algorithm = "rec_ippo"

    def validate(self) -> None:
        super().validate()
        if self.cell not in ("gru", "lstm"):
            raise ConfigError(f"{type(self).__name__}.cell must be 'gru' or 'lstm', got {self.cell!r}.")
        if int(self.rnn_hidden_size) < 1:
            raise ConfigError(
                f"{type(self).__name__}.rnn_hidden_size must be >= 1, got {self.rnn_hidden_size}."
            )


@dataclasses.dataclass(frozen=True)
class RecMAPPOConfig(RecIPPOConfig):
    """Recurrent MAPPO's settings (Mava's ``rec_mappo``): :class:`RecIPPOConfig`'s, with a
    centralised recurrent critic on ``env.global_state(state, params)``."""

    centralised_critic = True
    algorithm = "rec_mappo"


def env_keyword_arguments(config: IPPOConfig) -> dict[str, Any]:
    """``config.env_kwargs`` as keyword arguments of ``lamella.envs.make``; a malformed entry is a
    :class:`~lamella.agents.config.ConfigError`."""
    out: dict[str, Any] = {}
    for item in config.env_kwargs:
        name, sep, text = str(item).partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise ConfigError(
                f"{type(config).__name__}.env_kwargs entry {item!r} is not of the form name=value "
                "(for example continuous_actions=true)."
            )
        if name in out:
            raise ConfigError(f"{type(config).__name__}.env_kwargs gives {name!r} twice.")
        text = text.strip()
        value: Any = text
        if text.lower() in ("true", "false"):
            value = text.lower() == "true"
        else:
            for kind in (int, float):
                try:
                    value = kind(text)
                    break
                except ValueError:
                    continue
        out[name] = value
    return out


def bare_multi_agent_env(
    config: Any, env: Environment[Any, Any] | None, env_params: Any
) -> tuple[Environment[Any, Any], Any, str | None]:
    """``(env, env_params, env_id)``: the env given (its ``AutoReset`` taken off) or ``config.env_id``
    made without auto-reset with ``config.env_kwargs``; an unknown id or a keyword the env refuses
    is a :class:`~lamella.agents.config.ConfigError`. ``env_id`` is ``None`` for an env given."""
    env_id = None
    if env is None:
        env_id = config.env_id
        try:
            env, made_params = lamella.envs.make(
                config.env_id, autoreset=False, **env_keyword_arguments(config)
            )
        except KeyError as error:
            raise ConfigError(str(error.args[0]) if error.args else str(error)) from None
        except (TypeError, ValueError) as error:
            # make's TypeError names the keywords the env does not take and lists those it takes
            # (its params fields and constructor arguments); a bad value (ValueError) is fixed.
            hint = (
                f" Correct or remove that env_kwargs entry: {config.env_id} takes only the keywords listed."
                if config.env_kwargs and isinstance(error, TypeError)
                else ""
            )
            raise ConfigError(
                f"{type(config).__name__}.env_kwargs {list(config.env_kwargs)} for {config.env_id}: "
                f"{error}{hint}"
            ) from None
        env_params = made_params if env_params is None else env_params
    else:
        lamella.envs.check_env_object(
            env,
            env_params,
            f"make_{config.algorithm}_runner",
            "lamella.marl.host.train_host(config, make_env)",
        )
        if env_params is None:
            env_params = env.default_params
    if isinstance(env, wrappers.AutoReset):
        env = env.env
    return env, env_params, env_id


#: The named axes of the runners' per-agent metrics (``Runner.metric_axes``).
METRIC_AXES: tuple[tuple[str, tuple[str, ...]], ...] = (("return", ("agent",)), ("reward", ("agent",)))


class MultiAgentTrainState(struct.PyTreeNode):
    """What learning changes: the network's ``params``, the optimiser's ``opt_state`` and the
    running statistics of the value targets ``value_stats`` (scalar; used only with
    ``normalize_values``)."""

    params: Any
    opt_state: Any
    value_stats: RunningMeanStd


class Trajectory(struct.PyTreeNode):
    """What ``agent.update`` takes: the collector's ``transitions`` (leading axes ``(num_steps,
    num_envs)``, then the agent axis), the key of the minibatch shuffles, and the network's
    memory after the last step (``()`` for a feed-forward network)."""

    transitions: Transition
    key: jax.Array
    last_memory: Any = ()


class MultiAgentPPORunnerState(struct.PyTreeNode):
    """Everything one run carries between iterations (arrays only)."""

    train_state: MultiAgentTrainState
    env_state: Any
    obs: Any  # dict observation, leading axis num_envs
    memory: Any  # recurrent: (actor carry, critic carry), leaves (num_envs, n, H); else ()
    reset: jax.Array  # bool (num_envs,)
    key: jax.Array
    iteration: jax.Array  # int32 ()
    last_return: jax.Array  # float32 (): last team return reported
    last_agent_return: jax.Array  # float32 (n,): last per-agent returns reported


class MultiAgentPPO(NamedTuple):
    """The pieces of IPPO/MAPPO: the :class:`~lamella.agents.protocol.Agent` (``policy`` on a
    batch of dict observations, ``update`` on a :class:`Trajectory`) and its
    :class:`~lamella.agents.actor_critic.ActorCritic`."""

    agent: Agent
    actor_critic: ActorCritic


def make_multi_agent_actor_critic(
    config: IPPOConfig,
    num_agents: int,
    num_actions: int,
    action_bounds: tuple[tuple[float, ...], tuple[float, ...]] = ((), ()),
) -> ActorCritic:
    """The network of ``config`` as an :class:`~lamella.agents.actor_critic.ActorCritic`: the one
    place where ``config.recurrent`` matters (rollout, GAE and update only see the protocol).

    Args:
        config: an :class:`IPPOConfig` (or any of its subclasses).
        num_agents: ``n``.
        num_actions: discrete actions per agent (ignored for continuous actions).
        action_bounds: ``(low, high)`` of each agent's continuous action, one float per
            dimension (:func:`~lamella.marl.observation.action_bounds_of`); empty: discrete.
    """
    low, high = (tuple(float(v) for v in bound) for bound in action_bounds)
    common: dict[str, Any] = {
        "num_agents": num_agents,
        "num_actions": num_actions,
        "activation": config.activation,
        "share_parameters": config.share_parameters,
        "agent_id": config.agent_id,
        "centralised_critic": config.centralised_critic,
        "action_low": low,
        "action_high": high,
        "squash": config.continuous_action,
        "log_std_init": config.log_std_init,
    }
    if config.recurrent:
        assert isinstance(config, RecIPPOConfig)
        network = MultiAgentRecurrentActorCriticNet(
            pre_torso_sizes=tuple(config.hidden_sizes),
            post_torso_sizes=tuple(config.post_torso_sizes),
            cell=config.cell,
            rnn_hidden_size=config.rnn_hidden_size,
            **common,
        )
        return recurrent_actor_critic(network, network.initial_memory)
    return feedforward_actor_critic(
        MultiAgentActorCriticNet(hidden_sizes=tuple(config.hidden_sizes), **common)
    )


def make_multi_agent_ppo(
    config: IPPOConfig,
    num_agents: int,
    num_actions: int,
    action_bounds: tuple[tuple[float, ...], tuple[float, ...]] = ((), ()),
    devices: DeviceAxis | None = None,
) -> MultiAgentPPO:
    """IPPO (or MAPPO, by ``config.centralised_critic``; recurrent by ``config.recurrent``) for
    ``num_agents`` agents with ``num_actions`` discrete actions each, or continuous actions in
    ``action_bounds`` (see :func:`make_multi_agent_actor_critic`).

    The agent's memory is the network's (``()`` feed-forward); ``policy`` continues it (a new
    episode starts from ``agent.reset_memory``).

    ``devices``: the mesh axis when the envs are split over devices
    (:class:`~lamella.agents.devices.DeviceAxis`): ``update`` takes this device's block of envs
    and reduces over the devices (gradients and advantage statistics in
    :func:`~lamella.agents.ppo_update.make_ppo_update`, the value-target statistics here).
    """
    config.validate()
    devices = devices or DeviceAxis()
    actor_critic = make_multi_agent_actor_critic(config, num_agents, num_actions, action_bounds)
    optimizer, ppo_update = make_ppo_update_from_config(actor_critic, config, devices)

    def init(key: jax.Array, obs_example: Any) -> tuple[MultiAgentTrainState, Any]:
        params = actor_critic.init(key, obs_example)
        batch = int(jax.tree.leaves(obs_example)[0].shape[0])
        train_state = MultiAgentTrainState(params, optimizer.init(params), RunningMeanStd.zeros(()))
        return train_state, actor_critic.initial_memory(batch)

    def policy(
        key: jax.Array, train_state: MultiAgentTrainState, obs: Any, memory: Any, eval: bool = False
    ) -> tuple[jax.Array, MultiAgentTrainState, Any]:
        batch = jax.tree.leaves(obs)[0].shape[0]
        memory, dist, _ = actor_critic.step(train_state.params, memory, obs, jnp.zeros((batch,), bool))
        raw = dist.mode() if eval else dist.sample(key)
        return dist.to_action(raw), train_state, memory

    def reset_memory(memory: Any, eval: bool = False) -> Any:
        # Training memory is this device's block of envs (all of them on one device).
        return actor_critic.initial_memory(config.eval_episodes if eval else config.num_envs // devices.size)

    def update(
        trajectory: Trajectory, train_state: MultiAgentTrainState, memory: Any
    ) -> tuple[MultiAgentTrainState, Any, dict[str, jax.Array]]:
        transitions = trajectory.transitions
        reward = transitions.reward
        if config.team_reward:
            reward = jnp.broadcast_to(reward.sum(-1, keepdims=True), reward.shape)
        # Per-agent values of the observation each step led to (the final one where an episode
        # ended, from the memory after the step, not reset), so a truncated episode bootstraps
        # from its last state.
        num_steps, num_envs = reward.shape[:2]
        flat = lambda x: x.reshape((num_steps * num_envs, *x.shape[2:]))  # noqa: E731
        if actor_critic.recurrent:
            after = jax.tree.map(flat, next_memory(transitions, trajectory.last_memory))
            value_next = actor_critic.value(
                train_state.params, after, jax.tree.map(flat, transitions.final_obs)
            )
            value_next = value_next.reshape(transitions.value.shape)
        else:
            # A feed-forward critic's values of the observations the rollout acted on (the rollout
            # records none: one pass over the batch here costs less than one per step) and of the
            # final observations, in one call with the parameters the rollout acted with.
            both = jax.tree.map(
                lambda obs, final: jnp.concatenate([flat(obs), flat(final)]),
                transitions.obs,
                transitions.final_obs,
            )
            values = actor_critic.value(train_state.params, (), both).reshape((2, *transitions.reward.shape))
            transitions, value_next = transitions.replace(value=values[0]), values[1]
        value = transitions.value
        stats = train_state.value_stats
        if config.normalize_values:
            value, value_next = (
                value_norm.denormalize(stats, value),
                value_norm.denormalize(stats, value_next),
            )
        advantage, target = losses.gae_advantages(
            reward,
            value,
            value_next,
            transitions.terminated,
            transitions.done,
            config.gamma,
            config.gae_lambda,
        )
        batch = ppo_batch(transitions, advantage, target)
        if config.normalize_values:
            # The critic learns the targets in units of the statistics updated with them; the
            # values it gave while acting are re-expressed in those units for the value clip.
            stats = devices.update_stats(stats, target)  # pooled over devices
            batch = batch.replace(
                value=value_norm.normalize(stats, value), target=value_norm.normalize(stats, target)
            )
        params, opt_state, metrics = ppo_update(
            train_state.params, train_state.opt_state, batch, trajectory.key
        )
        return MultiAgentTrainState(params, opt_state, stats), memory, metrics

    return MultiAgentPPO(Agent(init, policy, update, reset_memory), actor_critic)


def make_multi_agent_ppo_runner(
    config: IPPOConfig,
    env: Environment[Any, Any] | None = None,
    env_params: Any = None,
    devices: DeviceAxis | None = None,
) -> Runner:
    """A :class:`~lamella.agents.runner.Runner` training IPPO or MAPPO, feed-forward or recurrent
    (by the config's class).

    Args:
        config: :class:`IPPOConfig`, :class:`MAPPOConfig`, :class:`RecIPPOConfig` or
            :class:`RecMAPPOConfig`.
        env: a bare multi-agent env object (``lamella.envs.make(id, autoreset=False)`` or
            user-written; an ``AutoReset`` env is unwrapped). ``None``: ``config.env_id``.
        env_params: its params (default: ``env.default_params``).
        devices: leave it out: the runner one device runs on its block of envs is built by
            the runner's ``sharding`` (the driver's ``num_devices`` splits ``num_envs``, as
            PPO's runner does; :mod:`lamella.agents.devices`).

    Raises:
        lamella.agents.config.ConfigError: a single-agent env, an action space other than
            MultiDiscrete or a ``(n, D)`` Box, MAPPO on an env without ``global_state``, or
            inconsistent settings (a user error: ``lamella train`` prints one line and exits
            with status 2).
    """
    check_config_type(config, IPPOConfig, "make_multi_agent_ppo_runner", algorithm="ippo")
    config.validate()
    devices = devices or DeviceAxis()
    check_ppo_sizes(config, recurrent=config.recurrent, num_devices=devices.size)
    given_env, given_params = env, env_params
    with jax.ensure_compile_time_eval():
        env, env_params, env_id = bare_multi_agent_env(config, env, env_params)
        check_multi_agent_env(
            env,
            env_params,
            config.algorithm,
            global_state=config.centralised_critic,
            env_id=env_id,
            continuous_action=config.continuous_action,
            team_reward=config.team_reward,
        )
        num_agents, num_actions = int(env.num_agents), num_actions_of(env, env_params)
        action_bounds = action_bounds_of(env, env_params)
    observed = MultiAgentObservation(env, global_state=config.centralised_critic)
    if config.eval_info:
        _check_eval_info(
            config, observed, env_params, str(env_id or getattr(env, "name", type(env).__name__))
        )
    train_env = wrappers.EpisodeStatistics(wrappers.AutoReset(observed))
    agent, actor_critic = make_multi_agent_ppo(config, num_agents, num_actions, action_bounds, devices)
    rollout = make_rollout(
        train_env,
        config.num_steps,
        config.num_envs,
        info_keys=("returned_episode", "returned_episode_returns"),
        devices=devices,
    )
    max_eval_steps = step_limit(config.eval_max_steps, env_params)

    def init(key: jax.Array) -> MultiAgentPPORunnerState:
        key, key_net, key_env = jax.random.split(key, 3)
        start = rollout.init(key_env, env_params)
        train_state, memory = agent.init(key_net, start.obs)
        return MultiAgentPPORunnerState(
            train_state=train_state,
            env_state=start.env_state,
            obs=start.obs,
            memory=memory,
            reset=start.reset,
            key=key,
            iteration=jnp.zeros((), jnp.int32),
            last_return=jnp.zeros((), jnp.float32),
            last_agent_return=jnp.zeros((num_agents,), jnp.float32),
        )

    def record_step(
        state: MultiAgentPPORunnerState,
    ) -> tuple[MultiAgentPPORunnerState, dict[str, jax.Array], Any]:
        key, key_rollout, key_update = hashed_keys(state.key, (3,))
        # A feed-forward critic's values are computed by the update, for the whole batch at once.
        policy = actor_critic_policy(
            actor_critic, state.train_state.params, devices=devices, record_value=actor_critic.recurrent
        )
        start = RolloutState(state.env_state, state.obs, state.memory, state.reset)
        end, transitions = rollout.collect(start, policy, key_rollout, env_params)
        train_state, _, metrics = agent.update(
            Trajectory(transitions, key_update, end.memory), state.train_state, end.memory
        )
        # Returns of the episodes that ended in this rollout: the team's (sum over agents) and
        # each agent's own; the previous values when none ended.
        # Sums over this device's envs, then over the devices.
        ended = transitions.info["returned_episode"].astype(jnp.float32)  # (T, E)
        agent_returns = transitions.info["returned_episode_returns"]  # (T, E, n)
        num_ended, sum_returns = devices.sum((ended.sum(), (agent_returns * ended[..., None]).sum((0, 1))))
        agent_return = sum_returns / jnp.maximum(num_ended, 1.0)
        agent_return = jnp.where(num_ended > 0, agent_return, state.last_agent_return)
        team_return = jnp.where(num_ended > 0, agent_return.sum(), state.last_return)
        metrics = {
            **metrics,
            "episode_return": team_return,
            "return": agent_return,
            "reward": devices.mean(transitions.reward.mean((0, 1))),
            "episodes": num_ended,
        }
        new_state = MultiAgentPPORunnerState(
            train_state=train_state,
            env_state=end.env_state,
            obs=end.obs,
            memory=end.memory,
            reset=end.reset,
            key=key,
            iteration=state.iteration + 1,
            last_return=team_return,
            last_agent_return=agent_return,
        )
        return new_state, metrics, recorded_experience(transitions)

    def step(state: MultiAgentPPORunnerState) -> tuple[MultiAgentPPORunnerState, dict[str, jax.Array]]:
        new_state, metrics, _ = record_step(state)  # the unused experience costs nothing compiled
        return new_state, metrics

    def evaluate(state: MultiAgentPPORunnerState, key: jax.Array) -> dict[str, jax.Array]:
        # Every evaluation episode starts from fresh memory.
        memory = agent.reset_memory(state.memory, eval=True)
        out = evaluate_agent(
            agent,
            state.train_state,
            observed,
            env_params,
            key,
            config.eval_episodes,
            max_eval_steps,
            memory,
            greedy=config.eval_greedy,
            per_agent=True,
            final_info=config.eval_info,
        )
        return {
            "episode_return": out["episode_return"],
            "episode_length": out["episode_length"],
            "return": out["agent_return"],
            **{name: out[name] for name in config.eval_info},
        }

    return Runner(
        init=init,
        step=step,
        evaluate=evaluate,
        steps_per_iteration=config.steps_per_iteration,
        num_iterations=config.num_iterations,
        metric_axes=dict(METRIC_AXES),
        record_step=record_step,
        render_episode=lambda state, key: episode_frames(
            agent,
            state.train_state,
            observed,
            env_params,
            key,
            max_eval_steps,
            # Fresh memory for a batch of one env (empty for the feed-forward runners).
            jax.tree.map(lambda x: x[:1], agent.reset_memory(state.memory, eval=True)),
            config.eval_greedy,
        ),
        sharding=runner_sharding(
            devices,
            "num_envs",
            config.num_envs,
            lambda axis: make_multi_agent_ppo_runner(config, given_env, given_params, axis),
            _state_axes,
        ),
    )


def _check_eval_info(config: IPPOConfig, env: MultiAgentObservation, env_params: Any, name: str) -> None:
    """Raise :class:`~lamella.agents.config.ConfigError` unless every ``config.eval_info`` name is
    an entry of the env's step ``info`` with one value per env (read from shapes: nothing runs)."""

    def one_step(key: jax.Array, params: Any) -> Any:
        _, state = env.reset(key, params)
        space = env.action_space(params)
        return env.step(key, state, jnp.zeros(space.shape, space.dtype), params)[5]

    info = jax.eval_shape(one_step, jax.random.key(0), env_params)
    for entry in config.eval_info:
        if entry not in info:
            raise ConfigError(
                f"{type(config).__name__}.eval_info names {entry!r}, which {name} does not report "
                f"(its step info has {sorted(info)}). Name entries of the env's info (SMAX: 'won'), "
                "or leave eval_info empty."
            )
        shape = getattr(info[entry], "shape", None)
        if shape is None or int(np.prod(shape)) != 1:
            raise ConfigError(
                f"{type(config).__name__}.eval_info names {entry!r}, but {name}'s info[{entry!r}] has "
                f"shape {shape}, not one value per env: the evaluation logs one number per episode."
            )


def _state_axes(state: MultiAgentPPORunnerState) -> Any:
    """The envs axis of each leaf of a runner state (``None``: replicated on every device): a
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
        "last_agent_return": None,
    }
    return MultiAgentPPORunnerState(**axes)


def make_ippo_runner(
    config: IPPOConfig, env: Environment[Any, Any] | None = None, env_params: Any = None
) -> Runner:
    """IPPO's runner (:func:`make_multi_agent_ppo_runner` with an :class:`IPPOConfig`; a MAPPO
    config's fields are taken over, with independent critics)."""
    check_config_type(config, IPPOConfig, "make_ippo_runner", algorithm="ippo")
    config = _convert(config, RecIPPOConfig if config.recurrent else IPPOConfig)  # MAPPO's: its fields
    return make_multi_agent_ppo_runner(config, env, env_params)


def _convert(config: IPPOConfig, target: type[IPPOConfig]) -> IPPOConfig:
    """``config`` as a ``target`` (its fields taken over), unless it already is one (with the
    same critic: a MAPPO config is not an IPPO one, though its class derives from IPPO's)."""
    if isinstance(config, target) and config.centralised_critic == target.centralised_critic:
        return config
    names = {field.name for field in dataclasses.fields(target)}
    return target(**{k: v for k, v in dataclasses.asdict(config).items() if k in names})


def make_mappo_runner(
    config: IPPOConfig, env: Environment[Any, Any] | None = None, env_params: Any = None
) -> Runner:
    """MAPPO's runner: ``config`` as a :class:`MAPPOConfig` (a :class:`RecMAPPOConfig` if it is
    recurrent; an :class:`IPPOConfig`'s fields are taken over)."""
    check_config_type(config, IPPOConfig, "make_mappo_runner", algorithm="mappo")
    if not config.centralised_critic:
        config = _convert(config, RecMAPPOConfig if config.recurrent else MAPPOConfig)
    return make_multi_agent_ppo_runner(config, env, env_params)


def make_rec_ippo_runner(
    config: IPPOConfig, env: Environment[Any, Any] | None = None, env_params: Any = None
) -> Runner:
    """Recurrent IPPO's runner: ``config`` as a :class:`RecIPPOConfig` (a feed-forward config's
    fields are taken over, the network fields get the recurrent defaults; a MAPPO config's
    critics become independent)."""
    check_config_type(config, IPPOConfig, "make_rec_ippo_runner", algorithm="rec_ippo")
    if not config.recurrent:
        config = dataclasses.replace(config, hidden_sizes=RecIPPOConfig.hidden_sizes)
    return make_multi_agent_ppo_runner(_convert(config, RecIPPOConfig), env, env_params)


def make_rec_mappo_runner(
    config: IPPOConfig, env: Environment[Any, Any] | None = None, env_params: Any = None
) -> Runner:
    """Recurrent MAPPO's runner: ``config`` as a :class:`RecMAPPOConfig` (fields taken over)."""
    check_config_type(config, IPPOConfig, "make_rec_mappo_runner", algorithm="rec_mappo")
    if not config.recurrent:
        config = dataclasses.replace(config, hidden_sizes=RecIPPOConfig.hidden_sizes)
    return make_multi_agent_ppo_runner(_convert(config, RecMAPPOConfig), env, env_params)
