"""The multi-agent RL runner of opponent shaping: each agent a PPO learner or a fixed Agent.

Pax's ``rl`` runner on lamella's pieces. Each of the ``n`` agents of a multi-agent env is either

* a **learner**: lamella-agents' PPO (:func:`lamella.agents.ppo.make_ppo`: its network,
  optimiser, GAE and update, feed-forward or with a GRU/LSTM core), with its own parameters and
  optimiser, trained on its own reward; or
* **fixed**: a memory-one strategy (:mod:`lamella.marl.shaping.strategies`, by name) or any
  lamella :class:`~lamella.agents.protocol.Agent` (used through ``policy`` only; never updated).

::

    runner = make_shaping_runner(ShapingConfig(agents=("ppo", "tit_for_tat")))
    state, metrics = jax.jit(jax.vmap(make_train(runner)))(jax.random.split(jax.random.key(0), 3))

One iteration is one :func:`~lamella.agents.rollout.make_rollout` collection of the joint
policy, then each learner's ``agent.update`` on its own slice of the batch (its observations,
actions, rewards and flags; the agent axis taken out). Nothing of PPO is copied here.

**Opponents.** Agent 0 is the focal agent: one instance playing all ``num_envs`` envs. Every
other agent slot has ``num_opponents`` independent instances (Pax's ``num_opps``), each playing
``num_envs / num_opponents`` of the envs, each a learner with its own parameters when the slot
learns. The instances of a slot are one ``jax.vmap``.

**Metrics** of every iteration: ``episode_return`` (agent 0's mean return of the episodes that
ended), ``return`` and ``reward`` (each agent's episode return and mean reward per step), each
learner's PPO metrics as ``learner_<i>_<name>``, and the watchers of
:mod:`lamella.marl.shaping.watchers` (per-state cooperation probabilities and state visits on
the iterated matrix games, own-coin shares on CoinGame, cooperate-coin shares on
IPD-in-the-Matrix), each with an ``agent`` axis.

**Dict observations** (IPD-in-the-Matrix: a grid view and an inventory per agent) are flattened
into one float32 row per agent (:mod:`lamella.marl.shaping.observations`) before any agent sees
them. ``torso="cnn"`` gives the learners Pax's ``ipditm`` CNN, which takes the view back out of
the row (where :func:`~lamella.marl.shaping.observations.view_layout` says it is) and joins the
inventory after the convolution.

**Many devices** (``Runner.sharding``, the driver's ``num_devices``): the envs split over the
devices. Agent 0's learner (one instance on every env) and any other learner with one instance
learn as lamella-agents' PPO does on several devices (each device acts on and trains from its
block of envs; gradients and statistics averaged). A slot with ``num_opponents > 1`` learning
instances splits its instances instead (each device plays and updates ``num_opponents /
num_devices`` whole instances, which must divide). Fixed agents act on every env on every device
(the observations gathered; cheap) and each device keeps its block of their actions. The step's
metrics reduce over the devices, so the run equals the one-device run up to the order of float
sums.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

import lamella.envs
from lamella.agents.config import ConfigError, check_config_type, check_numbers, unused_settings_of
from lamella.agents.devices import DeviceAxis, runner_sharding
from lamella.agents.networks import activation_by_name
from lamella.agents.ppo import PPO, RECURRENT_CORE_SETTINGS, PPOConfig, Trajectory, make_ppo
from lamella.agents.ppo_update import RECURRENT_UPDATES, PPOSettings, check_ppo_sizes
from lamella.agents.protocol import Agent, reset_memory_where
from lamella.agents.rollout import PolicyStep, RolloutState, Transition, actor_critic_policy, make_rollout
from lamella.agents.runner import Runner, episode_frames, evaluate_agent, hashed_keys, step_limit
from lamella.envs import spaces, wrappers
from lamella.envs.environment import Environment
from lamella.marl.observation import check_multi_agent_env
from lamella.marl.shaping import watchers
from lamella.marl.shaping.observations import flatten_agent_observations, view_layout
from lamella.marl.shaping.strategies import STRATEGIES, check_strategy_fits, make_memory_one_agent, strategy

__all__ = [
    "LEARNER",
    "ShapingConfig",
    "ShapingRunnerState",
    "make_shaping_runner",
]

#: The ``agents`` entry of a PPO learner.
LEARNER = "ppo"
#: The learners' torsos (``ShapingConfig.torso``, ``MetaConfig.torso`` and ``meta_torso``).
TORSOS = ("mlp", "cnn")
#: ``(start, (H, W, C))``: an image view's place in an agent's flat observation row.
ViewLayout = tuple[int, tuple[int, int, int]]
# Policy order (start, CC, CD, DC, DD) -> observation order (CC, CD, DC, DD, START).
_POLICY_TO_OBS = np.array([1, 2, 3, 4, 0])


@dataclasses.dataclass(frozen=True)
class ShapingConfig(PPOSettings):
    """The settings of :func:`make_shaping_runner`. The defaults are PPO against tit-for-tat on
    Pax's iterated prisoner's dilemma (``presets.PRESETS["shaping"]["ppo_v_tft"]``).

    Attributes:
        env_id: a registered multi-agent env id with discrete actions.
        agents: one entry per agent of the env: ``"ppo"`` (a learner) or the name of a fixed
            memory-one strategy (``tit_for_tat``, ``all_d``, ... :data:`STRATEGIES`; they play the
            iterated two-action matrix games only).
        num_opponents: instances of every agent but agent 0, each on ``num_envs /
            num_opponents`` envs (Pax's ``num_opps``).
        num_inner_steps: the env's ``num_inner_steps`` (rounds of the iterated games, steps of
            a CoinGame episode); 0 keeps the env's default.
        total_timesteps: env steps of training over all envs.
        eval_episodes: episodes of each evaluation (a multiple of ``num_opponents``).
        eval_max_steps: step cap of an evaluation (0: the env's ``max_steps_in_episode``, else 1000).
        eval_greedy: learners act greedily in evaluation (fixed agents act as they always do).
        num_envs: parallel envs.
        num_steps: steps per env per rollout.
        num_epochs, num_minibatches, learning_rate, anneal_lr, gamma, gae_lambda, clip_eps,
            clip_value, vf_coef, ent_coef, max_grad_norm, normalize_advantages, hidden_sizes,
            activation, recurrent, cell, rnn_hidden_size, recurrent_update: every learner's PPO
            settings, as in :class:`lamella.agents.ppo.PPOConfig` (``num_minibatches`` splits each
            instance's ``num_envs / num_opponents * num_steps`` steps, or with ``recurrent`` and
            ``recurrent_update="bptt"`` its ``num_envs / num_opponents`` envs; ``recurrent``
            gives PPO-memory; ``recurrent_update="stored_memory"`` updates it as Pax's
            ``PPO_memory`` does, each step from its stored memory, no gradient through time).
            Without ``recurrent``, ``cell``, ``rnn_hidden_size``, ``recurrent_update`` and
            ``post_core_layers`` are never read (set on the command line, they are refused).
        post_core_layers: a recurrent learner's actor and critic each have a dense layer after
            its core (the default); ``False``: the heads read the core's output, as Pax's
            ``PPO_memory`` (lamella-agents' ``PPOConfig.post_core_layers``).
        torso: every learner's torso: ``"mlp"`` (on the flat row) or ``"cnn"``: on an env whose
            dict observation holds an image view (IPD-in-the-Matrix), Pax's ``ipditm`` CNN
            (lamella-agents' :class:`~lamella.agents.networks.ViewCNN`: one 3 x 3 convolution of
            16 channels on the view, ReLU, flattened, the inventory joined after it), then an MLP
            of ``hidden_sizes`` (``()``: none, as Pax's) for actor and critic each, or the GRU
            core when ``recurrent``. Refused on an env without an image view.
    """

    env_id: str = "IteratedPrisonersDilemma-v0"
    agents: tuple[str, ...] = (LEARNER, "tit_for_tat")
    num_opponents: int = 1
    num_inner_steps: int = 0
    total_timesteps: int = 512_000
    eval_episodes: int = 8
    eval_greedy: bool = False
    num_envs: int = 32
    num_steps: int = 100
    learning_rate: float = 1e-2
    anneal_lr: bool = False
    gamma: float = 0.96
    hidden_sizes: tuple[int, ...] = (16,)
    activation: str = "tanh"
    recurrent: bool = False
    cell: str = "gru"
    rnn_hidden_size: int = 16
    recurrent_update: str = "bptt"
    post_core_layers: bool = True
    torso: str = "mlp"

    #: The algorithm's name in messages (``lamella train shaping``).
    algorithm = "shaping"

    def validate(self) -> None:
        """Raise :class:`~lamella.agents.config.ConfigError` naming the first inconsistent setting
        that needs no env (:func:`make_shaping_runner` checks the rest against the env)."""
        name = type(self).__name__
        _check_agents_not_text(self.agents, f"{name}.agents")
        # Types, NaN, discounts, step sizes, layer sizes (lamella-agents' rules by field name).
        check_numbers(self)
        for field in (
            "num_envs",
            "num_steps",
            "num_epochs",
            "num_minibatches",
            "eval_episodes",
            "num_opponents",
        ):
            if int(getattr(self, field)) < 1:
                raise ConfigError(f"{name}.{field} must be >= 1, got {getattr(self, field)}.")
        if self.num_inner_steps < 0:
            raise ConfigError(
                f"{name}.num_inner_steps must be >= 0 (0: the env's default), got {self.num_inner_steps}."
            )
        if self.num_envs % self.num_opponents:
            raise ConfigError(
                f"{name}: num_envs ({self.num_envs}) must be a multiple of num_opponents ({self.num_opponents}): "
                f"each opponent plays num_envs / num_opponents envs. Set num_envs="
                f"{_next_multiple(self.num_envs, self.num_opponents)} or a num_opponents that divides {self.num_envs}."
            )
        if self.eval_episodes % self.num_opponents:
            raise ConfigError(
                f"{name}: eval_episodes ({self.eval_episodes}) must be a multiple of num_opponents "
                f"({self.num_opponents}): each opponent plays eval_episodes / num_opponents episodes. Set "
                f"eval_episodes={_next_multiple(self.eval_episodes, self.num_opponents)}."
            )
        if self.num_iterations < 1:
            raise ConfigError(
                f"{name}.total_timesteps ({self.total_timesteps}) is less than one iteration "
                f"(num_envs * num_steps = {self.steps_per_iteration}); raise it."
            )
        if not self.agents:
            raise ConfigError(
                f"{name}.agents is empty; give one entry per agent, e.g. agents=ppo,tit_for_tat."
            )
        for entry in self.agents:
            if entry != LEARNER and entry.lower().replace("-", "_") not in STRATEGIES:
                raise ConfigError(
                    f"{name}.agents: unknown entry {entry!r}; each entry is {LEARNER!r} (a PPO learner) or a "
                    f"memory-one strategy: {', '.join(sorted(STRATEGIES))}."
                )
        if self.cell not in ("gru", "lstm"):
            raise ConfigError(f"{name}.cell must be 'gru' or 'lstm', got {self.cell!r}.")
        if self.recurrent_update not in RECURRENT_UPDATES:
            raise ConfigError(
                f"{name}.recurrent_update must be one of {RECURRENT_UPDATES}, got {self.recurrent_update!r}."
            )
        if self.torso not in TORSOS:
            raise ConfigError(f"{name}.torso must be one of {TORSOS}, got {self.torso!r}.")
        try:
            activation_by_name(self.activation)
        except (KeyError, ValueError) as error:
            raise ConfigError(str(error)) from None

    def unused_settings(self) -> dict[str, str]:
        """``{field: why it is never read}``: the recurrent core's settings without ``recurrent``
        (``lamella train shaping rnn_hidden_size=64`` is refused; a preset's value is no error)."""
        if self.recurrent:
            return {}
        return unused_settings_of(
            self,
            _RECURRENT_SETTINGS,
            "recurrent=False gives every learner a feed-forward network",
            "set recurrent=True",
        )


#: PPO's recurrent-core settings and the learners' update mode: never read without ``recurrent``.
_RECURRENT_SETTINGS = RECURRENT_CORE_SETTINGS | {"recurrent_update": "is how a recurrent learner is updated"}


def _check_agents_not_text(agents: Any, name: str) -> None:
    """Refuse one string where one entry per agent goes (each character would be an entry)."""
    if isinstance(agents, str):
        entries = tuple(entry.strip() for entry in agents.split(",") if entry.strip())
        raise ConfigError(
            f"{name} is the string {agents!r}; give one entry per agent as a tuple, e.g. "
            f"agents={entries!r} (a comma-separated string is the command line's form)."
        )


def _next_multiple(value: int, divisor: int) -> int:
    return -(-value // divisor) * divisor


class ShapingRunnerState(struct.PyTreeNode):
    """Everything one run carries between iterations (arrays only).

    ``train_states`` and ``memory`` hold one entry per agent, each with a leading axis of the
    agent's instances (1 for agent 0, ``num_opponents`` for the others); a fixed agent's entry is
    whatever its ``init`` returned (``()`` for the memory-one strategies).
    """

    train_states: tuple[Any, ...]
    env_state: Any
    obs: Any  # (num_envs, n, ...)
    memory: tuple[Any, ...]
    reset: jax.Array  # bool (num_envs,)
    key: jax.Array
    iteration: jax.Array  # int32 ()
    last_return: jax.Array  # float32 (n,): each agent's last reported episode return


class _Slot(NamedTuple):
    """One agent of the env: how it acts and learns, over a leading axis of its ``copies``
    (this device's instances: all of them, or its block when ``split``)."""

    copies: int
    learner: PPO | None
    agent: Agent | None  # a fixed agent (None for a learner)
    cooperation_table: jax.Array | None  # (5,) P(cooperate) by observation, a memory-one strategy
    split: bool = False  # several learning instances, split over the devices


def _is_learner(spec: AgentSpec) -> bool:
    return isinstance(spec, str) and spec == LEARNER


def _instances_split(index: int, spec: AgentSpec, config: ShapingConfig) -> bool:
    """On several devices, whether slot ``index``'s instances split over them (a learner with
    ``num_opponents > 1`` instances); the others are one learner over the split envs, or fixed."""
    return index > 0 and config.num_opponents > 1 and _is_learner(spec)


AgentSpec = str | Agent | Sequence[float] | np.ndarray


def _agent_spaces(env: Environment[Any, Any], params: Any) -> tuple[spaces.Box, list[spaces.Discrete]]:
    observation_space = env.observation_space(params)
    if not isinstance(observation_space, spaces.Box):
        raise ConfigError(
            f"shaping supports Box observations (one row per agent); this env's observation space is "
            f"{type(observation_space).__name__}."
        )
    one = spaces.Box(
        observation_space.low[0],
        observation_space.high[0],
        observation_space.shape[1:],
        observation_space.dtype,
    )
    action_space = env.action_space(params)
    assert isinstance(action_space, spaces.MultiDiscrete)  # check_multi_agent_env's
    nvec = np.asarray(action_space.nvec).reshape(-1)
    return one, [spaces.Discrete(int(k)) for k in nvec]


def _learner_config(config: ShapingConfig, copies: int, view: ViewLayout | None = None) -> PPOConfig:
    """The PPO settings of one instance of a learner that has ``copies`` instances (``view``: where
    the image view is in the flat row, for ``torso="cnn"``)."""
    num_envs = config.num_envs // copies
    return PPOConfig(
        torso="mlp" if view is None else "view_cnn",
        view_start=0 if view is None else view[0],
        view_shape=() if view is None else view[1],
        env_id=config.env_id,
        total_timesteps=config.num_iterations * num_envs * config.num_steps,
        eval_episodes=config.eval_episodes // copies,
        num_envs=num_envs,
        num_steps=config.num_steps,
        num_epochs=config.num_epochs,
        num_minibatches=config.num_minibatches,
        learning_rate=config.learning_rate,
        anneal_lr=config.anneal_lr,
        gamma=config.gamma,
        gae_lambda=config.gae_lambda,
        clip_eps=config.clip_eps,
        clip_value=config.clip_value,
        vf_coef=config.vf_coef,
        ent_coef=config.ent_coef,
        max_grad_norm=config.max_grad_norm,
        normalize_advantages=config.normalize_advantages,
        hidden_sizes=tuple(config.hidden_sizes),
        activation=config.activation,
        recurrent=config.recurrent,
        cell=config.cell,
        rnn_hidden_size=config.rnn_hidden_size,
        recurrent_update=config.recurrent_update,
        post_core_layers=config.post_core_layers,
    )


def _make_slot(
    index: int,
    spec: AgentSpec,
    config: ShapingConfig,
    observation_space: spaces.Box,
    action_space: spaces.Discrete,
    env_name: str,
    devices: DeviceAxis,
    view: ViewLayout | None = None,
) -> _Slot:
    copies = 1 if index == 0 else config.num_opponents
    if isinstance(spec, Agent):
        return _Slot(copies, None, spec, None)
    if _is_learner(spec):
        num_envs = config.num_envs // copies
        steps = num_envs * config.num_steps
        # BPTT minibatches are whole env sequences; otherwise (feed-forward, stored memory) steps.
        sequences = config.recurrent and config.recurrent_update == "bptt"
        if not sequences and steps % config.num_minibatches:
            raise ConfigError(
                f"ShapingConfig: agent {index} learns on {steps} steps per iteration (num_envs"
                f"{' / num_opponents' if copies > 1 else ''} * num_steps), which num_minibatches "
                f"({config.num_minibatches}) must divide; change num_minibatches, num_envs or num_steps."
            )
        if sequences and num_envs % config.num_minibatches:
            raise ConfigError(
                f"ShapingConfig: agent {index} is a recurrent learner on {num_envs} envs per instance, which "
                f"num_minibatches ({config.num_minibatches}) must divide (recurrent minibatches split envs)."
            )
        learner_config = _learner_config(config, copies, view)
        if _instances_split(index, spec, config) and devices.sharded:
            if copies % devices.size:
                raise ConfigError(
                    f"ShapingConfig: agent {index}'s num_opponents ({copies}) learning instances split over the "
                    f"devices: num_opponents must be a multiple of num_devices ({devices.size}). Set "
                    f"num_opponents={_next_multiple(copies, devices.size)}, num_opponents=1, or another num_devices."
                )
            learner = make_ppo(learner_config, observation_space, action_space)
            return _Slot(copies // devices.size, learner, None, None, split=True)
        if devices.sharded:  # one instance on every env: its envs split over the devices, as PPO's
            check_ppo_sizes(config, recurrent=sequences, num_devices=devices.size)
        learner = make_ppo(learner_config, observation_space, action_space, devices)
        return _Slot(copies, learner, None, None)
    try:
        table = strategy(spec)
        check_strategy_fits(observation_space, who=f"memory-one strategy ({spec!r}, agent {index})")
    except ValueError as error:
        raise ConfigError(
            f"{error} (env {env_name}; agents={','.join(map(str, config.agents))})"
            if isinstance(spec, str)
            else f"shaping: agents entry {index}: {error} Each entry is {LEARNER!r} (a learner), a strategy "
            "name, five cooperation probabilities or a lamella Agent (lamella.agents.protocol.Agent)."
        ) from None
    if action_space.n != 2:
        raise ConfigError(
            f"A memory-one strategy ({spec!r}, agent {index}) plays two actions (0 = cooperate, 1 = defect); "
            f"{env_name} gives agent {index} {action_space.n}. Use a learning agent ({LEARNER!r}) instead."
        )
    cooperation = jnp.asarray(table[_POLICY_TO_OBS])
    return _Slot(copies, None, make_memory_one_agent(spec), cooperation)


def _split(x: jax.Array, copies: int, axis: int = 0) -> jax.Array:
    """``(..., E, ...) -> (copies, ..., E / copies, ...)``: the instances' axis first."""
    shape = (*x.shape[:axis], copies, x.shape[axis] // copies, *x.shape[axis + 1 :])
    return jnp.moveaxis(x.reshape(shape), axis, 0)


def _merge(x: jax.Array, axis: int = 0) -> jax.Array:
    """The inverse of :func:`_split`."""
    x = jnp.moveaxis(x, 0, axis)
    return x.reshape((*x.shape[:axis], x.shape[axis] * x.shape[axis + 1], *x.shape[axis + 2 :]))


def _agent_rows(x: jax.Array, index: int, copies: int) -> jax.Array:
    """Agent ``index``'s rows of a time-major ``(T, E, n, ...)`` array as ``(copies, T, E / copies, ...)``."""
    return _split(x[:, :, index], copies, axis=1)


def make_shaping_runner(
    config: ShapingConfig,
    env: Environment[Any, Any] | None = None,
    env_params: Any = None,
    agents: Sequence[AgentSpec] | None = None,
    *,
    require_learner: bool = True,
) -> Runner:
    """A :class:`~lamella.agents.runner.Runner` of learners and fixed agents (see the module docs);
    it splits its envs over devices (``Runner.sharding``, see "Many devices" there).

    Args:
        config: the settings.
        env: a bare multi-agent env object (an ``AutoReset`` env is unwrapped). ``None``:
            ``lamella.envs.make(config.env_id)`` (with ``num_inner_steps`` when set).
        env_params: its params (default: the env's).
        agents: replaces ``config.agents``: one entry per agent, each ``"ppo"``, a strategy name,
            five cooperation probabilities ``(start, CC, CD, DC, DD)``, or any ``Agent`` (fixed:
            its ``policy`` takes a batch of that agent's observations).
        require_learner: refuse a runner whose agents are all fixed (nothing would learn). The
            meta runner's self-play (every role the meta-agent, whose parameters change only
            between outer episodes) turns it off.

    Raises:
        lamella.agents.config.ConfigError: an entry count that is not the env's agent count, a
            fixed strategy on a game it does not fit, an opponent count that does not divide the
            envs, or other inconsistent settings (``lamella train`` prints one line, exit 2).
    """
    check_config_type(config, ShapingConfig, "make_shaping_runner", algorithm="shaping")
    return _shaping_runner(config, env, env_params, agents, DeviceAxis(), require_learner)


def _shaping_runner(
    config: ShapingConfig,
    given_env: Environment[Any, Any] | None,
    given_params: Any,
    agents: Sequence[AgentSpec] | None,
    devices: DeviceAxis,
    require_learner: bool = True,
) -> Runner:
    """The shaping runner for one device's block of the envs (all of them on one device)."""
    config.validate()
    _check_agents_not_text(agents, "make_shaping_runner(agents=...)")
    env, env_params = given_env, given_params
    specs: list[AgentSpec] = list(config.agents if agents is None else agents)
    env_id = None
    with jax.ensure_compile_time_eval():
        if env is None:
            env_id = config.env_id
            overrides = {"num_inner_steps": config.num_inner_steps} if config.num_inner_steps else {}
            try:
                env, made_params = lamella.envs.make(config.env_id, autoreset=False, **overrides)
            except (KeyError, TypeError, ValueError) as error:
                raise ConfigError(str(error.args[0]) if error.args else str(error)) from None
            env_params = made_params if env_params is None else env_params
        else:
            lamella.envs.check_env_object(env, env_params, "make_shaping_runner")
            if env_params is None:
                env_params = env.default_params
        if isinstance(env, wrappers.AutoReset):
            env = env.env
        check_multi_agent_env(env, env_params, config.algorithm, env_id=env_id)
        # A dict observation (IPD-in-the-Matrix's view and inventory): one flat row per agent.
        env = flatten_agent_observations(env, env_params)
        env_name = str(env_id or getattr(env, "name", type(env).__name__))
        num_agents = int(env.num_agents)
        if len(specs) != num_agents:
            example = ",".join([LEARNER] * num_agents)
            raise ConfigError(
                f"shaping: agents names {len(specs)} agent(s) ({', '.join(map(_spec_name, specs))}) but {env_name} "
                f"has {num_agents}; give one entry per agent, e.g. agents={example}."
            )
        observation_space, action_spaces = _agent_spaces(env, env_params)
        # torso="cnn": where each learner's CNN finds the image view in the flat row.
        view = (
            view_layout(env, env_params, f"ShapingConfig.torso='cnn' (env {env_name})")
            if config.torso == "cnn" and any(_is_learner(spec) for spec in specs)
            else None
        )
        slots = [
            _make_slot(i, spec, config, observation_space, action_spaces[i], env_name, devices, view)
            for i, spec in enumerate(specs)
        ]
        two_actions = all(space.n == 2 for space in action_spaces)
        matrix_game = observation_space.shape == (len(watchers.STATE_NAMES),) and two_actions
        # The n-player tensor games: a one-hot over the 2**n joint actions and START.
        tensor_game = not matrix_game and two_actions and observation_space.shape == (2**num_agents + 1,)

    def probe_info(key: jax.Array) -> dict[str, Any]:
        _, probe_state = env.reset(key, env_params)
        return env.step(key, probe_state, jnp.zeros((num_agents,), jnp.int32), env_params)[5]

    # Which info the env reports (CoinGame's coin counts), from shapes only: nothing runs.
    info_shapes = jax.eval_shape(probe_info, jax.random.key(0))
    coin_game = "own_coins" in info_shapes and "other_coins" in info_shapes
    in_the_matrix = all(name in info_shapes for name in watchers.IN_THE_MATRIX_INFO)
    if require_learner and not any(slot.learner is not None for slot in slots):
        raise ConfigError(
            f"shaping: every agent is fixed ({', '.join(map(_spec_name, specs))}); nothing would learn. "
            f"Make at least one entry {LEARNER!r}."
        )
    info_keys = (
        ("returned_episode", "returned_episode_returns")
        + (("own_coins", "other_coins") if coin_game else ())
        + (watchers.IN_THE_MATRIX_INFO if in_the_matrix else ())
    )
    train_env = wrappers.EpisodeStatistics(wrappers.AutoReset(env))
    rollout = make_rollout(train_env, config.num_steps, config.num_envs, info_keys=info_keys, devices=devices)
    take, gather = devices.take, devices.gather

    def instance_keys(key: jax.Array, slot: _Slot) -> jax.Array:
        """One key per instance of ``slot`` on this device (its block of all instances' keys)."""
        if not (slot.split and devices.sharded):
            return hashed_keys(key, (slot.copies,))
        return hashed_keys(
            key, (slot.copies * devices.size,), block=(0, devices.start(slot.copies), slot.copies)
        )

    max_eval_steps = step_limit(config.eval_max_steps, env_params)

    def slot_agent(slot: _Slot) -> Agent:
        if slot.learner is not None:
            return slot.learner.agent
        assert slot.agent is not None
        return slot.agent

    def act(
        slot: _Slot, key: jax.Array, train_state: Any, obs: jax.Array, memory: Any, reset: jax.Array
    ) -> tuple[Any, PolicyStep]:
        """One instance's step on its envs, with what PPO's update needs."""
        if slot.learner is not None:
            learner = slot.learner
            policy = actor_critic_policy(
                learner.actor_critic,
                train_state.params,
                preprocess=lambda o: learner.normalize(train_state, o),
                # One instance over the split envs draws its block of the batch's actions.
                devices=None if slot.split else devices,
            )
            return policy(key, obs, memory, reset)
        fixed = slot_agent(slot)
        memory = reset_memory_where(fixed, reset, memory)
        action, _, memory = fixed.policy(key, train_state, obs, memory)
        zeros = jnp.zeros(reset.shape, jnp.float32)
        return memory, PolicyStep(action, action, zeros, zeros)

    def joint_policy(train_states: tuple[Any, ...]) -> Callable[..., tuple[Any, PolicyStep]]:
        def policy(
            key: jax.Array, obs: jax.Array, memory: tuple[Any, ...], reset: jax.Array
        ) -> tuple[Any, PolicyStep]:
            keys = hashed_keys(key, (num_agents,))
            memories, steps = [], []
            for i, slot in enumerate(slots):
                # A fixed agent acts on every env on every device; each keeps its block of actions.
                whole = gather if slot.learner is None else (lambda x: x)
                mem, out = jax.vmap(lambda *a, slot=slot: act(slot, *a))(
                    instance_keys(keys[i], slot),
                    train_states[i],
                    _split(whole(obs[:, i]), slot.copies),
                    memory[i],
                    _split(whole(reset), slot.copies),
                )
                memories.append(mem)
                out = jax.tree.map(_merge, out)
                steps.append(take(out) if slot.learner is None else out)
            stack = lambda *xs: jnp.stack(xs, axis=1)  # noqa: E731
            joint = PolicyStep(
                stack(*[s.action.astype(jnp.int32) for s in steps]),
                stack(*[s.raw_action.astype(jnp.int32) for s in steps]),
                stack(*[s.log_prob for s in steps]),
                stack(*[s.value for s in steps]),
            )
            return tuple(memories), joint

        return policy

    def init(key: jax.Array) -> ShapingRunnerState:
        key, key_env, key_agents = jax.random.split(key, 3)
        start = rollout.init(key_env, env_params)
        agent_keys = jax.random.split(key_agents, num_agents)
        train_states, memories = [], []
        for i, slot in enumerate(slots):
            obs_i = _split(
                start.obs[:, i] if slot.learner is not None else gather(start.obs[:, i]), slot.copies
            )
            keys_i = (
                take(jax.random.split(agent_keys[i], slot.copies * devices.size))
                if slot.split
                else jax.random.split(agent_keys[i], slot.copies)
            )
            train_state, memory = jax.vmap(slot_agent(slot).init)(keys_i, obs_i)
            train_states.append(train_state)
            memories.append(memory)
        return ShapingRunnerState(
            train_states=tuple(train_states),
            env_state=start.env_state,
            obs=start.obs,
            memory=tuple(memories),
            reset=start.reset,
            key=key,
            iteration=jnp.zeros((), jnp.int32),
            last_return=jnp.zeros((num_agents,), jnp.float32),
        )

    def learner_update(
        i: int, slot: _Slot, transitions: Transition, last_memory: Any, train_state: Any, key: jax.Array
    ) -> tuple[Any, dict[str, jax.Array]]:
        assert slot.learner is not None
        c = slot.copies
        rows = lambda x: _agent_rows(x, i, c)  # noqa: E731
        mine = Transition(
            obs=rows(transitions.obs),
            action=rows(transitions.action),
            raw_action=rows(transitions.raw_action),
            log_prob=rows(transitions.log_prob),
            value=rows(transitions.value),
            reward=rows(transitions.reward),
            terminated=rows(transitions.terminated),
            truncated=rows(transitions.truncated),
            final_obs=rows(transitions.final_obs),
            reset=_split(transitions.reset, c, axis=1),
            memory=jax.tree.map(lambda m: jnp.moveaxis(m, 1, 0), transitions.memory[i]),
            info={},
        )
        update = slot.learner.agent.update
        train_state, _, metrics = jax.vmap(lambda t, ts, m: update(t, ts, m))(
            Trajectory(mine, last_memory, instance_keys(key, slot)), train_state, last_memory
        )
        # Split instances: the mean over every device's equal block of them.
        reduce = devices.mean if slot.split else (lambda x: x)
        return train_state, {f"learner_{i}_{name}": reduce(value.mean()) for name, value in metrics.items()}

    def cooperation_tables(train_states: tuple[Any, ...], transitions: Transition) -> jax.Array:
        """``(n, 5)``: each agent's P(cooperate) per state, from its policy where it is a function
        of the state (a feed-forward learner, a memory-one strategy), else the rollout's
        frequencies (a recurrent learner: what it did there depends on its memory too)."""
        probe = jnp.eye(len(watchers.STATE_NAMES), dtype=jnp.float32)
        empirical = watchers.empirical_cooperation(transitions.obs, transitions.action)
        rows = []
        for i, slot in enumerate(slots):
            if slot.learner is not None and not slot.learner.actor_critic.recurrent:
                learner = slot.learner

                def probs(train_state: Any, learner: PPO = learner) -> jax.Array:
                    reset = jnp.ones((probe.shape[0],), bool)
                    obs_in = learner.normalize(train_state, probe)
                    _, dist, _ = learner.actor_critic.step(train_state.params, (), obs_in, reset)
                    return jnp.exp(dist.log_prob(jnp.full((probe.shape[0],), watchers.COOPERATE, jnp.int32)))

                table = jax.vmap(probs)(train_states[i]).mean(0)
                rows.append(devices.mean(table) if slot.split else table)
            elif slot.cooperation_table is not None:
                rows.append(slot.cooperation_table)
            else:
                rows.append(empirical[i])
        return jnp.stack(rows)

    def step(state: ShapingRunnerState) -> tuple[ShapingRunnerState, dict[str, jax.Array]]:
        key, key_rollout, key_update = hashed_keys(state.key, (3,))
        start = RolloutState(state.env_state, state.obs, state.memory, state.reset)
        end, transitions = rollout.collect(start, joint_policy(state.train_states), key_rollout, env_params)
        update_keys = hashed_keys(key_update, (num_agents,))
        train_states = list(state.train_states)
        metrics: dict[str, jax.Array] = {}
        for i, slot in enumerate(slots):
            if slot.learner is None:
                continue
            train_states[i], learner_metrics = learner_update(
                i, slot, transitions, end.memory[i], state.train_states[i], update_keys[i]
            )
            metrics.update(learner_metrics)
        ended = transitions.info["returned_episode"].astype(jnp.float32)  # (T, E)
        returns = transitions.info["returned_episode_returns"]  # (T, E, n)
        num_ended, sum_returns = devices.sum((ended.sum(), (returns * ended[..., None]).sum((0, 1))))
        agent_return = sum_returns / jnp.maximum(num_ended, 1.0)
        agent_return = jnp.where(num_ended > 0, agent_return, state.last_return).astype(jnp.float32)
        metrics.update(
            {
                "episode_return": agent_return[0],
                "return": agent_return,
                "reward": devices.mean(transitions.reward.mean((0, 1))).astype(jnp.float32),
                "episodes": num_ended,
            }
        )
        # The watchers read every env's steps (gathered: small one-hot and count arrays).
        if matrix_game:
            every_env = transitions.replace(
                obs=gather(transitions.obs, axis=1), action=gather(transitions.action, axis=1)
            )
            cooperation = cooperation_tables(state.train_states, every_env)
            metrics.update(watchers.matrix_game_metrics(cooperation, watchers.state_visits(every_env.obs)))
        if tensor_game:
            metrics["cooperation_rate"] = watchers.cooperation_rate(gather(transitions.action, axis=1))
        if coin_game:
            coins = {name: transitions.info[name] for name in ("own_coins", "other_coins")}
            metrics.update(watchers.coin_game_metrics(gather(coins, axis=1)))
        if in_the_matrix:
            storm = {name: transitions.info[name] for name in watchers.IN_THE_MATRIX_INFO}
            metrics.update(watchers.in_the_matrix_metrics(gather(storm, axis=1)))
        new_state = ShapingRunnerState(
            train_states=tuple(train_states),
            env_state=end.env_state,
            obs=end.obs,
            memory=end.memory,
            reset=end.reset,
            key=key,
            iteration=state.iteration + 1,
            last_return=agent_return,
        )
        return new_state, metrics

    def eval_policy(
        key: jax.Array,
        train_states: tuple[Any, ...],
        obs: jax.Array,
        memory: tuple[Any, ...],
        eval: bool = False,
    ) -> tuple[jax.Array, tuple[Any, ...], tuple[Any, ...]]:
        keys = hashed_keys(key, (num_agents,))
        actions, memories = [], []
        for i, slot in enumerate(slots):
            greedy = eval and slot.learner is not None
            policy = slot_agent(slot).policy
            action, _, mem = jax.vmap(
                lambda k, ts, o, m, policy=policy, greedy=greedy: policy(k, ts, o, m, eval=greedy)
            )(
                hashed_keys(keys[i], (slot.copies,)),
                train_states[i],
                _split(obs[:, i], slot.copies),
                memory[i],
            )
            actions.append(_merge(action).astype(jnp.int32))
            memories.append(mem)
        return jnp.stack(actions, axis=1), train_states, tuple(memories)

    joint_eval_agent = Agent(
        init=lambda key, obs=None: ((), ()),
        policy=eval_policy,
        update=lambda trajectory, train_state, memory: (train_state, memory, {}),
        reset_memory=lambda memory, eval=False: memory,
    )

    def evaluate(state: ShapingRunnerState, key: jax.Array) -> dict[str, jax.Array]:
        memory = tuple(
            jax.vmap(functools.partial(slot_agent(slot).reset_memory, eval=True), axis_size=slot.copies)(
                state.memory[i]
            )
            for i, slot in enumerate(slots)
        )
        out = evaluate_agent(
            joint_eval_agent,
            state.train_states,
            env,
            env_params,
            key,
            config.eval_episodes,
            max_eval_steps,
            memory,
            greedy=config.eval_greedy,
            per_agent=True,
        )
        return {
            "episode_return": out["agent_return"][:, 0],
            "episode_length": out["episode_length"],
            "return": out["agent_return"],
        }

    def render_episode(state: ShapingRunnerState, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        # A fresh episode on a training batch of envs (each slot's instances act on their share
        # of it, as in training), acting as evaluate acts; the first env, where every slot's
        # first instance acts, is drawn. The memory is each agent's for a new training episode:
        # the learners' fresh, a fixed agent's as its reset_memory leaves it (the meta-agent of
        # lamella.marl.shaping.meta keeps its recurrent state across inner episodes).
        memory = tuple(
            jax.vmap(slot_agent(slot).reset_memory, axis_size=slot.copies)(state.memory[i])
            for i, slot in enumerate(slots)
        )
        return episode_frames(
            joint_eval_agent,
            state.train_states,
            env,
            env_params,
            key,
            max_eval_steps,
            memory,
            config.eval_greedy,
            num_envs=devices.local(config.num_envs, "num_envs"),  # this device's block of them
        )

    per_agent = (
        "return",
        "reward",
        *watchers.metric_names(matrix_game, coin_game, in_the_matrix, tensor_game),
    )
    return Runner(
        init=init,
        step=step,
        evaluate=evaluate,
        render_episode=render_episode,
        steps_per_iteration=config.steps_per_iteration,
        num_iterations=config.num_iterations,
        metric_axes={name: ("agent",) for name in per_agent},
        sharding=runner_sharding(
            devices,
            "num_envs",
            config.num_envs,
            lambda axis: _shaping_runner(config, given_env, given_params, agents, axis, require_learner),
            functools.partial(
                _shaping_state_axes, layout=[_device_layout(i, s, config) for i, s in enumerate(specs)]
            ),
        ),
    )


def _device_layout(index: int, spec: AgentSpec, config: ShapingConfig) -> str:
    """How slot ``index`` runs on several devices: ``"instances"`` (its learning instances split),
    ``"envs"`` (one learner over the split envs) or ``"fixed"`` (on every env on every device)."""
    if _instances_split(index, spec, config):
        return "instances"
    return "envs" if _is_learner(spec) else "fixed"


def _shaping_state_axes(state: ShapingRunnerState, layout: Sequence[str]) -> ShapingRunnerState:
    """The devices axis of each part of the state (a prefix tree; ``None``: replicated): the envs
    (axis 0), each slot's train states and memory by its ``layout`` (:func:`_device_layout`):
    split instances on axis 0; one learner's parameters replicated and its memory ``(1,
    num_envs, ...)`` on axis 1; a fixed agent's state and memory replicated."""
    memory_axis = {"instances": 0, "envs": 1, "fixed": None}
    return ShapingRunnerState(
        train_states=tuple(0 if kind == "instances" else None for kind in layout),  # type: ignore[arg-type]
        env_state=0,
        obs=0,
        memory=tuple(memory_axis[kind] for kind in layout),  # type: ignore[arg-type]
        reset=0,  # type: ignore[arg-type]
        key=None,  # type: ignore[arg-type]
        iteration=None,  # type: ignore[arg-type]
        last_return=None,  # type: ignore[arg-type]
    )


def _spec_name(spec: AgentSpec) -> str:
    if isinstance(spec, str):
        return spec
    if isinstance(spec, Agent):
        return "an Agent"
    return "a memory-one strategy"
