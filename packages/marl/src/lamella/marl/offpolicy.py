"""Independent off-policy learners: IDQN (discrete actions) and ISAC (continuous actions).

Each agent learns its own Q-function (IDQN) or actor and critics (ISAC) from its own
observation, action and reward, as if the other agents were part of the environment. Nothing of
DQN or SAC is copied here: lamella-agents' ``make_dqn`` / ``make_sac`` learn for one agent, and
:func:`make_independent_agent` turns such a single-agent learner into one for ``n`` agents:

* with ``share_parameters`` (the default) every agent's step is one more row of the batch: a
  batch of ``B`` multi-agent transitions is ``B * n`` single-agent ones for one network;
* without it the single-agent learner is ``jax.vmap``-ped over the agent axis: ``n`` networks,
  optimisers and target networks, stacked on a leading agent axis of every train-state leaf;
* ``agent_id`` appends a one-hot agent id to each agent's observation (how one shared network
  tells the agents apart);
* ``team_reward`` trains every agent on the sum of the agents' rewards (LBF's team);
* the action mask of :class:`~lamella.marl.observation.MultiAgentObservation` reaches DQN as
  each agent's ``"action_mask"``, which DQN honours in its greedy and random choices and in its
  target's max.

The runners (:func:`make_idqn_runner`, :func:`make_isac_runner`) are lamella-agents' off-policy
loop (:func:`lamella.agents.offpolicy.make_offpolicy_runner`) given the wrapped multi-agent env
and the independent agent: the same flashbax episode buffer (transitions keep the agent axis),
warm-up, update schedule and evaluation, per-agent returns in the run log, and the driver's
progress display, checkpoints and exact resume (``lamella train idqn|isac``), experience recorded
to Vaults in IPPO's layout (``--record-vault``, :mod:`lamella.marl.recording`), and the loop's
split over devices (``num_devices``: each device steps its block of ``num_envs`` and learns from
its block of every sampled batch, with DQN's and SAC's own device axis)::

    runner = make_idqn_runner(IDQNConfig(env_id="Foraging-5x5-2p-1f-coop-v3"))
    state, metrics = jax.jit(jax.vmap(make_train(runner)))(jax.random.split(jax.random.key(0), 3))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents.algorithms import Algorithm
from lamella.agents.config import ConfigError, check_config_type
from lamella.agents.devices import DeviceAxis
from lamella.agents.offpolicy import (
    Batch,
    DQNTrainConfig,
    SACTrainConfig,
    make_dqn,
    make_offpolicy_runner,
    make_sac,
)
from lamella.agents.offpolicy.common import ACTION_MASK
from lamella.agents.protocol import Agent
from lamella.agents.runner import Runner
from lamella.envs import spaces
from lamella.envs.environment import Environment
from lamella.marl.observation import MultiAgentObservation, check_multi_agent_env
from lamella.marl.ppo import bare_multi_agent_env
from lamella.marl.recording import recorded_experience

__all__ = [
    "IDQN",
    "ISAC",
    "PRESETS",
    "IDQNConfig",
    "ISACConfig",
    "IndependentSettings",
    "make_idqn_runner",
    "make_independent_agent",
    "make_isac_runner",
]

#: ``make(agent_config, observation_space, action_space[, devices]) -> Agent`` of one agent
#: (``make_dqn``); it takes the device axis when :func:`make_independent_agent` is given one.
MakeAgent = Callable[..., Agent]


@dataclasses.dataclass(frozen=True)
class IndependentSettings:
    """What the independent learners add to a single-agent off-policy config.

    Attributes:
        share_parameters: one network (and optimiser, target network) for all agents; else one
            per agent.
        agent_id: append a one-hot agent id to each agent's observation.
        team_reward: train every agent on the sum of the agents' rewards instead of its own.
        env_kwargs: keyword overrides of ``lamella.envs.make(env_id, ...)`` as ``"name=value"``
            strings (``("continuous_actions=true",)`` for MPE's continuous actions; on the
            command line ``env_kwargs=continuous_actions=true``).
    """

    share_parameters: bool = True
    agent_id: bool = True
    team_reward: bool = True
    env_kwargs: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class IDQNConfig(DQNTrainConfig, IndependentSettings):
    """Independent DQN: lamella-agents' :class:`~lamella.agents.offpolicy.DQNTrainConfig` (the
    loop's and DQN's settings, double DQN with Huber loss by default) plus
    :class:`IndependentSettings`.

    ``exploration_steps`` counts env steps, whatever the number of agents (with shared
    parameters each env step is ``n`` acted agent steps; the schedule is scaled to match).
    ``n_step`` must be 1 and ``her`` False.

    Attributes:
        eval_greedy: evaluate the greedy policy; the default evaluates the exploring one
            (epsilon at its current value, ``epsilon_end`` once ``exploration_steps`` have
            passed), as Mava evaluates IPPO by sampling: in LBF two greedy agents can block each
            other for the rest of an episode.
    """

    eval_greedy: bool = False

    env_id: str = "Foraging-5x5-2p-1f-coop-v3"
    total_timesteps: int = 100_000
    num_envs: int = 4
    rollout_steps: int = 250
    buffer_size: int = 100_000
    learning_starts: int = 1_000
    exploration_steps: int = 20_000
    target_update_period: int = 200
    hidden_sizes: tuple[int, ...] = (64, 64)
    eval_episodes: int = 32

    #: The algorithm's name in messages.
    algorithm = "idqn"


@dataclasses.dataclass(frozen=True)
class ISACConfig(SACTrainConfig, IndependentSettings):
    """Independent SAC (continuous actions): lamella-agents'
    :class:`~lamella.agents.offpolicy.SACTrainConfig` plus :class:`IndependentSettings`.

    ``team_reward`` is off by default: MPE's cooperative scenarios already give every agent the
    shared reward. Evaluations use the mean action. ``n_step`` must be 1 and ``her`` False.
    """

    env_id: str = "MPE-simple_speaker_listener-v4"
    env_kwargs: tuple[str, ...] = ("continuous_actions=true",)
    team_reward: bool = False
    total_timesteps: int = 100_000
    num_envs: int = 4
    rollout_steps: int = 25
    learning_starts: int = 1_000
    hidden_sizes: tuple[int, ...] = (64, 64)
    actor_learning_rate: float = 1e-3
    critic_learning_rate: float = 1e-3
    alpha_learning_rate: float = 1e-3
    eval_episodes: int = 32

    algorithm = "isac"


def _agent_spaces(
    observation_space: spaces.Space, action_space: spaces.Space, num_agents: int, agent_id: bool
) -> tuple[spaces.Space, spaces.Space]:
    """One agent's observation space (a Dict with ``"obs"`` (features,) and, for discrete actions,
    ``"action_mask"``) and action space (Discrete, or a 1-D Box)."""
    assert isinstance(observation_space, spaces.Dict)
    obs_shape = observation_space["obs"].shape[1:]
    features = int(np.prod(obs_shape)) + (num_agents if agent_id else 0)
    entries: dict[str, spaces.Space] = {"obs": spaces.Box(-np.inf, np.inf, (features,), np.float32)}
    if isinstance(action_space, spaces.MultiDiscrete):
        num_actions = int(np.max(np.asarray(action_space.nvec)))
        entries[ACTION_MASK] = spaces.Box(0, 1, (num_actions,), np.bool_)
        return spaces.Dict(entries), spaces.Discrete(num_actions)
    assert isinstance(action_space, spaces.Box)
    low, high = np.asarray(action_space.low)[0], np.asarray(action_space.high)[0]
    return spaces.Dict(entries), spaces.Box(low, high, low.shape, np.float32)


def make_independent_agent(
    make_agent: MakeAgent,
    agent_config: Any,
    observation_space: spaces.Space,
    action_space: spaces.Space,
    *,
    num_agents: int,
    share_parameters: bool = True,
    agent_id: bool = True,
    team_reward: bool = False,
    devices: DeviceAxis | None = None,
) -> Agent:
    """``n`` independent copies of a single-agent off-policy learner as one :class:`Agent`.

    Args:
        make_agent: ``make(agent_config, observation_space, action_space) -> Agent`` of one
            agent (``lamella.agents.offpolicy.make_dqn``, ``make_sac``, ...).
        agent_config: its config.
        observation_space: :class:`~lamella.marl.observation.MultiAgentObservation`'s Dict
            space (``"obs"`` ``(n, ...)``, ``"action_mask"`` ``(n, A)`` for discrete actions).
        action_space: the env's ``MultiDiscrete`` or ``Box (n, D)`` space.
        num_agents: ``n``.
        share_parameters, agent_id, team_reward: see :class:`IndependentSettings`.
        devices: the mesh axis when the off-policy loop's envs are split over devices, passed to
            ``make_agent`` as its fourth argument (None: ``make_agent`` is called with three).
            Each device's single-agent update then learns from its block of the sampled
            transitions (shared parameters: of the ``batch * n`` agent rows; else of each
            agent's ``batch`` rows) and averages gradients over the devices.

    Returns:
        An Agent whose ``policy`` takes dict observations with leaves ``(batch, n, ...)`` and
        returns actions ``(batch, n[, D])``, and whose ``update`` takes a
        :class:`~lamella.agents.offpolicy.Batch` with leaves ``(batch, n, ...)`` (reward and
        discount ``(batch, n)``). Its train state is the single agent's (shared parameters) or
        the single agent's with a leading agent axis on every leaf. Update metrics are averaged
        over agents.
    """
    n = int(num_agents)
    one_obs_space, one_action_space = _agent_spaces(observation_space, action_space, n, agent_id)
    one = (
        make_agent(agent_config, one_obs_space, one_action_space)
        if devices is None
        else make_agent(agent_config, one_obs_space, one_action_space, devices)
    )
    ids = jnp.eye(n, dtype=jnp.float32)

    def per_agent(obs: Any) -> dict[str, jax.Array]:
        """Each agent's observation, leaves ``(batch, n, ...)``."""
        x = jnp.asarray(obs["obs"], jnp.float32)
        x = x.reshape((*x.shape[:2], -1))
        if agent_id:
            x = jnp.concatenate([x, jnp.broadcast_to(ids, (*x.shape[:1], n, n))], axis=-1)
        out = {"obs": x}
        if ACTION_MASK in obs:
            out[ACTION_MASK] = obs[ACTION_MASK]
        return out

    fold = lambda tree: jax.tree.map(lambda x: x.reshape((-1, *x.shape[2:])), tree)  # noqa: E731

    def init(key: jax.Array, obs_example: Any = None) -> tuple[Any, tuple[()]]:
        if share_parameters:
            return one.init(key, None)[0], ()
        return jax.vmap(lambda k: one.init(k, None)[0])(jax.random.split(key, n)), ()

    def policy(
        key: jax.Array, train_state: Any, obs: Any, memory: Any, eval: bool = False
    ) -> tuple[jax.Array, Any, Any]:
        inputs = per_agent(obs)
        batch = inputs["obs"].shape[0]
        if share_parameters:
            action, train_state, _ = one.policy(key, train_state, fold(inputs), (), eval=eval)
            return action.reshape((batch, n, *action.shape[1:])), train_state, memory

        def act(k: jax.Array, ts: Any, o: Any) -> tuple[jax.Array, Any]:
            action, ts, _ = one.policy(k, ts, o, (), eval=eval)
            return action, ts

        action, train_state = jax.vmap(act, in_axes=(0, 0, 1), out_axes=(1, 0))(
            jax.random.split(key, n), train_state, inputs
        )
        return action, train_state, memory

    def update(batch: Batch, train_state: Any, memory: Any) -> tuple[Any, Any, dict[str, jax.Array]]:
        reward = batch.reward.astype(jnp.float32)
        if reward.ndim != 2 or reward.shape[1] != n:
            raise ValueError(
                f"make_independent_agent: the batch's reward must have shape (batch, {n}) (one per agent), "
                f"got {reward.shape}."
            )
        if team_reward:
            reward = jnp.broadcast_to(reward.sum(-1, keepdims=True), reward.shape)
        discount = jnp.broadcast_to(batch.discount.astype(jnp.float32), reward.shape)
        obs, next_obs = per_agent(batch.obs), per_agent(batch.next_obs)
        if share_parameters:
            flat = Batch(
                fold(obs), fold(batch.action), fold(reward), fold(discount), fold(next_obs), batch.key
            )
            train_state, _, metrics = one.update(flat, train_state, ())
            return train_state, memory, metrics
        stacked = Batch(obs, batch.action, reward, discount, next_obs, jax.random.split(batch.key, n))
        axes = Batch(1, 1, 1, 1, 1, 0)  # type: ignore[arg-type]

        def learn(b: Batch, ts: Any) -> tuple[Any, dict[str, jax.Array]]:
            ts, _, metrics = one.update(b, ts, ())
            return ts, metrics

        train_state, metrics = jax.vmap(learn, in_axes=(axes, 0))(stacked, train_state)
        return train_state, memory, jax.tree.map(lambda m: jnp.mean(m, axis=0), metrics)

    return Agent(init=init, policy=policy, update=update, reset_memory=lambda memory, eval=False: ())


def _multi_agent_env(
    config: Any, env: Environment[Any, Any] | None, env_params: Any, *, continuous: bool
) -> tuple[Environment[Any, Any], Any]:
    """The bare multi-agent env of ``config`` (or the one given), checked for the algorithm."""
    algorithm = config.algorithm
    with jax.ensure_compile_time_eval():
        try:
            env, env_params, env_id = bare_multi_agent_env(config, env, env_params)
        except ConfigError:
            if continuous and env is None and _SWITCH in config.env_kwargs:
                _refuses_the_switch(config, env_params)
            raise
        check_multi_agent_env(env, env_params, algorithm, env_id=env_id, team_reward=config.team_reward)
        name = env_id or env.name
        is_box = isinstance(env.action_space(env_params), spaces.Box)
    if continuous and not is_box:
        raise ConfigError(
            f"{algorithm} needs continuous actions (a Box (num_agents, D)); {name}'s are discrete. Use idqn, "
            "or an env with continuous actions (MPE: env_kwargs=continuous_actions=true)."
        )
    if not continuous and is_box:
        raise ConfigError(
            f"{algorithm} needs discrete actions; {name}'s are continuous (a Box). Use isac for continuous actions."
        )
    return env, env_params


_SWITCH = "continuous_actions=true"  # ISACConfig's default env_kwargs: MPE's continuous actions


def _refuses_the_switch(config: Any, env_params: Any) -> None:
    """Raise what the user must fix when ``config.env_id`` refused ISAC's default
    ``continuous_actions=true`` and its actions are discrete (nothing when it takes the rest
    and has continuous actions: the caller then raises the refusal itself)."""
    rest = tuple(item for item in config.env_kwargs if item != _SWITCH)
    try:
        env, params, _ = bare_multi_agent_env(dataclasses.replace(config, env_kwargs=rest), None, env_params)
    except ConfigError:
        return
    # A single-agent env (Pendulum-v1, CartPole-v1) is refused as such, not for the switch.
    check_multi_agent_env(env, params, config.algorithm, env_id=config.env_id, team_reward=config.team_reward)
    if not isinstance(env.action_space(params), spaces.Box):
        raise ConfigError(
            f"{config.algorithm} needs continuous actions (a Box (num_agents, D)); {config.env_id}'s are "
            f"discrete, and it has no continuous_actions switch (env_kwargs={_SWITCH}, {config.algorithm}'s "
            "default, is for MPE). Use idqn, or an env with continuous actions (MPE, for example "
            "MPE-simple_spread-v3)."
        ) from None


def _check_loop(config: Any) -> None:
    try:
        config.validate()
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if config.n_step != 1 or config.her:
        raise ConfigError(
            f"{config.algorithm} uses one-step targets and no hindsight relabelling: set n_step=1 and her=false."
        )


def _make_independent_runner(
    config: Any,
    make_agent: MakeAgent,
    env: Environment[Any, Any] | None,
    env_params: Any,
    *,
    continuous: bool,
) -> Runner:
    _check_loop(config)
    env, env_params = _multi_agent_env(config, env, env_params, continuous=continuous)
    num_agents = int(env.num_agents)

    def make(
        agent_config: Any, observation_space: spaces.Space, action_space: spaces.Space, devices: DeviceAxis
    ) -> Agent:
        if config.share_parameters and hasattr(agent_config, "exploration_steps"):
            # One env step is n acted agent steps of the shared network.
            agent_config = dataclasses.replace(
                agent_config, exploration_steps=agent_config.exploration_steps * num_agents
            )
        return make_independent_agent(
            make_agent,
            agent_config,
            observation_space,
            action_space,
            num_agents=num_agents,
            share_parameters=config.share_parameters,
            agent_id=config.agent_id,
            team_reward=config.team_reward,
            devices=devices,
        )

    return make_offpolicy_runner(
        config,
        env=MultiAgentObservation(env),
        env_params=env_params,
        make_agent=make,
        agent_takes_devices=True,
        recorded=recorded_experience,
    )


def make_idqn_runner(
    config: IDQNConfig, env: Environment[Any, Any] | None = None, env_params: Any = None
) -> Runner:
    """Independent DQN's :class:`~lamella.agents.runner.Runner` on a multi-agent env with discrete
    actions (lamella-agents' off-policy loop with :func:`make_independent_agent` over ``make_dqn``).

    The runner splits ``num_envs`` over devices (``Runner.sharding``, the driver's
    ``num_devices``) as the loop does for DQN; ``num_envs`` and ``batch_size`` must be multiples
    of the device count.

    Args:
        config: an :class:`IDQNConfig`.
        env: a bare multi-agent env object (default: ``config.env_id`` with ``config.env_kwargs``).
        env_params: its params (default: the env's defaults).

    Raises:
        lamella.agents.config.ConfigError: a single-agent env, continuous actions, ``team_reward``
            on an env whose agents are not one team, or inconsistent loop settings.
    """
    check_config_type(config, IDQNConfig, "make_idqn_runner", algorithm="idqn")
    return _make_independent_runner(config, make_dqn, env, env_params, continuous=False)


def make_isac_runner(
    config: ISACConfig, env: Environment[Any, Any] | None = None, env_params: Any = None
) -> Runner:
    """Independent SAC's :class:`~lamella.agents.runner.Runner` on a multi-agent env with
    continuous actions (a Box ``(n, D)``, the same bounds for every agent), as
    :func:`make_idqn_runner` with ``make_sac``."""
    check_config_type(config, ISACConfig, "make_isac_runner", algorithm="isac")
    return _make_independent_runner(config, make_sac, env, env_params, continuous=True)


#: Presets of ``lamella train idqn|isac``; one named like an env id is that env's default.
PRESETS: dict[str, dict[str, Any]] = {
    "idqn": {
        "Foraging-5x5-2p-1f-coop-v3": IDQNConfig(),
        "Foraging-8x8-2p-2f-coop-v3": IDQNConfig(
            env_id="Foraging-8x8-2p-2f-coop-v3", total_timesteps=1_000_000
        ),
    },
    "isac": {
        "MPE-simple_speaker_listener-v4": ISACConfig(),
        "MPE-simple_spread-v3": ISACConfig(env_id="MPE-simple_spread-v3", total_timesteps=400_000),
    },
}

#: ``lamella train idqn`` (entry point ``idqn = "lamella.marl.offpolicy:IDQN"``).
IDQN = Algorithm(IDQNConfig, make_idqn_runner, PRESETS["idqn"])
#: ``lamella train isac`` (entry point ``isac = "lamella.marl.offpolicy:ISAC"``).
ISAC = Algorithm(ISACConfig, make_isac_runner, PRESETS["isac"])
