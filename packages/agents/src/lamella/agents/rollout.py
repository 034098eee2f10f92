"""Rollout collection: ``num_steps`` steps of a batch of envs under a policy, as a time-major batch.

A collector is built once per env and rollout length, and called with the policy of the moment::

    rollout = make_rollout(env, num_steps=128, num_envs=16)
    state = rollout.init(key, env_params, memory)       # reset the envs
    state, batch = rollout.collect(state, policy, key, env_params)
    batch.reward.shape                                  # (128, 16): time first, then envs

``policy(key, obs, memory, reset) -> (memory, PolicyStep)`` acts for the whole env batch
(``obs`` has a leading axis of ``num_envs``; ``reset`` marks envs whose episode starts at this
step, where a recurrent policy starts from fresh memory). :func:`actor_critic_policy` makes one
from an :class:`~lamella.agents.actor_critic.ActorCritic` and its parameters.

Any lamella env works: an auto-resetting env (the default of :func:`lamella.envs.make`; the
observation that ended an episode is read from ``info["final_observation"]``), a bare env
(``make(..., autoreset=False)`` or a user-written one: the collector resets it with
``env.reset_done``), wrapped envs, and multi-agent envs (a leading agent axis after the env axis
on observations, actions, rewards and flags). ``env_params`` is an argument of every call, so a
teacher can hand new levels (params) each iteration; with ``params_axis=0`` each env gets its
own entry of a batched params pytree.

Keys come from :func:`lamella.agents.runner.hashed_keys` (a hash, not Threefry: inside the step
loop Threefry costs more than a CartPole step on CPU).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from lamella.agents._unroll import loop_unroll, packed_scan
from lamella.agents.devices import DeviceAxis
from lamella.agents.runner import hashed_keys
from lamella.buffers import Transition as StoredTransition
from lamella.envs.environment import Environment

__all__ = [
    "PolicyStep",
    "Rollout",
    "RolloutState",
    "Transition",
    "actor_critic_policy",
    "make_rollout",
    "next_memory",
    "recorded_experience",
]

ENV_AXIS = "envs"


class PolicyStep(NamedTuple):
    """What a policy returns for one step of a batch of envs (leading axis ``num_envs``).

    Attributes:
        action: the action passed to ``env.step``.
        raw_action: the distribution's raw sample (see :mod:`lamella.agents.distributions`),
            what a log-probability is taken of; equal to ``action`` for discrete actions.
        log_prob: float32 log-probability of ``raw_action`` (zeros if the policy has none).
        value: float32 value estimate of ``obs`` (zeros if the policy has no critic or does
            not record it).
    """

    action: Any
    raw_action: Any
    log_prob: jax.Array
    value: jax.Array


class Transition(struct.PyTreeNode):
    """A time-major batch of transitions: every field has leading axes ``(num_steps, num_envs)``.

    Attributes:
        obs: the observation acted on (as the env returned it: not normalised).
        action: the action sent to the env.
        raw_action: the policy's raw sample (``PolicyStep.raw_action``).
        log_prob: float32, log-probability of ``raw_action`` when it was taken.
        value: float32, the policy's value of ``obs``.
        reward: float32 reward (``(..., num_agents)`` for multi-agent envs).
        terminated: bool, the step reached a terminal state.
        truncated: bool, the step hit a time limit (or other cut) without terminating.
        final_obs: the observation the step led to: the episode's last one where it ended
            (``info["final_observation"]``), else the next observation. Values of it are the
            bootstrap targets: :func:`lamella.agents.losses.gae_advantages` uses them at
            truncations and ignores them at terminations.
        reset: bool ``(num_steps, num_envs)``: this step starts an episode (the policy's memory
            was reset before it).
        memory: the policy's memory before the step (``()`` for feed-forward policies).
        info: the entries of the env's ``info`` named by ``info_keys``.
    """

    obs: Any
    action: Any
    raw_action: Any
    log_prob: jax.Array
    value: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    final_obs: Any
    reset: jax.Array
    memory: Any
    info: dict[str, Any]

    @property
    def done(self) -> jax.Array:
        """The episode ended at this step (terminated or truncated)."""
        return jnp.logical_or(self.terminated, self.truncated)


class RolloutState(struct.PyTreeNode):
    """What a collector carries from one rollout to the next (leading axis ``num_envs``).

    Attributes:
        env_state: the envs' states.
        obs: the observations the next step acts on.
        memory: the policy's memory (``()`` for feed-forward policies).
        reset: bool ``(num_envs,)``: the next step starts an episode.
    """

    env_state: Any
    obs: Any
    memory: Any
    reset: jax.Array


Policy = Callable[[jax.Array, Any, Any, jax.Array], tuple[Any, PolicyStep]]


class Rollout(NamedTuple):
    """A rollout collector (see the module docs).

    Attributes:
        init: ``init(key, env_params, memory=()) -> RolloutState``: reset ``num_envs`` envs.
        collect: ``collect(state, policy, key, env_params) -> (state, Transition)``.
        num_steps: steps per env per call.
        num_envs: envs stepped in parallel.
    """

    init: Callable[..., RolloutState]
    collect: Callable[[RolloutState, Policy, jax.Array, Any], tuple[RolloutState, Transition]]
    num_steps: int
    num_envs: int


def recorded_experience(transitions: Transition | StoredTransition, **extra: Any) -> dict[str, Any]:
    """What a runner's ``record_step`` hands the driver to record (flashbax Vault's OG-MARL names):
    ``observations`` (the observation acted on), ``actions``, ``rewards``, ``terminals``,
    ``truncations``, each with the transitions' leading axes (``(num_steps, num_envs)`` for a
    rollout's, ``(num_envs,)`` for the off-policy loop's one step of lamella-buffers'
    ``Transition``), plus ``extra`` entries (for example ``infos``)."""
    return {
        "observations": transitions.obs,
        "actions": transitions.action,
        "rewards": transitions.reward,
        "terminals": transitions.terminated,
        "truncations": transitions.truncated,
        **extra,
    }


def make_rollout(
    env: Environment[Any, Any],
    num_steps: int,
    num_envs: int,
    *,
    info_keys: Sequence[str] = (),
    params_axis: int | None = None,
    axis_name: str = ENV_AXIS,
    devices: DeviceAxis | None = None,
) -> Rollout:
    """A collector of ``num_steps`` steps of ``num_envs`` copies of ``env`` (see the module docs).

    Args:
        env: any lamella env (auto-resetting or not, wrapped or not, single- or multi-agent).
        num_steps: steps per env per ``collect``.
        num_envs: envs stepped in parallel (one ``jax.vmap``).
        info_keys: entries of the env's ``info`` to keep in ``Transition.info`` (for example
            ``("returned_episode", "returned_episode_returns")`` from
            :class:`lamella.envs.wrappers.EpisodeStatistics`).
        params_axis: ``None``: every env gets the same ``env_params``; ``0``: ``env_params``
            has a leading ``num_envs`` axis (one level per env).
        axis_name: the name of the env axis of the vmap, for wrappers that pool statistics
            over it (``NormalizeReward(..., axis_name=...)``).
        devices: the mesh axis when the envs are split over devices
            (:class:`~lamella.agents.devices.DeviceAxis`): the collector then steps this
            device's block of ``num_envs / devices.size`` envs with exactly the keys one device
            gives those envs (its ``num_envs`` stays the global count). With ``params_axis=0``,
            ``env_params`` holds this device's block. A policy for it draws its block of the
            batch's actions (``actor_critic_policy(..., devices=...)``).

    Raises:
        ValueError: ``num_steps`` or ``num_envs`` below 1, or ``params_axis`` not None or 0.
    """
    if int(num_steps) < 1 or int(num_envs) < 1:
        raise ValueError(f"make_rollout: num_steps ({num_steps}) and num_envs ({num_envs}) must be >= 1.")
    if params_axis not in (None, 0):
        raise ValueError(f"make_rollout: params_axis must be None or 0, got {params_axis!r}.")
    info_keys = tuple(info_keys)
    devices = devices or DeviceAxis()
    total_envs = int(num_envs)
    num_envs = devices.local(total_envs, "num_envs")

    def env_keys_of(key_env: jax.Array) -> jax.Array:
        if not devices.sharded:
            return hashed_keys(key_env, (num_steps, num_envs))
        return hashed_keys(key_env, (num_steps, total_envs), block=(1, devices.start(num_envs), num_envs))

    def reset_keys_of(key: jax.Array) -> jax.Array:
        if not devices.sharded:
            return hashed_keys(key, (num_envs,))
        return hashed_keys(key, (total_envs,), block=(0, devices.start(num_envs), num_envs))

    env_reset = jax.vmap(env.reset, in_axes=(0, params_axis), axis_name=axis_name)
    env_step = jax.vmap(env.step, in_axes=(0, 0, 0, params_axis), axis_name=axis_name)
    env_reset_done = jax.vmap(env.reset_done, in_axes=(0, 0, 0, 0, params_axis), axis_name=axis_name)

    def init(key: jax.Array, env_params: Any, memory: Any = ()) -> RolloutState:
        obs, env_state = env_reset(devices.take(jax.random.split(key, total_envs)), env_params)
        return RolloutState(env_state, obs, memory, jnp.ones((num_envs,), bool))

    def collect(
        state: RolloutState, policy: Policy, key: jax.Array, env_params: Any
    ) -> tuple[RolloutState, Transition]:
        key_act, key_env = hashed_keys(key, (2,))
        act_keys = hashed_keys(key_act, (num_steps,))
        env_keys = env_keys_of(key_env)
        # The key a bare env's resets derive from: the step's key of env 0 (of the whole batch).
        first_env_keys = (
            env_keys[:, 0]
            if not devices.sharded
            else hashed_keys(key_env, (num_steps, total_envs), block=(1, 0, 1))[:, 0]
        )

        def one_step(
            state: RolloutState, keys: tuple[jax.Array, jax.Array, jax.Array]
        ) -> tuple[RolloutState, Transition]:
            key_a, keys_e, key_first = keys
            memory, out = policy(key_a, state.obs, state.memory, state.reset)
            obs, env_state, reward, terminated, truncated, info = env_step(
                keys_e, state.env_state, out.action, env_params
            )
            done = _env_done(terminated, truncated, num_envs)
            if "final_observation" in info:
                final_obs = info["final_observation"]
            else:
                # A bare env: the observation it returned is the final one; reset the done envs.
                final_obs = obs
                obs, env_state = env_reset_done(reset_keys_of(key_first), done, env_state, obs, env_params)
            missing = [name for name in info_keys if name not in info]
            if missing:
                raise KeyError(
                    f"make_rollout: info_keys {missing} are not in the env's info (it has {sorted(info)}); "
                    "wrap the env (e.g. lamella.envs.wrappers.EpisodeStatistics) or drop them."
                )
            transition = Transition(
                obs=state.obs,
                action=out.action,
                raw_action=out.raw_action,
                log_prob=out.log_prob,
                value=out.value,
                reward=reward,
                terminated=terminated,
                truncated=truncated,
                final_obs=final_obs,
                reset=state.reset,
                memory=state.memory,
                info={name: info[name] for name in info_keys},
            )
            return RolloutState(env_state, obs, memory, done), transition

        return packed_scan(
            one_step,
            state,
            (act_keys, env_keys, first_env_keys),
            batch=num_envs,
            unroll=loop_unroll(num_steps),
        )

    return Rollout(init=init, collect=collect, num_steps=int(num_steps), num_envs=total_envs)


def _env_done(terminated: jax.Array, truncated: jax.Array, num_envs: int) -> jax.Array:
    """``(num_envs,)`` episode-over flags; with an agent axis, an env is done when all agents are."""
    done = jnp.logical_or(terminated, truncated)
    return done.reshape((num_envs, -1)).all(-1)


def next_memory(transitions: Transition, last_memory: Any) -> Any:
    """The memory after each step, ``(num_steps, num_envs, ...)``: the memory the next step
    started from (``transitions.memory[1:]``), then ``last_memory`` (the collector's final state's).

    A recurrent critic's value of ``transitions.final_obs`` takes this memory (not reset: the
    final observation belongs to the episode that just ended).
    """
    return jax.tree.map(
        lambda seq, last: jnp.concatenate([seq[1:], last[None]], axis=0), transitions.memory, last_memory
    )


def actor_critic_policy(
    actor_critic: Any,
    params: Any,
    preprocess: Callable[[Any], Any] | None = None,
    devices: DeviceAxis | None = None,
    record_value: bool = True,
) -> Policy:
    """A collector's policy from an :class:`~lamella.agents.actor_critic.ActorCritic`: samples
    its distribution, records the log-probability and the value.

    Args:
        actor_critic: the network's pure functions.
        params: its parameters.
        preprocess: applied to observations before the network (for example observation
            normalisation); the transitions keep the observations as the env returned them.
        devices: the mesh axis when the batch is split over devices: each device samples its
            block of the actions one device samples for the whole batch.
        record_value: False records zeros as the value, so a compiled rollout of a feed-forward
            network leaves the critic out of every step; an update that computes the values of
            the whole batch at once from ``transitions.obs`` (with the same parameters) gets
            what the critic would have recorded, in one pass instead of one per step.
    """
    devices = devices or DeviceAxis()

    def policy(key: jax.Array, obs: Any, memory: Any, reset: jax.Array) -> tuple[Any, PolicyStep]:
        obs_in = obs if preprocess is None else preprocess(obs)
        memory, dist, value = actor_critic.step(params, memory, obs_in, reset)
        raw = dist.sample(key, devices.start(reset.shape[0])) if devices.sharded else dist.sample(key)
        if not record_value:
            value = jnp.zeros_like(value)
        return memory, PolicyStep(dist.to_action(raw), raw, dist.log_prob(raw), value)

    return policy
