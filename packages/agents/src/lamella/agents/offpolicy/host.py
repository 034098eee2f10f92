"""The off-policy loop on the host, for environments that are not JAX (gymnasium vector envs).

The env steps in Python (numpy); acting, storing and learning are the same compiled functions
as in the compiled runner (the agents of ``lamella.agents.offpolicy``, the episode buffer of
``lamella.buffers``, the batch samplers of :mod:`lamella.agents.offpolicy.loop`, HER from the
lamella-gcrl plug-in), and the run log is lamella-agents' ``RunLog`` (``metrics.json`` /
``metrics.csv``, docs/run-log-format.md)::

    result = train_host(SACTrainConfig(env_id="Pendulum-v1", total_timesteps=10_000), "Pendulum-v1")

A gymnasium id is made with ``gymnasium.make_vec(id, num_envs=config.num_envs)`` in
``SAME_STEP`` auto-reset mode, whose ``info["final_obs"]`` gives the true final observation
that the stored transition needs (a time limit bootstraps from it). A vector env passed in must
use that mode too.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents.config import ConfigError, check_config_type
from lamella.agents.offpolicy.configs import AGENTS, OFFPOLICY_BUILD, LoopConfig, agent_config
from lamella.agents.offpolicy.loop import resolve_batch_sampler
from lamella.agents.offpolicy.plugins import BatchSamplerFactory, GoalFunctions
from lamella.agents.runlog import RunLog, refuse_existing_run_log
from lamella.buffers import Transition, make_episode_buffer, transition_like
from lamella.envs import spaces

__all__ = ["HostLoopResult", "from_gymnasium_space", "train_host"]


@dataclasses.dataclass
class HostLoopResult:
    """What :func:`train_host` did: the final train state, evaluations and the run-log paths."""

    train_state: Any
    env_steps: int
    eval_steps: list[int]
    eval_returns: list[float]
    metrics_path: str | None
    seconds: float


def from_gymnasium_space(space: Any) -> spaces.Space:
    """The lamella space of a gymnasium ``Box``, ``Discrete`` or ``Dict`` space."""
    import gymnasium

    if isinstance(space, gymnasium.spaces.Box):
        return spaces.Box(np.asarray(space.low), np.asarray(space.high), space.shape, jnp.float32)
    if isinstance(space, gymnasium.spaces.Discrete):
        if int(space.start) != 0:
            raise ValueError(f"Discrete spaces must start at 0, got start={space.start}.")
        return spaces.Discrete(int(space.n))
    if isinstance(space, gymnasium.spaces.Dict):
        return spaces.Dict({k: from_gymnasium_space(v) for k, v in space.spaces.items()})
    raise TypeError(f"Unsupported gymnasium space {space!r}: Box, Discrete and Dict are supported.")


def _check_vector_env(env: Any, num_envs: int) -> None:
    """Raise :class:`ConfigError` naming the fix unless ``env`` is a gymnasium vector env."""
    if hasattr(env, "num_envs") and hasattr(env, "single_action_space"):
        return
    vec = (
        f"gymnasium.make_vec(id, num_envs={num_envs}, vector_kwargs={{'autoreset_mode': "
        "gymnasium.vector.AutoresetMode.SAME_STEP})"
    )
    if callable(getattr(env, "step_env", None)) or callable(
        getattr(getattr(env, "unwrapped", None), "step_env", None)
    ):
        raise ConfigError(
            f"train_host: env is a lamella env ({type(env).__name__}), stepped inside compiled code; train it "
            "with the compiled loop: lamella.agents.offpolicy.loop.make_offpolicy_runner(config, env=env) on the bare "
            "env (lamella.envs.make(id, autoreset=False)). "
            f"train_host steps a gymnasium vector env on the host: {vec}, or its id."
        )
    if callable(getattr(env, "step", None)) and hasattr(env, "action_space"):
        raise ConfigError(
            f"train_host: env is a single gymnasium env ({type(env).__name__}); it needs a vector env of "
            f"num_envs={num_envs}: {vec}, or pass the id."
        )
    raise ConfigError(
        f"train_host: env must be a gymnasium id or vector env ({vec}), got {type(env).__name__}."
    )


def _make_vec(env_id: str, num_envs: int, seed: int) -> Any:
    import gymnasium

    try:
        gymnasium.spec(env_id)
    except gymnasium.error.Error as error:
        import lamella.envs

        if env_id in lamella.envs.registered():
            raise ConfigError(
                f"train_host: {env_id!r} is a lamella env, not a gymnasium one; train it with the "
                f"compiled loop: lamella.agents.offpolicy.loop.make_offpolicy_runner(config) with "
                f"env_id={env_id!r} (lamella train <algorithm> --env {env_id})."
            ) from None
        raise ConfigError(f"train_host: {error}") from None
    return gymnasium.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP},
    )


def _as_jax(obs: Any) -> Any:
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), obs)


def _final_obs(next_obs: Any, info: dict[str, Any], done: np.ndarray) -> Any:
    """The true next observation of every env (SAME_STEP mode keeps it in info["final_obs"])."""
    if not done.any():
        return next_obs
    final = info["final_obs"]

    def pick(current: np.ndarray, key: Any = None) -> np.ndarray:
        out = np.array(current, copy=True)
        for i in np.flatnonzero(done):
            out[i] = final[i][key] if key is not None else final[i]
        return out

    if isinstance(next_obs, dict):
        return {k: pick(v, k) for k, v in next_obs.items()}
    return pick(next_obs)


def _time_limit(env: Any) -> int | None:
    """The longest episode of a gymnasium vector env, in steps: the largest time limit of its
    sub-envs (``spec.max_episode_steps``, which ``gymnasium.make`` and ``TimeLimit`` set), or None
    where a sub-env has none. The sub-envs' specs, not the vector env's own: ``make_vec(id,
    max_episode_steps=50)`` keeps the registered limit in the vector env's spec."""
    get_attr = getattr(env, "get_attr", None)
    specs = get_attr("spec") if callable(get_attr) else (getattr(env, "spec", None),)
    limits = [getattr(spec, "max_episode_steps", None) for spec in specs]
    if not limits or None in limits:
        return None
    return max(int(limit) for limit in limits if limit is not None)


def train_host(
    config: LoopConfig,
    env: Any,
    *,
    seed: int = 0,
    eval_env: Any = None,
    eval_every: int | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    compute_reward: Callable[[jax.Array, jax.Array], jax.Array] | None = None,
    batch_sampler: BatchSamplerFactory | None = None,
) -> HostLoopResult:
    """Train ``config``'s agent on a host-side vector env.

    Args:
        config: a ``<Algo>TrainConfig``; ``num_envs`` must match the vector env.
        env: a gymnasium id (made with ``num_envs`` envs, ``SAME_STEP`` auto-reset) or a
            gymnasium vector env in ``SAME_STEP`` mode.
        seed: seeds the envs and the agent.
        eval_env: vector env of greedy evaluation episodes (default: one made like ``env`` with
            ``config.eval_episodes`` envs; each plays one episode per evaluation).
        eval_every: env steps between evaluations (default about 10 per run).
        out_dir: write ``metrics.json`` / ``metrics.csv`` there (None: no files); a folder per run
            (seed): one that already holds a ``metrics.json`` is refused (``FileExistsError``).
        compute_reward: a JAX ``compute_reward(achieved_goal, desired_goal)`` for ``her=True``;
            the batch sampler gets it as :class:`GoalFunctions` with ``episode_length`` the env's
            time limit (its sub-envs' ``spec.max_episode_steps``; None without one).
        batch_sampler: ``make(config, buffer, goals) -> sample`` (default: uniform or n-step;
            the ``her`` plug-in of lamella-gcrl with ``her=True``).

    Returns:
        A :class:`HostLoopResult`.
    """
    check_config_type(config, LoopConfig, "train_host", OFFPOLICY_BUILD)
    config.validate()
    name, agent_cfg = agent_config(config)
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ConfigError(
            f"train_host: seed must be a non-negative int, got {type(seed).__name__} {seed!r:.60}."
        )
    refuse_existing_run_log(out_dir, "train_host", seed)
    if isinstance(env, str):
        env = _make_vec(env, config.num_envs, seed)
    _check_vector_env(env, config.num_envs)
    mode = getattr(env, "metadata", {}).get("autoreset_mode")
    if mode is not None and getattr(mode, "name", str(mode)) != "SAME_STEP":
        raise ValueError(
            f"train_host needs a vector env in SAME_STEP auto-reset mode (got {mode}); make it with "
            "vector_kwargs={'autoreset_mode': gymnasium.vector.AutoresetMode.SAME_STEP}."
        )
    if env.num_envs != config.num_envs:
        raise ValueError(f"The vector env has {env.num_envs} envs, config.num_envs is {config.num_envs}.")
    observation_space = from_gymnasium_space(env.single_observation_space)
    action_space = from_gymnasium_space(env.single_action_space)
    agent = AGENTS[name][1](agent_cfg, observation_space, action_space)
    buffer = make_episode_buffer(config.num_envs, config.buffer_size // config.num_envs, config.batch_size)
    if config.her and compute_reward is None:
        raise ValueError("her=True in train_host needs compute_reward (a JAX function of two goals).")
    make_sampler = resolve_batch_sampler(config, batch_sampler)
    # The episode length lets a sampler check its buffer (lamella-gcrl's HER: an episode per env).
    goals = (
        GoalFunctions(compute_reward, episode_length=_time_limit(env)) if compute_reward is not None else None
    )
    sample = make_sampler(config, buffer, goals)

    # The train state is not donated: its target networks start as the very same arrays.
    @jax.jit
    def learn(train_state: Any, buffer_state: Any, key: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
        def one(ts: Any, k: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
            ts, _, metrics = agent.update(sample(buffer_state, k), ts, ())
            return ts, metrics

        train_state, metrics = jax.lax.scan(one, train_state, jax.random.split(key, config.updates_per_step))
        return train_state, jax.tree.map(jnp.mean, metrics)

    act = jax.jit(lambda key, ts, obs: agent.policy(key, ts, obs, (), eval=False)[:2])
    act_greedy = jax.jit(lambda ts, obs: agent.policy(jax.random.key(0), ts, obs, (), eval=True)[0])
    add = jax.jit(buffer.add, donate_argnums=(0,))

    key = jax.random.key(seed)
    key, key_agent = jax.random.split(key)
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    train_state, _ = agent.init(key_agent, _as_jax(obs))
    one_obs = jax.tree.map(lambda x: np.asarray(x[0], np.float32), obs)
    example = transition_like(one_obs, np.asarray(env.single_action_space.sample()))
    buffer_state = buffer.init(jax.tree.map(jnp.asarray, example))

    if eval_env is None:
        eval_env = _make_vec(config.env_id, config.eval_episodes, seed + 1)
    eval_every = eval_every or max(config.total_timesteps // 10, config.num_envs)
    log = None
    if out_dir is not None:
        log = RunLog(out_dir, "gymnasium", config.env_id, name, [f"seed_{seed}"])

    def evaluate(index: int) -> np.ndarray:
        observation, _ = eval_env.reset(seed=10_000 * (seed + 1) + index)
        n = eval_env.num_envs
        returns, finished = np.zeros(n), np.zeros(n, bool)
        while not finished.all():
            action = np.asarray(act_greedy(train_state, _as_jax(observation)))
            observation, reward, terminated, truncated, _ = eval_env.step(action)
            returns += np.where(finished, 0.0, reward)
            finished |= np.logical_or(terminated, truncated)
        return returns

    start = time.perf_counter()
    eval_steps: list[int] = []
    eval_returns: list[float] = []
    steps = 0
    next_eval = eval_every
    while steps < config.total_timesteps:
        key, key_act, key_learn = jax.random.split(key, 3)
        if steps < config.learning_starts:
            action = np.asarray(env.action_space.sample())
        else:
            action, train_state = act(key_act, train_state, _as_jax(obs))
            action = np.asarray(action)
        next_obs, reward, terminated, truncated, info = env.step(action)
        done = np.logical_or(terminated, truncated)
        true_next = _final_obs(next_obs, info, done)
        transition = Transition(
            _as_jax(obs),
            jnp.asarray(action),
            jnp.asarray(reward, jnp.float32),
            jnp.asarray(terminated),
            jnp.asarray(truncated),
            _as_jax(true_next),
        )
        buffer_state = add(buffer_state, jax.tree.map(lambda x: x[:, None], transition))
        obs = next_obs
        steps += config.num_envs
        if steps >= config.learning_starts:
            train_state, _ = learn(train_state, buffer_state, key_learn)
        if steps >= next_eval or steps >= config.total_timesteps:
            next_eval += eval_every
            returns = evaluate(len(eval_steps))
            eval_steps.append(steps)
            eval_returns.append(float(returns.mean()))
            if log is not None:
                log.add(steps, {f"seed_{seed}": {"mean_episode_return": returns.tolist()}})
                log.write()
    if log is not None:
        log.close()
    return HostLoopResult(
        train_state=train_state,
        env_steps=steps,
        eval_steps=eval_steps,
        eval_returns=eval_returns,
        metrics_path=log.json_path if log is not None else None,
        seconds=time.perf_counter() - start,
    )
