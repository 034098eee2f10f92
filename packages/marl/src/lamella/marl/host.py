"""IPPO and MAPPO (feed-forward or recurrent, discrete or continuous actions) on PettingZoo
parallel envs: the env steps on the host, the policy and the update are jitted.

For multi-agent envs that are not JAX (mpe2, anything with the ``pettingzoo.ParallelEnv`` API):
``num_envs`` env objects step one by one in Python, as lamella-agents' off-policy host loop
(:mod:`lamella.agents.offpolicy.host`) steps gymnasium vector envs, while acting and learning are
the compiled runner's own pieces (:func:`~lamella.marl.ppo.make_multi_agent_ppo`: the network of
the config's class, its collector policy, per-agent truncation-correct GAE and the PPO update)::

    import mpe2.simple_spread_v3 as simple_spread
    result = train_host(MAPPOConfig(total_timesteps=100_000), lambda: simple_spread.parallel_env())

The config's class picks the algorithm, as for the compiled runners: :class:`~lamella.marl.ppo.
IPPOConfig`, :class:`~lamella.marl.ppo.MAPPOConfig` (the critic reads PettingZoo's global state,
``env.state()``), :class:`~lamella.marl.ppo.RecIPPOConfig` or :class:`~lamella.marl.ppo.
RecMAPPOConfig` (one GRU state per agent per env, carried across rollouts, zeroed where an
episode starts).

What the host side does, per env:

* **Agents and spaces.** ``env.possible_agents`` in order are agents ``0..n-1``. Each agent's
  observation (a ``Box``, or a ``Dict`` with ``"observation"`` and ``"action_mask"``) is
  flattened to float32 and zero-padded to the longest agent's size.
* **Discrete actions** (every agent's space a ``Discrete``): agents with fewer actions get the
  extra ones masked out. Action masks come from the observation's ``"action_mask"`` or
  ``info[agent]["action_mask"]``, else all legal.
* **Continuous actions** (every agent's space a 1-D ``Box``): the JAX runners' Gaussian head
  (``continuous_action``: tanh-squashed into the bounds or clipped) over ``D`` entries, ``D`` the
  largest agent's; agent ``i`` gets its own first ``D_i`` entries (as lamella's MPE pads its
  continuous actions), clipped to its Box and cast to its dtype. Every entry must have the same
  bounds for every agent that has it, finite for tanh; the rollout stores the raw Gaussian
  sample, so the update recomputes the log-probabilities the loop acted with.
* **Global state** (MAPPO): ``env.state()`` flattened to float32, read after every reset and
  step; the final observation of an episode holds the state before the env is reset.
* **Episode ends.** An episode ends when every agent is terminated or truncated (PettingZoo then
  has no live agents); the transition keeps the final observation (a truncated episode
  bootstraps from it, a terminated one from 0) and the env is reset. An agent that leaves before
  the others gets zero observations and rewards until the episode ends, and its own
  ``terminated`` / ``truncated`` flag from the step it left.

The result holds the train state, the update's statistics, the evaluations (``eval_episodes``
episodes each, on separate env objects, sampled or greedy as ``eval_greedy`` says, each from
fresh memory) and, with ``out_dir``, a run log (``metrics.json`` / ``metrics.csv``, the
marl-eval layout of the driver's logs, team and per-agent returns) that ``lamella eval`` reads.
The compiled functions are cached by config and sizes, so runs of several seeds compile once.
With ``num_devices``, each update's envs are split over that many devices (``jax.shard_map``
with the JAX runners' per-device update; the result equals one device's), while the envs step
on the host and the policy acts on the first device.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from lamella.agents import devices as devices_lib
from lamella.agents.config import ConfigError, check_config_type
from lamella.agents.devices import MESH_AXIS, BatchSharding, DeviceAxis
from lamella.agents.ppo_update import check_ppo_sizes
from lamella.agents.protocol import Agent
from lamella.agents.rollout import Transition, actor_critic_policy
from lamella.agents.runlog import RunLog, refuse_existing_run_log
from lamella.marl.ppo import IPPOConfig, Trajectory, make_multi_agent_ppo

__all__ = ["HostIPPOResult", "HostResult", "ParallelEnvBatch", "train_host", "train_ippo_host"]


@dataclasses.dataclass
class HostResult:
    """What :func:`train_host` did.

    Attributes:
        train_state: the final train state.
        env_steps: env steps taken over all envs.
        eval_steps: the env step of each evaluation.
        eval_returns: each evaluation's mean team return (sum over agents).
        eval_agent_returns: each evaluation's mean return per agent.
        train_returns: mean team return of the training episodes that ended in each iteration
            (NaN where none ended).
        train_metrics: the PPO update's statistics of each iteration (``loss``, ``entropy``,
            ``approx_kl``, ``first_minibatch_kl``, ...), as floats.
        metrics_path: ``metrics.json`` of the run log (None without ``out_dir``).
        seconds: wall time of the loop.
    """

    train_state: Any
    env_steps: int
    eval_steps: list[int]
    eval_returns: list[float]
    eval_agent_returns: list[list[float]]
    train_returns: list[float]
    train_metrics: list[dict[str, float]]
    metrics_path: str | None
    seconds: float


#: The result's name before MAPPO and the recurrent runners ran on the host loop.
HostIPPOResult = HostResult


def _space_size(space: Any) -> int:
    shape = getattr(space, "shape", None)
    if shape is None:
        raise ConfigError(f"train_host: observation space {space!r} has no shape (Box observations only).")
    return int(np.prod(shape))


class ParallelEnvBatch:
    """``num_envs`` PettingZoo parallel envs as one batch of lamella-style multi-agent arrays.

    ``reset(seed) -> obs`` and ``step(actions) -> (obs, reward, terminated, truncated,
    final_obs, done)``, where ``obs`` / ``final_obs`` are dicts ``{"obs": float32 (num_envs, n,
    L), "action_mask": bool (num_envs, n, A)}`` (no ``"action_mask"`` for continuous actions;
    with ``global_state``, also ``"global_state": float32 (num_envs, G)``, each env's
    ``env.state()``), ``actions`` int ``(num_envs, n)`` (continuous: float ``(num_envs, n, D)``,
    ``D = action_size``, bounds ``action_low`` / ``action_high`` ``(D,)``), reward and flags ``(num_envs, n)`` and ``done`` bool ``(num_envs,)`` (the env was reset
    after this step; ``obs`` is then the new episode's first observation, ``final_obs`` the old
    one's last).

    Args:
        envs: the env objects (``pettingzoo.ParallelEnv``), all of the same game.
        global_state: add each env's ``env.state()`` (MAPPO's centralised critic reads it).
        algorithm: the algorithm's name in messages.
    """

    def __init__(self, envs: Sequence[Any], global_state: bool = False, algorithm: str = "ippo"):
        if not envs:
            raise ConfigError("train_host needs at least one env (num_envs >= 1).")
        self.envs = list(envs)
        self.global_state = bool(global_state)
        self.algorithm = algorithm
        first = self.envs[0]
        self.agents: list[str] = list(first.possible_agents)
        self.num_agents = len(self.agents)
        if self.num_agents < 2:
            raise ConfigError(
                f"train_host trains multi-agent envs; {type(first).__name__} has "
                f"{self.num_agents} agent(s). Use lamella-agents' single-agent runners."
            )
        sizes = []
        action_spaces = [first.action_space(agent) for agent in self.agents]
        for agent in self.agents:
            obs_space = first.observation_space(agent)
            if hasattr(obs_space, "spaces") and "observation" in getattr(obs_space, "spaces", {}):
                obs_space = obs_space["observation"]
            sizes.append(_space_size(obs_space))
        self.obs_size = max(sizes)
        discrete = [hasattr(space, "n") for space in action_spaces]
        for agent, space, is_discrete in zip(self.agents, action_spaces, discrete):
            if not is_discrete and not all(hasattr(space, a) for a in ("shape", "low", "high")):
                raise ConfigError(
                    f"train_host takes Discrete or Box actions; agent {agent!r} of {type(first).__name__} "
                    f"has {space!r}. Wrap the env so each agent's action space is a gymnasium Discrete "
                    "or a 1-D Box."
                )
        #: Continuous actions (every agent's action space a gymnasium ``Box``).
        self.continuous = not any(discrete)
        if self.continuous:
            self._init_box(type(first).__name__, action_spaces)
            self.num_actions = 0
            self.agent_actions = np.zeros((self.num_agents,), int)
        else:
            if not all(discrete):
                raise ConfigError(
                    f"train_host takes either discrete actions (gymnasium Discrete) for every agent or "
                    f"continuous ones (gymnasium Box) for every agent; {type(first).__name__}'s agents mix "
                    f"them ({dict(zip(self.agents, action_spaces))}). Wrap the env so all agents' action "
                    "spaces are of one kind."
                )
            actions = []
            for agent, action_space in zip(self.agents, action_spaces):
                if int(getattr(action_space, "start", 0)) != 0:
                    raise ConfigError(
                        f"Discrete actions must start at 0; agent {agent!r}'s start at {action_space.start}."
                    )
                actions.append(int(action_space.n))
            self.num_actions = max(actions)
            self.agent_actions = np.asarray(actions)
            self.action_size = 0
            self.agent_action_sizes = np.zeros((self.num_agents,), int)
            self.action_low = self.action_high = np.zeros((0,), np.float64)
        self._left: list[dict[int, tuple[bool, bool]]] = [{} for _ in self.envs]

    def _init_box(self, name: str, action_spaces: Sequence[Any]) -> None:
        """Continuous actions: each agent's 1-D ``Box`` of ``D_i`` entries; the batch's actions are
        ``(num_envs, n, D)`` with ``D = max D_i`` and one bound per entry shared by every agent
        that has it (as lamella's MPE pads its continuous actions to the largest agent's)."""
        low = np.full((0,), np.nan)
        high = np.full((0,), np.nan)
        action_sizes = []
        for agent, space in zip(self.agents, action_spaces):
            shape = tuple(space.shape)
            if len(shape) != 1:
                raise ConfigError(
                    f"train_host takes continuous actions as a 1-D Box per agent; agent {agent!r} of {name} "
                    f"has a Box of shape {tuple(shape)}. Flatten the actions in a wrapper."
                )
            agent_low = np.asarray(space.low, np.float64).reshape(-1)
            agent_high = np.asarray(space.high, np.float64).reshape(-1)
            size = agent_low.size
            common = min(size, low.size)
            if not (
                np.array_equal(agent_low[:common], low[:common])
                and np.array_equal(agent_high[:common], high[:common])
            ):
                raise ConfigError(
                    f"train_host needs the same bounds on each action entry for every agent (one Gaussian "
                    f"head for all agents); agent {agent!r} of {name} has low {agent_low.tolist()}, high "
                    f"{agent_high.tolist()} where an earlier agent has low {low[:common].tolist()}, high "
                    f"{high[:common].tolist()}. Rescale the actions in a wrapper so the agents' Boxes agree "
                    "(entries beyond an agent's own are padding)."
                )
            if size > low.size:
                low = np.concatenate([low, agent_low[low.size :]])
                high = np.concatenate([high, agent_high[high.size :]])
            action_sizes.append(size)
        #: Entries of each agent's action (``D_i``) and of the batch's (``D``, the largest).
        self.agent_action_sizes = np.asarray(action_sizes)
        self.action_size = int(low.size)
        #: Bounds of each of the ``D`` entries (every agent's that has the entry).
        self.action_low, self.action_high = low, high
        self._action_dtypes = [np.dtype(getattr(space, "dtype", np.float32)) for space in action_spaces]

    def _agent_action(self, actions: np.ndarray, e: int, i: int) -> Any:
        """Agent ``i``'s action in env ``e``: its ``D_i`` entries, clipped to its Box (a guard
        against rounding: the policy already maps into the bounds), in its dtype; an int for
        discrete actions."""
        if not self.continuous:
            return int(actions[e, i])
        size = int(self.agent_action_sizes[i])
        value = np.clip(actions[e, i, :size], self.action_low[:size], self.action_high[:size])
        return value.astype(self._action_dtypes[i])

    def _state(self, env: Any) -> np.ndarray:
        """``env.state()`` as float32 ``(G,)``; an env without one is a :class:`ConfigError`."""
        try:
            state = env.state()
        except NotImplementedError:
            raise ConfigError(
                f"{self.algorithm}'s centralised critic reads the env's global state, env.state(), which "
                f"{type(env).__name__} does not implement. Use IPPOConfig (or RecIPPOConfig): independent "
                "critics on each agent's observation."
            ) from None
        return np.asarray(state, np.float32).reshape(-1)

    def _pack(self, env: Any, obs: dict[str, Any], infos: dict[str, Any]) -> dict[str, np.ndarray]:
        """One env's observation dict as arrays ``(n, L)``, ``(n, A)`` (and ``(G,)``); absent
        agents: zeros."""
        out = np.zeros((self.num_agents, self.obs_size), np.float32)
        mask = np.arange(self.num_actions)[None, :] < self.agent_actions[:, None]
        for i, agent in enumerate(self.agents):
            if agent not in obs:
                continue
            value = obs[agent]
            agent_mask = None
            if isinstance(value, dict):
                agent_mask = value.get("action_mask")
                value = value["observation"]
            flat = np.asarray(value, np.float32).reshape(-1)
            out[i, : flat.size] = flat
            info = infos.get(agent, {}) if isinstance(infos, dict) else {}
            if agent_mask is None and isinstance(info, dict):
                agent_mask = info.get("action_mask")
            if agent_mask is not None and not self.continuous:
                legal = np.asarray(agent_mask, bool).reshape(-1)
                mask[i, : legal.size] = legal
        packed: dict[str, np.ndarray] = {"obs": out}
        if not self.continuous:  # as MultiAgentObservation: no mask entry for continuous actions
            packed["action_mask"] = mask
        if self.global_state:
            packed["global_state"] = self._state(env)
        return packed

    @staticmethod
    def _stack(items: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        return {key: np.stack([item[key] for item in items]) for key in items[0]}

    def reset(self, seed: int) -> dict[str, np.ndarray]:
        """Reset every env (env ``i`` with ``seed + i``); the batch's first observations."""
        self._left = [{} for _ in self.envs]
        packed = []
        for i, env in enumerate(self.envs):
            obs, infos = env.reset(seed=seed + i)
            packed.append(self._pack(env, obs, infos))
        return self._stack(packed)

    def step(self, actions: np.ndarray) -> tuple[Any, ...]:
        num_envs, n = len(self.envs), self.num_agents
        reward = np.zeros((num_envs, n), np.float32)
        terminated = np.zeros((num_envs, n), bool)
        truncated = np.zeros((num_envs, n), bool)
        done = np.zeros((num_envs,), bool)
        finals, nexts = [], []
        for e, env in enumerate(self.envs):
            live = set(env.agents)
            obs, rewards, terms, truncs, infos = env.step(
                {
                    agent: self._agent_action(actions, e, i)
                    for i, agent in enumerate(self.agents)
                    if agent in live
                }
            )
            for i, agent in enumerate(self.agents):
                if agent in live:
                    reward[e, i] = float(rewards.get(agent, 0.0))
                    terminated[e, i] = bool(terms.get(agent, False))
                    truncated[e, i] = bool(truncs.get(agent, False))
                    if agent not in env.agents:  # it left: keep its flags until the episode ends
                        self._left[e][i] = (terminated[e, i], truncated[e, i])
                else:
                    terminated[e, i], truncated[e, i] = self._left[e].get(i, (True, False))
            packed = self._pack(env, obs, infos)
            finals.append(packed)
            if not env.agents:
                done[e] = True
                self._left[e] = {}
                obs, infos = env.reset()
                packed = self._pack(env, obs, infos)
            nexts.append(packed)
        return self._stack(nexts), reward, terminated, truncated, self._stack(finals), done


class _Compiled(NamedTuple):
    """The jitted pieces of one config (see :func:`_compiled`)."""

    agent: Agent
    init: Callable[..., Any]
    initial_memory: Callable[[int], Any]
    act: Callable[..., Any]
    act_eval: Callable[..., Any]
    update: Callable[..., Any]


def _sharded_update(
    config: IPPOConfig,
    num_agents: int,
    num_actions: int,
    action_bounds: tuple[tuple[float, ...], tuple[float, ...]],
    num_devices: int,
) -> Callable[..., Any]:
    """``update(train_state, trajectory) -> (train_state, metrics)`` with the rollout's envs split
    over ``num_devices`` devices (``jax.shard_map``, the JAX runners' per-device update): each
    device takes its block of envs (axis 1 of the transitions, axis 0 of the memory), computes
    its equal share of every minibatch, and the gradients, advantage and value-target statistics
    and metrics are reduced over the devices, so the result equals one device's. The train state
    comes back on the first device, where acting and evaluation run."""
    axis = DeviceAxis(MESH_AXIS, num_devices)
    per_device, _ = make_multi_agent_ppo(config, num_agents, num_actions, action_bounds, axis)
    mesh = devices_lib.make_mesh(num_devices)
    whole, envs, memory = PartitionSpec(), PartitionSpec(None, MESH_AXIS), PartitionSpec(MESH_AXIS)

    def block_update(train_state: Any, trajectory: Trajectory) -> tuple[Any, dict[str, jax.Array]]:
        train_state, _, metrics = per_device.update(trajectory, train_state, trajectory.last_memory)
        return train_state, metrics

    specs: Any = Trajectory(envs, whole, memory)  # type: ignore[arg-type]  # a prefix of the trajectory's tree
    mapped = jax.jit(
        jax.shard_map(
            block_update, mesh=mesh, in_specs=(whole, specs), out_specs=(whole, whole), check_vma=False
        )
    )
    first = mesh.devices.flat[0]

    def update(train_state: Any, trajectory: Trajectory) -> tuple[Any, dict[str, jax.Array]]:
        train_state = jax.device_put(train_state, NamedSharding(mesh, whole))
        trajectory = Trajectory(
            jax.device_put(trajectory.transitions, NamedSharding(mesh, envs)),
            jax.device_put(trajectory.key, NamedSharding(mesh, whole)),
            jax.device_put(trajectory.last_memory, NamedSharding(mesh, memory)),
        )
        train_state, metrics = mapped(train_state, trajectory)
        return jax.device_put(train_state, first), metrics

    return update


@functools.lru_cache(maxsize=8)
def _compiled(
    config: IPPOConfig,
    num_agents: int,
    num_actions: int,
    action_bounds: tuple[tuple[float, ...], tuple[float, ...]] = ((), ()),
    num_devices: int = 1,
) -> _Compiled:
    """The agent of ``config`` for ``num_agents`` agents (``num_actions`` discrete actions, or
    continuous ones in ``action_bounds``) and its jitted acting and update functions (the update
    split over ``num_devices`` devices), cached so that runs of the same config (several seeds)
    compile once."""
    agent, actor_critic = make_multi_agent_ppo(config, num_agents, num_actions, action_bounds)

    @jax.jit
    def act(params: Any, key: jax.Array, obs: Any, memory: Any, reset: jax.Array) -> Any:
        # A feed-forward critic's values are computed by the update, for the whole batch at once.
        policy = actor_critic_policy(actor_critic, params, record_value=actor_critic.recurrent)
        return policy(key, obs, memory, reset)

    @jax.jit
    def act_eval(params: Any, key: jax.Array, obs: Any, memory: Any, reset: jax.Array) -> Any:
        memory, dist, _ = actor_critic.step(params, memory, obs, reset)
        raw = dist.mode() if config.eval_greedy else dist.sample(key)
        return memory, dist.to_action(raw)

    @jax.jit
    def update(train_state: Any, trajectory: Trajectory) -> tuple[Any, dict[str, jax.Array]]:
        train_state, _, metrics = agent.update(trajectory, train_state, trajectory.last_memory)
        return train_state, metrics

    if num_devices > 1:
        sharded = _sharded_update(config, num_agents, num_actions, action_bounds, num_devices)
        return _Compiled(agent, jax.jit(agent.init), actor_critic.initial_memory, act, act_eval, sharded)
    return _Compiled(agent, jax.jit(agent.init), actor_critic.initial_memory, act, act_eval, update)


def _check_continuous(envs: ParallelEnvBatch, config: IPPOConfig) -> None:
    """Continuous actions need bounds the config's ``continuous_action`` can map into."""
    if not envs.continuous or config.continuous_action != "tanh":
        return
    if not (np.all(np.isfinite(envs.action_low)) and np.all(np.isfinite(envs.action_high))):
        raise ConfigError(
            f"{type(envs.envs[0]).__name__}'s action bounds are not finite (low "
            f"{envs.action_low.tolist()}, high {envs.action_high.tolist()}), so "
            "continuous_action='tanh' cannot squash into them; set continuous_action='clip' in the "
            "config (or bound the Box in a wrapper)."
        )


def _refuse_unused_settings(config: IPPOConfig) -> None:
    """Raise :class:`ConfigError` for a setting of the compiled runners that the host loop would
    ignore: the envs come from ``make_env``, and an evaluation plays whole episodes."""
    if config.env_kwargs:
        raise ConfigError(
            f"train_host: env_kwargs={tuple(config.env_kwargs)} are keywords of lamella.envs.make, and "
            "train_host makes its envs with make_env; pass them there (make_env=lambda: "
            "simple_speaker_listener_v4.parallel_env(continuous_actions=True)) and leave env_kwargs empty."
        )
    if config.eval_info:
        raise ConfigError(
            f"train_host: eval_info={tuple(config.eval_info)} is read from a lamella env's info by the "
            "compiled runners (make_ippo_runner, ...); the host loop logs returns only. Leave eval_info empty."
        )
    if int(config.eval_max_steps) != 0:
        raise ConfigError(
            f"train_host: eval_max_steps={config.eval_max_steps} caps the compiled runners' evaluations; "
            "the host loop plays each evaluation episode to its end (the env's own limit). Set "
            "eval_max_steps=0."
        )


_MAKE_ENV = "make_env must be a function that makes one PettingZoo parallel env (such as mpe2's simple_spread_v3.parallel_env)"


def _check_make_env(make_env: Any) -> None:
    """Raise :class:`ConfigError` naming the fix unless ``make_env`` is callable and not an env."""
    if isinstance(make_env, str):
        raise ConfigError(
            f"train_host: {_MAKE_ENV}, got the str {make_env!r}. A lamella env id trains compiled: "
            f"lamella.marl.make_ippo_runner(IPPOConfig(env_id={make_env!r})), or lamella train ippo --env {make_env}."
        )
    if callable(getattr(make_env, "parallel_env", None)) and not callable(make_env):
        raise ConfigError(
            f"train_host: {_MAKE_ENV}, got the module {getattr(make_env, '__name__', make_env)!r}. "
            "Pass its parallel_env (make_env=module.parallel_env, or a lambda giving its arguments)."
        )
    if not isinstance(make_env, type) and (
        hasattr(make_env, "possible_agents") or hasattr(make_env, "agents")
    ):
        raise ConfigError(
            f"train_host: {_MAKE_ENV}, got an env ({type(make_env).__name__}): it makes num_envs + "
            "eval_episodes envs of its own. Pass what made this one (make_env=simple_spread_v3.parallel_env, "
            "or lambda: simple_spread_v3.parallel_env(N=3))."
        )
    if not callable(make_env):
        raise ConfigError(f"train_host: {_MAKE_ENV}, got {type(make_env).__name__} {make_env!r:.60}.")


def _made(make_env: Callable[[], Any]) -> Any:
    """``make_env()``, refused naming the fix unless it is a parallel env (an AEC env, say)."""
    env = make_env()
    if callable(getattr(env, "last", None)):  # PettingZoo's AEC API: one agent acts at a time
        raise ConfigError(
            f"train_host: make_env() returned an AEC env ({type(env).__name__}); this loop steps every "
            "agent at once, so it needs a parallel env: the module's parallel_env (simple_spread_v3."
            "parallel_env), or pettingzoo.utils.conversions.aec_to_parallel(env)."
        )
    if not (callable(getattr(env, "step", None)) and hasattr(env, "possible_agents")):
        raise ConfigError(
            f"train_host: make_env() returned {type(env).__name__}, not a PettingZoo parallel env. "
            f"{_MAKE_ENV[0].upper()}{_MAKE_ENV[1:]}."
        )
    return env


_TEAM_REWARD = (
    "train_host: team_reward=True trains every agent on the sum of all agents' rewards, but {name} has "
    "no team reward: {why}. Set team_reward=False (each agent learns from its own reward)."
)


def _env_name(env: Any) -> str:
    """A PettingZoo env's ``metadata["name"]`` (mpe2: ``simple_tag_v3``), else its class's name."""
    metadata = getattr(env, "metadata", None)
    return str((metadata.get("name") if isinstance(metadata, dict) else None) or type(env).__name__)


def _refuse_team_reward(env: Any) -> None:
    """``team_reward`` on an env that says its agents play against each other, as the JAX runners
    refuse it on a lamella env with ``cooperative = False``: PettingZoo has no such flag, so the
    env (or its ``unwrapped``) may set lamella's ``cooperative = False``, and mpe2's scenarios mark
    their adversaries (``world.agents[i].adversary``: simple_adversary, simple_tag, ...)."""
    name = _env_name(env)
    unwrapped = getattr(env, "unwrapped", env)
    if getattr(env, "cooperative", None) is False or getattr(unwrapped, "cooperative", None) is False:
        raise ConfigError(
            _TEAM_REWARD.format(
                name=name, why="its agents play against each other (it sets cooperative = False)"
            )
        )
    world = getattr(unwrapped, "world", None)
    adversaries = [
        str(getattr(agent, "name", "?"))
        for agent in getattr(world, "agents", ())
        if getattr(agent, "adversary", False) is True
    ]
    if adversaries:
        raise ConfigError(
            _TEAM_REWARD.format(name=name, why=f"its agents {adversaries} are adversaries of the others")
        )


def _refuse_zero_sum(reward: np.ndarray, name: str) -> None:
    """``team_reward`` where the first rollout's rewards sum to 0 over the agents at every step
    while some are not 0 (a zero-sum game nothing declared): the update would see a team
    reward of 0 throughout."""
    scale = float(np.abs(reward).max(initial=0.0))
    if scale > 0 and np.all(np.abs(reward.sum(-1)) <= 1e-6 * scale):
        raise ConfigError(
            _TEAM_REWARD.format(
                name=name,
                why="the agents' rewards sum to 0 at every step of the first rollout while each agent's "
                "is not 0 (a zero-sum game), so the team reward is 0 throughout",
            )
        )


def train_host(
    config: IPPOConfig,
    make_env: Callable[[], Any],
    *,
    seed: int = 0,
    eval_every: int | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    env_name: str | None = None,
    num_devices: int = 1,
) -> HostResult:
    """Train IPPO, MAPPO, rec_ippo or rec_mappo (by ``config``'s class) on ``config.num_envs``
    PettingZoo parallel envs stepped on the host.

    Args:
        config: an :class:`~lamella.marl.ppo.IPPOConfig`, :class:`~lamella.marl.ppo.MAPPOConfig`,
            :class:`~lamella.marl.ppo.RecIPPOConfig` or :class:`~lamella.marl.ppo.RecMAPPOConfig`
            (``env_id`` names the run only; ``num_envs``, ``num_steps``, the PPO settings, the
            network's, ``continuous_action`` and ``log_std_init`` for Box actions,
            ``team_reward``, ``normalize_values``, ``eval_episodes`` and ``eval_greedy`` are
            used).
        make_env: ``() -> pettingzoo.ParallelEnv``, called ``num_envs + eval_episodes`` times
            (training envs, then evaluation envs: one episode each per evaluation). MAPPO needs
            the env's ``state()``.
        seed: seeds the envs (env ``i`` resets with ``seed + i`` first) and the agent.
        eval_every: env steps between evaluations (default: about 10 per run; one at the end).
        out_dir: write the run log there (None: no files); a folder per run (seed), since a
            folder that already holds a ``metrics.json`` is refused.
        env_name: the task name in the run log (default ``config.env_id``).
        num_devices: split each update's envs over this many devices (``jax.shard_map``: each
            device computes its equal share of every minibatch, the gradients and statistics
            are reduced over the devices, so the run equals the one-device run); acting and
            evaluation run on the first device. ``num_envs`` and every minibatch (recurrent:
            ``num_envs / num_minibatches``) must be multiples of it.

    Raises:
        lamella.agents.config.ConfigError: a single-agent env, action spaces other than
            ``Discrete`` for every agent or a 1-D ``Box`` for every agent (with the same bounds on
            each entry, finite for ``continuous_action="tanh"``), MAPPO on an env without
            ``state()``, inconsistent PPO sizes (``num_minibatches`` must divide
            ``num_envs`` for the recurrent configs), a budget under one rollout, more devices
            than present or sizes they do not divide (checked before any env is made);
            ``team_reward`` on an env without a team reward: one that sets ``cooperative =
            False`` or has mpe2's adversaries (checked on the first env made), or a zero-sum
            game whose agents' rewards sum to 0 at every step of the first rollout (checked
            before the first update).
        FileExistsError: ``out_dir`` already holds a run log (checked before any env is made).
    """
    check_config_type(config, IPPOConfig, "train_host", algorithm="ippo")
    config.validate()
    _refuse_unused_settings(config)
    num_devices = devices_lib.check_devices(
        num_devices,
        BatchSharding("num_envs", int(config.num_envs), lambda axis: None, lambda state: None),
        "train_host",
    )
    check_ppo_sizes(config, recurrent=config.recurrent, num_devices=num_devices)
    per_iteration = int(config.num_envs) * int(config.num_steps)
    if int(config.total_timesteps) < per_iteration:
        raise ConfigError(
            f"train_host: total_timesteps={config.total_timesteps} is less than one iteration "
            f"(num_envs x num_steps = {per_iteration})."
        )
    refuse_existing_run_log(out_dir, "train_host", seed)
    _check_make_env(make_env)
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ConfigError(
            f"train_host: seed must be a non-negative int, got {type(seed).__name__} {seed!r:.60}."
        )
    with_state = bool(config.centralised_critic)
    first_env = _made(make_env)
    if config.team_reward:
        _refuse_team_reward(first_env)
    envs = ParallelEnvBatch(
        [first_env, *(_made(make_env) for _ in range(int(config.num_envs) - 1))], with_state, config.algorithm
    )
    eval_envs = ParallelEnvBatch(
        [_made(make_env) for _ in range(int(config.eval_episodes))], with_state, config.algorithm
    )
    n, num_envs, num_steps = envs.num_agents, int(config.num_envs), int(config.num_steps)
    _check_continuous(envs, config)
    obs = envs.reset(seed)  # before anything compiles: MAPPO on an env without state() stops here
    bounds = (tuple(envs.action_low.tolist()), tuple(envs.action_high.tolist()))
    pieces = _compiled(config, n, envs.num_actions, bounds, num_devices)
    name = env_name or config.env_id

    key = jax.random.key(seed)
    key, key_init = jax.random.split(key)
    train_state, memory = pieces.init(key_init, obs)
    first = np.ones((num_envs,), bool)

    def evaluate(index: int, key: jax.Array) -> np.ndarray:
        episodes = len(eval_envs.envs)
        observation = eval_envs.reset(10_000 * (seed + 1) + index * episodes)
        eval_memory = pieces.initial_memory(episodes)  # every episode from fresh memory
        reset = np.ones((episodes,), bool)
        returns = np.zeros((episodes, n))
        finished = np.zeros((episodes,), bool)
        while not finished.all():
            key, key_act = jax.random.split(key)
            eval_memory, action = pieces.act_eval(
                train_state.params, key_act, observation, eval_memory, reset
            )
            observation, reward, _, _, _, done = eval_envs.step(np.asarray(action))
            returns += np.where(finished[:, None], 0.0, reward)
            finished |= done
            reset = np.zeros((episodes,), bool)  # an env's later episodes are not counted
        return returns

    log = (
        RunLog(out_dir, "pettingzoo", name, config.algorithm, [f"seed_{seed}"])
        if out_dir is not None
        else None
    )
    total = int(config.total_timesteps)
    eval_every = eval_every or max(total // 10, per_iteration)
    start = time.perf_counter()
    steps, next_eval = 0, eval_every
    eval_steps: list[int] = []
    eval_returns: list[float] = []
    eval_agent_returns: list[list[float]] = []
    train_returns: list[float] = []
    train_metrics: list[dict[str, float]] = []
    running = np.zeros((num_envs, n))
    while steps + per_iteration <= total:
        columns: dict[str, list[Any]] = {
            k: [] for k in ("obs", "out", "reward", "term", "trunc", "final", "reset", "memory")
        }
        ended: list[float] = []
        for _ in range(num_steps):
            key, key_act = jax.random.split(key)
            next_memory, out = pieces.act(train_state.params, key_act, obs, memory, first)
            out = jax.device_get(out)
            next_obs, reward, terminated, truncated, final, done = envs.step(np.asarray(out.action))
            for name_, value in (("obs", obs), ("out", out), ("reward", reward), ("term", terminated),
                                 ("trunc", truncated), ("final", final), ("reset", first),
                                 ("memory", memory)):  # fmt: skip
                columns[name_].append(value)
            running += reward
            ended.extend(running[done].sum(-1).tolist())
            running[done] = 0.0
            obs, first, memory = next_obs, done, next_memory
        if config.team_reward and steps == 0:
            _refuse_zero_sum(np.stack(columns["reward"]), _env_name(envs.envs[0]))
        stack = lambda items: jax.tree.map(lambda *xs: jnp.asarray(np.stack(xs)), *items)  # noqa: E731
        outs = stack(columns["out"])
        transitions = Transition(
            obs=stack(columns["obs"]),
            action=outs.action,
            raw_action=outs.raw_action,
            log_prob=outs.log_prob,
            value=outs.value,
            reward=stack(columns["reward"]),
            terminated=stack(columns["term"]),
            truncated=stack(columns["trunc"]),
            final_obs=stack(columns["final"]),
            reset=stack(columns["reset"]),
            memory=stack(columns["memory"]),
            info={},
        )
        key, key_update, key_eval = jax.random.split(key, 3)
        # The memory after the last step: a recurrent critic's bootstrap of that step continues it.
        train_state, metrics = pieces.update(train_state, Trajectory(transitions, key_update, memory))
        train_metrics.append({k: float(np.mean(v)) for k, v in jax.device_get(metrics).items()})
        steps += per_iteration
        train_returns.append(float(np.mean(ended)) if ended else float("nan"))
        if steps >= next_eval or steps + per_iteration > total:
            next_eval += eval_every
            returns = evaluate(len(eval_steps), key_eval)
            eval_steps.append(steps)
            eval_returns.append(float(returns.sum(-1).mean()))
            eval_agent_returns.append(returns.mean(0).tolist())
            if log is not None:
                logged: dict[str, Any] = {"mean_episode_return": returns.sum(-1).tolist()}
                logged.update({f"return_agent_{i}": returns[:, i].tolist() for i in range(n)})
                log.add(steps, {f"seed_{seed}": logged})
                log.write()
    if log is not None:
        log.close()
    return HostResult(
        train_state=train_state,
        env_steps=steps,
        eval_steps=eval_steps,
        eval_returns=eval_returns,
        eval_agent_returns=eval_agent_returns,
        train_returns=train_returns,
        train_metrics=train_metrics,
        metrics_path=log.json_path if log is not None else None,
        seconds=time.perf_counter() - start,
    )


#: The loop's name from when only IPPO ran on it: the same function.
train_ippo_host = train_host
