"""IPPO and MAPPO (feed-forward, discrete actions), assembled from lamella-agents' PPO pieces.

``make_ippo_runner(IPPOConfig(...))`` and ``make_mappo_runner(MAPPOConfig(...))`` build a
:class:`~lamella.agents.runner.Runner` that the training driver runs like PPO's::

    runner = make_ippo_runner(IPPOConfig(env_id="Foraging-8x8-2p-2f-coop-v3"))
    state, metrics = jax.jit(jax.vmap(make_train(runner)))(jax.random.split(jax.random.key(0), 3))

Nothing of PPO is copied here. The pieces and what the agent axis does in each:

* the env is wrapped in :class:`~lamella.marl.observation.MultiAgentObservation` (dict
  observations holding the action mask and, for MAPPO, the global state) inside ``AutoReset``;
* :func:`lamella.agents.make_rollout` collects ``(num_steps, num_envs, n, ...)`` batches;
* :class:`~lamella.marl.networks.MultiAgentActorCriticNet` behind
  :func:`lamella.agents.feedforward_actor_critic` gives per-agent log-probs and values
  ``(..., n)``;
* :func:`lamella.agents.losses.gae_advantages` runs over ``(T, num_envs, n)``: each agent of
  each env is its own stream, truncation-correct (a truncated step bootstraps from the value of
  the final observation, hence the final global state, a terminated one from 0);
* :func:`lamella.agents.make_ppo_update` shuffles env steps (all agents of a step stay
  together) into minibatches; :func:`lamella.agents.losses.ppo_loss` takes one ratio per agent.

IPPO and MAPPO differ only in the critic's input (``centralised_critic``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

import lamella.envs
from lamella.agents import losses
from lamella.agents.actor_critic import ActorCritic, feedforward_actor_critic
from lamella.agents.config import ConfigError
from lamella.agents.networks import activation_by_name
from lamella.agents.ppo_update import check_ppo_sizes, make_ppo_update_from_config, ppo_batch
from lamella.agents.protocol import Agent
from lamella.agents.rollout import RolloutState, Transition, actor_critic_policy, make_rollout
from lamella.agents.runner import Runner, episode_frames, evaluate_agent, hashed_keys, step_limit
from lamella.envs import wrappers
from lamella.envs.environment import Environment
from lamella.marl.networks import MultiAgentActorCriticNet
from lamella.marl.observation import MultiAgentObservation, check_multi_agent_env, num_actions_of
from lamella.marl.recording import recorded_experience

__all__ = [
    "METRIC_AXES",
    "IPPOConfig",
    "MAPPOConfig",
    "MultiAgentPPO",
    "MultiAgentPPORunnerState",
    "MultiAgentTrainState",
    "Trajectory",
    "make_ippo_runner",
    "make_mappo_runner",
    "make_multi_agent_ppo",
    "make_multi_agent_ppo_runner",
]


@dataclasses.dataclass(frozen=True)
class IPPOConfig:
    """IPPO's settings; the defaults are Mava's ``ff_ippo`` (``configs/system/ppo``, ``arch/anakin``,
    ``network/mlp``).

    Attributes:
        env_id: a registered multi-agent env id with discrete actions.
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
    """

    env_id: str = "Foraging-8x8-2p-2f-coop-v3"
    total_timesteps: int = 4_096_000
    eval_episodes: int = 32
    eval_max_steps: int = 0
    eval_greedy: bool = False
    num_envs: int = 16
    num_steps: int = 128
    num_epochs: int = 4
    num_minibatches: int = 2
    learning_rate: float = 2.5e-4
    anneal_lr: bool = False
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    clip_value: bool = True
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    max_grad_norm: float = 0.5
    normalize_advantages: bool = True
    hidden_sizes: tuple[int, ...] = (128, 128)
    activation: str = "relu"
    share_parameters: bool = True
    agent_id: bool = True
    team_reward: bool = True

    #: The critic reads the env's global state (MAPPO) rather than each agent's observation.
    centralised_critic = False
    #: The algorithm's name in messages.
    algorithm = "ippo"

    @property
    def steps_per_iteration(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // self.steps_per_iteration

    def validate(self) -> None:
        """Raise :class:`~lamella.agents.config.ConfigError` naming the first inconsistent setting."""
        check_ppo_sizes(self)
        try:
            activation_by_name(self.activation)
        except (KeyError, ValueError) as error:
            raise ConfigError(str(error)) from None


@dataclasses.dataclass(frozen=True)
class MAPPOConfig(IPPOConfig):
    """MAPPO's settings: IPPO's (Mava's ``ff_mappo`` defaults are the same), with a centralised
    critic on ``env.global_state(state, params)`` (plus the agent's id with ``agent_id``)."""

    centralised_critic = True
    algorithm = "mappo"


#: The named axes of the runners' per-agent metrics (``Runner.metric_axes``).
METRIC_AXES: tuple[tuple[str, tuple[str, ...]], ...] = (("return", ("agent",)), ("reward", ("agent",)))


class MultiAgentTrainState(struct.PyTreeNode):
    """What learning changes: the network's ``params`` and the optimiser's ``opt_state``."""

    params: Any
    opt_state: Any


class Trajectory(struct.PyTreeNode):
    """What ``agent.update`` takes: the collector's ``transitions`` (leading axes ``(num_steps,
    num_envs)``, then the agent axis) and the key of the minibatch shuffles."""

    transitions: Transition
    key: jax.Array


class MultiAgentPPORunnerState(struct.PyTreeNode):
    """Everything one run carries between iterations (arrays only)."""

    train_state: MultiAgentTrainState
    env_state: Any
    obs: Any  # dict observation, leading axis num_envs
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


def make_multi_agent_ppo(config: IPPOConfig, num_agents: int, num_actions: int) -> MultiAgentPPO:
    """IPPO (or MAPPO, by ``config.centralised_critic``) for ``num_agents`` agents with
    ``num_actions`` discrete actions each."""
    config.validate()
    network = MultiAgentActorCriticNet(
        num_agents=num_agents,
        num_actions=num_actions,
        hidden_sizes=tuple(config.hidden_sizes),
        activation=config.activation,
        share_parameters=config.share_parameters,
        agent_id=config.agent_id,
        centralised_critic=config.centralised_critic,
    )
    actor_critic = feedforward_actor_critic(network)
    optimizer, ppo_update = make_ppo_update_from_config(actor_critic, config)

    def init(key: jax.Array, obs_example: Any) -> tuple[MultiAgentTrainState, Any]:
        params = actor_critic.init(key, obs_example)
        return MultiAgentTrainState(params, optimizer.init(params)), ()

    def policy(
        key: jax.Array, train_state: MultiAgentTrainState, obs: Any, memory: Any, eval: bool = False
    ) -> tuple[jax.Array, MultiAgentTrainState, Any]:
        _, dist, _ = actor_critic.step(train_state.params, (), obs, jnp.zeros((), bool))
        return (dist.mode() if eval else dist.sample(key)), train_state, memory

    def update(
        trajectory: Trajectory, train_state: MultiAgentTrainState, memory: Any
    ) -> tuple[MultiAgentTrainState, Any, dict[str, jax.Array]]:
        transitions = trajectory.transitions
        reward = transitions.reward
        if config.team_reward:
            reward = jnp.broadcast_to(reward.sum(-1, keepdims=True), reward.shape)
        # Per-agent values of the observation each step led to (the final one where an episode
        # ended), so a truncated episode bootstraps from its last state.
        value_next = actor_critic.value(train_state.params, (), transitions.final_obs)
        advantage, target = losses.gae_advantages(
            reward,
            transitions.value,
            value_next,
            transitions.terminated,
            transitions.done,
            config.gamma,
            config.gae_lambda,
        )
        params, opt_state, metrics = ppo_update(
            train_state.params,
            train_state.opt_state,
            ppo_batch(transitions, advantage, target),
            trajectory.key,
        )
        return MultiAgentTrainState(params, opt_state), memory, metrics

    return MultiAgentPPO(Agent(init, policy, update, lambda memory, eval=False: ()), actor_critic)


def make_multi_agent_ppo_runner(
    config: IPPOConfig, env: Environment[Any, Any] | None = None, env_params: Any = None
) -> Runner:
    """A :class:`~lamella.agents.runner.Runner` training IPPO or MAPPO (by the config's class).

    Args:
        config: :class:`IPPOConfig` or :class:`MAPPOConfig`.
        env: a bare multi-agent env object (``lamella.envs.make(id, autoreset=False)`` or
            user-written; an ``AutoReset`` env is unwrapped). ``None``: ``config.env_id``.
        env_params: its params (default: ``env.default_params``).

    Raises:
        lamella.agents.config.ConfigError: a single-agent env, continuous actions, MAPPO on an
            env without ``global_state``, or inconsistent settings (a user error: ``lamella
            train`` prints one line and exits with status 2).
    """
    config.validate()
    env_id = None
    with jax.ensure_compile_time_eval():
        if env is None:
            env_id = config.env_id
            try:
                env, made_params = lamella.envs.make(config.env_id, autoreset=False)
            except KeyError as error:
                raise ConfigError(str(error.args[0]) if error.args else str(error)) from None
            env_params = made_params if env_params is None else env_params
        elif env_params is None:
            env_params = env.default_params
        if isinstance(env, wrappers.AutoReset):
            env = env.env
        check_multi_agent_env(
            env,
            env_params,
            config.algorithm,
            global_state=config.centralised_critic,
            env_id=env_id,
            team_reward=config.team_reward,
        )
        num_agents, num_actions = int(env.num_agents), num_actions_of(env, env_params)
    observed = MultiAgentObservation(env, global_state=config.centralised_critic)
    train_env = wrappers.EpisodeStatistics(wrappers.AutoReset(observed))
    agent, actor_critic = make_multi_agent_ppo(config, num_agents, num_actions)
    rollout = make_rollout(
        train_env,
        config.num_steps,
        config.num_envs,
        info_keys=("returned_episode", "returned_episode_returns"),
    )
    max_eval_steps = step_limit(config.eval_max_steps, env_params)

    def init(key: jax.Array) -> MultiAgentPPORunnerState:
        key, key_net, key_env = jax.random.split(key, 3)
        start = rollout.init(key_env, env_params)
        train_state, _ = agent.init(key_net, start.obs)
        return MultiAgentPPORunnerState(
            train_state=train_state,
            env_state=start.env_state,
            obs=start.obs,
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
        policy = actor_critic_policy(actor_critic, state.train_state.params)
        start = RolloutState(state.env_state, state.obs, (), state.reset)
        end, transitions = rollout.collect(start, policy, key_rollout, env_params)
        train_state, _, metrics = agent.update(Trajectory(transitions, key_update), state.train_state, ())
        # Returns of the episodes that ended in this rollout: the team's (sum over agents) and
        # each agent's own; the previous values when none ended.
        ended = transitions.info["returned_episode"].astype(jnp.float32)  # (T, E)
        num_ended = ended.sum()
        agent_returns = transitions.info["returned_episode_returns"]  # (T, E, n)
        agent_return = (agent_returns * ended[..., None]).sum((0, 1)) / jnp.maximum(num_ended, 1.0)
        agent_return = jnp.where(num_ended > 0, agent_return, state.last_agent_return)
        team_return = jnp.where(num_ended > 0, agent_return.sum(), state.last_return)
        metrics = {
            **metrics,
            "episode_return": team_return,
            "return": agent_return,
            "reward": transitions.reward.mean((0, 1)),
            "episodes": num_ended,
        }
        new_state = MultiAgentPPORunnerState(
            train_state=train_state,
            env_state=end.env_state,
            obs=end.obs,
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
        out = evaluate_agent(
            agent,
            state.train_state,
            observed,
            env_params,
            key,
            config.eval_episodes,
            max_eval_steps,
            (),
            greedy=config.eval_greedy,
            per_agent=True,
        )
        return {
            "episode_return": out["episode_return"],
            "episode_length": out["episode_length"],
            "return": out["agent_return"],
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
            agent, state.train_state, observed, env_params, key, max_eval_steps, (), config.eval_greedy
        ),
    )


def make_ippo_runner(
    config: IPPOConfig, env: Environment[Any, Any] | None = None, env_params: Any = None
) -> Runner:
    """IPPO's runner (:func:`make_multi_agent_ppo_runner` with an :class:`IPPOConfig`)."""
    return make_multi_agent_ppo_runner(config, env, env_params)


def make_mappo_runner(
    config: IPPOConfig, env: Environment[Any, Any] | None = None, env_params: Any = None
) -> Runner:
    """MAPPO's runner: ``config`` as a :class:`MAPPOConfig` (an :class:`IPPOConfig`'s fields are
    taken over)."""
    if not isinstance(config, MAPPOConfig):
        config = MAPPOConfig(**dataclasses.asdict(config))
    return make_multi_agent_ppo_runner(config, env, env_params)
