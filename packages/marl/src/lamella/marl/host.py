"""IPPO on PettingZoo parallel envs: the env steps on the host, the policy and the update are jitted.

For multi-agent envs that are not JAX (mpe2, anything with the ``pettingzoo.ParallelEnv`` API):
``num_envs`` env objects step one by one in Python, as lamella-agents' off-policy host loop
(:mod:`lamella.agents.offpolicy.host`) steps gymnasium vector envs, while acting and learning are
IPPO's own compiled pieces, the same as in the compiled runner (:func:`~lamella.marl.ppo.
make_multi_agent_ppo`: the network, its collector policy, per-agent truncation-correct GAE and the
PPO update)::

    import mpe2.simple_spread_v3 as simple_spread
    result = train_ippo_host(IPPOConfig(total_timesteps=100_000), lambda: simple_spread.parallel_env())

What the host side does, per env:

* **Agents and spaces.** ``env.possible_agents`` in order are agents ``0..n-1``. Each agent's
  observation (a ``Box``, or a ``Dict`` with ``"observation"`` and ``"action_mask"``) is
  flattened to float32 and zero-padded to the longest agent's size; actions are ``Discrete``
  (agents with fewer actions get the extra ones masked out).
* **Action masks** come from the observation's ``"action_mask"`` or ``info[agent]["action_mask"]``,
  else all legal.
* **Episode ends.** An episode ends when every agent is terminated or truncated (PettingZoo then
  has no live agents); the transition keeps the final observation (a truncated episode
  bootstraps from it, a terminated one from 0) and the env is reset. An agent that leaves before
  the others gets zero observations and rewards until the episode ends, and its own
  ``terminated`` / ``truncated`` flag from the step it left.

The result holds the train state, the evaluations (``eval_episodes`` episodes each, on separate
env objects, sampled or greedy as ``eval_greedy`` says) and, with ``out_dir``, a run log
(``metrics.json`` / ``metrics.csv``, the marl-eval layout of the driver's logs, team and
per-agent returns) that ``lamella eval`` reads.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents.config import ConfigError
from lamella.agents.rollout import Transition, actor_critic_policy
from lamella.agents.runlog import RunLog
from lamella.marl.ppo import IPPOConfig, Trajectory, make_multi_agent_ppo

__all__ = ["HostIPPOResult", "ParallelEnvBatch", "train_ippo_host"]


@dataclasses.dataclass
class HostIPPOResult:
    """What :func:`train_ippo_host` did.

    Attributes:
        train_state: IPPO's final train state.
        env_steps: env steps taken over all envs.
        eval_steps: the env step of each evaluation.
        eval_returns: each evaluation's mean team return (sum over agents).
        eval_agent_returns: each evaluation's mean return per agent.
        train_returns: mean team return of the training episodes that ended in each iteration
            (NaN where none ended).
        metrics_path: ``metrics.json`` of the run log (None without ``out_dir``).
        seconds: wall time of the loop.
    """

    train_state: Any
    env_steps: int
    eval_steps: list[int]
    eval_returns: list[float]
    eval_agent_returns: list[list[float]]
    train_returns: list[float]
    metrics_path: str | None
    seconds: float


def _space_size(space: Any) -> int:
    shape = getattr(space, "shape", None)
    if shape is None:
        raise ConfigError(
            f"train_ippo_host: observation space {space!r} has no shape (Box observations only)."
        )
    return int(np.prod(shape))


class ParallelEnvBatch:
    """``num_envs`` PettingZoo parallel envs as one batch of lamella-style multi-agent arrays.

    ``reset(seed) -> obs`` and ``step(actions) -> (obs, reward, terminated, truncated,
    final_obs, done)``, where ``obs`` / ``final_obs`` are dicts ``{"obs": float32 (num_envs, n,
    L), "action_mask": bool (num_envs, n, A)}``, ``actions`` int ``(num_envs, n)``, reward and
    flags ``(num_envs, n)`` and ``done`` bool ``(num_envs,)`` (the env was reset after this step;
    ``obs`` is then the new episode's first observation, ``final_obs`` the old one's last).

    Args:
        envs: the env objects (``pettingzoo.ParallelEnv``), all of the same game.
    """

    def __init__(self, envs: Sequence[Any]):
        if not envs:
            raise ConfigError("train_ippo_host needs at least one env (num_envs >= 1).")
        self.envs = list(envs)
        first = self.envs[0]
        self.agents: list[str] = list(first.possible_agents)
        self.num_agents = len(self.agents)
        if self.num_agents < 2:
            raise ConfigError(
                f"train_ippo_host trains multi-agent envs; {type(first).__name__} has "
                f"{self.num_agents} agent(s). Use lamella-agents' single-agent runners."
            )
        sizes, actions = [], []
        for agent in self.agents:
            obs_space = first.observation_space(agent)
            if hasattr(obs_space, "spaces") and "observation" in getattr(obs_space, "spaces", {}):
                obs_space = obs_space["observation"]
            sizes.append(_space_size(obs_space))
            action_space = first.action_space(agent)
            if not hasattr(action_space, "n"):
                raise ConfigError(
                    f"train_ippo_host takes discrete actions (gymnasium Discrete); agent {agent!r} of "
                    f"{type(first).__name__} has {action_space!r}. Make the env with discrete actions "
                    "(mpe2: continuous_actions=False)."
                )
            if int(getattr(action_space, "start", 0)) != 0:
                raise ConfigError(
                    f"Discrete actions must start at 0; agent {agent!r}'s start at {action_space.start}."
                )
            actions.append(int(action_space.n))
        self.obs_size = max(sizes)
        self.num_actions = max(actions)
        self.agent_actions = np.asarray(actions)
        self._left: list[dict[int, tuple[bool, bool]]] = [{} for _ in self.envs]

    def _pack(self, obs: dict[str, Any], infos: dict[str, Any]) -> dict[str, np.ndarray]:
        """One env's observation dict as arrays ``(n, L)`` and ``(n, A)``; absent agents: zeros."""
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
            if agent_mask is not None:
                legal = np.asarray(agent_mask, bool).reshape(-1)
                mask[i, : legal.size] = legal
        return {"obs": out, "action_mask": mask}

    @staticmethod
    def _stack(items: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        return {key: np.stack([item[key] for item in items]) for key in items[0]}

    def reset(self, seed: int) -> dict[str, np.ndarray]:
        """Reset every env (env ``i`` with ``seed + i``); the batch's first observations."""
        self._left = [{} for _ in self.envs]
        packed = []
        for i, env in enumerate(self.envs):
            obs, infos = env.reset(seed=seed + i)
            packed.append(self._pack(obs, infos))
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
                {agent: int(actions[e, i]) for i, agent in enumerate(self.agents) if agent in live}
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
            packed = self._pack(obs, infos)
            finals.append(packed)
            if not env.agents:
                done[e] = True
                self._left[e] = {}
                obs, infos = env.reset()
                packed = self._pack(obs, infos)
            nexts.append(packed)
        return self._stack(nexts), reward, terminated, truncated, self._stack(finals), done


def train_ippo_host(
    config: IPPOConfig,
    make_env: Callable[[], Any],
    *,
    seed: int = 0,
    eval_every: int | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    env_name: str | None = None,
) -> HostIPPOResult:
    """Train IPPO (feed-forward, ``config``'s settings) on ``config.num_envs`` PettingZoo
    parallel envs stepped on the host.

    Args:
        config: an :class:`~lamella.marl.ppo.IPPOConfig` (``env_id`` names the run only;
            ``num_envs``, ``num_steps``, the PPO settings, ``team_reward``, ``eval_episodes`` and
            ``eval_greedy`` are used).
        make_env: ``() -> pettingzoo.ParallelEnv``, called ``num_envs + eval_episodes`` times
            (training envs, then evaluation envs: one episode each per evaluation).
        seed: seeds the envs (env ``i`` resets with ``seed + i`` first) and the agent.
        eval_every: env steps between evaluations (default: about 10 per run; one at the end).
        out_dir: write the run log there (None: no files).
        env_name: the task name in the run log (default ``config.env_id``).

    Raises:
        lamella.agents.config.ConfigError: a recurrent or centralised-critic config (not on the
            host loop yet), a single-agent env, continuous actions, inconsistent PPO sizes.
    """
    config.validate()
    if config.recurrent or config.centralised_critic:
        raise ConfigError(
            f"train_ippo_host runs feed-forward IPPO; {type(config).__name__} is "
            f"{'recurrent' if config.recurrent else 'MAPPO (a centralised critic)'}. Use IPPOConfig."
        )
    per_iteration = int(config.num_envs) * int(config.num_steps)
    if int(config.total_timesteps) < per_iteration:
        raise ConfigError(
            f"train_ippo_host: total_timesteps={config.total_timesteps} is less than one iteration "
            f"(num_envs x num_steps = {per_iteration})."
        )
    envs = ParallelEnvBatch([make_env() for _ in range(int(config.num_envs))])
    eval_envs = ParallelEnvBatch([make_env() for _ in range(int(config.eval_episodes))])
    n, num_envs, num_steps = envs.num_agents, int(config.num_envs), int(config.num_steps)
    ppo = make_multi_agent_ppo(config, n, envs.num_actions)
    agent, actor_critic = ppo.agent, ppo.actor_critic
    name = env_name or config.env_id

    @jax.jit
    def act(params: Any, key: jax.Array, obs: Any) -> Any:
        policy = actor_critic_policy(actor_critic, params)
        _, out = policy(key, obs, (), jnp.zeros((jax.tree.leaves(obs)[0].shape[0],), bool))
        return out

    @jax.jit
    def act_eval(params: Any, key: jax.Array, obs: Any) -> jax.Array:
        batch = jax.tree.leaves(obs)[0].shape[0]
        _, dist, _ = actor_critic.step(params, (), obs, jnp.zeros((batch,), bool))
        raw = dist.mode() if config.eval_greedy else dist.sample(key)
        return dist.to_action(raw)

    @jax.jit
    def update(train_state: Any, transitions: Transition, key: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
        train_state, _, metrics = agent.update(Trajectory(transitions, key), train_state, ())
        return train_state, metrics

    key = jax.random.key(seed)
    key, key_init = jax.random.split(key)
    obs = envs.reset(seed)
    train_state, _ = agent.init(key_init, jax.tree.map(jnp.asarray, obs))
    first = np.ones((num_envs,), bool)

    def evaluate(index: int, key: jax.Array) -> np.ndarray:
        observation = eval_envs.reset(10_000 * (seed + 1) + index * len(eval_envs.envs))
        returns = np.zeros((len(eval_envs.envs), n))
        finished = np.zeros((len(eval_envs.envs),), bool)
        while not finished.all():
            key, key_act = jax.random.split(key)
            action = np.asarray(act_eval(train_state.params, key_act, observation))
            observation, reward, _, _, _, done = eval_envs.step(action)
            returns += np.where(finished[:, None], 0.0, reward)
            finished |= done
        return returns

    log = RunLog(out_dir, "pettingzoo", name, "ippo", [f"seed_{seed}"]) if out_dir is not None else None
    total = int(config.total_timesteps)
    eval_every = eval_every or max(total // 10, per_iteration)
    start = time.perf_counter()
    steps, next_eval = 0, eval_every
    eval_steps: list[int] = []
    eval_returns: list[float] = []
    eval_agent_returns: list[list[float]] = []
    train_returns: list[float] = []
    running = np.zeros((num_envs, n))
    while steps + per_iteration <= total:
        columns: dict[str, list[Any]] = {
            k: [] for k in ("obs", "out", "reward", "term", "trunc", "final", "reset")
        }
        ended: list[float] = []
        for _ in range(num_steps):
            key, key_act = jax.random.split(key)
            out = jax.device_get(act(train_state.params, key_act, obs))
            next_obs, reward, terminated, truncated, final, done = envs.step(np.asarray(out.action))
            for name_, value in (("obs", obs), ("out", out), ("reward", reward), ("term", terminated),
                                 ("trunc", truncated), ("final", final), ("reset", first)):  # fmt: skip
                columns[name_].append(value)
            running += reward
            ended.extend(running[done].sum(-1).tolist())
            running[done] = 0.0
            obs, first = next_obs, done
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
            memory=(),
            info={},
        )
        key, key_update, key_eval = jax.random.split(key, 3)
        train_state, _ = update(train_state, transitions, key_update)
        steps += per_iteration
        train_returns.append(float(np.mean(ended)) if ended else float("nan"))
        if steps >= next_eval or steps + per_iteration > total:
            next_eval += eval_every
            returns = evaluate(len(eval_steps), key_eval)
            eval_steps.append(steps)
            eval_returns.append(float(returns.sum(-1).mean()))
            eval_agent_returns.append(returns.mean(0).tolist())
            if log is not None:
                metrics: dict[str, Any] = {"mean_episode_return": returns.sum(-1).tolist()}
                metrics.update({f"return_agent_{i}": returns[:, i].tolist() for i in range(n)})
                log.add(steps, {f"seed_{seed}": metrics})
                log.write()
    if log is not None:
        log.close()
    return HostIPPOResult(
        train_state=train_state,
        env_steps=steps,
        eval_steps=eval_steps,
        eval_returns=eval_returns,
        eval_agent_returns=eval_agent_returns,
        train_returns=train_returns,
        metrics_path=log.json_path if log is not None else None,
        seconds=time.perf_counter() - start,
    )
