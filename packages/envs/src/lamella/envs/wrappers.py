"""Wrappers: what happens at episode end, statistics, and observation/action transforms.

Every wrapper is an :class:`~lamella.envs.environment.Environment` itself, so they
stack, and they keep the pure ``reset/step`` contract. Stateful wrappers keep the
inner env's state in ``state.env_state``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

from lamella.envs import _inputs, spaces, struct
from lamella.envs import random as fast_random
from lamella.envs.environment import Environment, StepOutput, Wrapper, episode_done

__all__ = [
    "AutoReset",
    "ClipAction",
    "EpisodeStatistics",
    "FlattenObservation",
    "NormalizeObservation",
    "NormalizeReward",
    "OptimisticReset",
    "TimeLimit",
    "Validate",
    "checked",
]

PRNGKey = jax.Array


def _where(condition: jax.Array, new: Any, old: Any) -> Any:
    return jax.tree.map(lambda a, b: jnp.where(condition, a, b), new, old)


class AutoReset(Wrapper):
    """Reset as soon as the episode ends; the returned obs/state are then the new episode's.

    The observation that ended the episode is in ``info["final_observation"]``
    (equal to the returned obs on other steps), so value targets can bootstrap
    from it when the episode was truncated.

    An env class that defines ``observation_of(state, params)`` and
    ``reset_where(key, done, state, params)`` (the state where ``done`` replaced by
    ``reset_env(key, params)``'s, exactly) computes the new state itself; the
    observation is then built from it. AMaze uses this to draw random levels only
    for the envs that are done under ``vmap``.
    """

    keeps_params = True

    def __init__(self, env: Environment[Any, Any]):
        super().__init__(env)
        _refuse_second_reset(env, "AutoReset(env)")

    def step_env(self, key: PRNGKey, state: Any, action: Any, params: Any) -> StepOutput:
        if self.stochastic_step:
            # A hashed second key: a Threefry split costs more than most env steps on CPU.
            key_step, key_reset = fast_random.fork(key), key
        else:
            # The bare step ignores its key, so the reset may use all of it.
            key_step = key_reset = key
        obs, next_state, reward, terminated, truncated, info = self.env.step_env(
            key_step, state, action, params
        )
        done = episode_done(terminated, truncated)
        if not self.cheap_done:
            # Every select below reads `done`; XLA on CPU would recompute it (and the part of the
            # step it depends on) in each of them. A division by a 1 it cannot see through makes
            # it compute `done` once (see lamella.envs.classic_control._once); the value is
            # unchanged. Envs whose `done` is a step-counter compare skip it (`cheap_done`): the
            # stored `done` is one more XLA kernel per step than recomputing the compare.
            done_float = done.astype(jnp.float32)
            done = done_float / (1.0 + 0.0 * done_float) != 0.0
        info = {**info, "final_observation": obs}
        # Looked up on the class: a wrapper in between (which may change the observation) does
        # not define them, and its attribute delegation must not find the inner env's.
        observation_of: Any = getattr(type(self.env), "observation_of", None)
        reset_where = getattr(type(self.env), "reset_where", None)
        mask_of: Any = getattr(type(self.env), "action_mask", None)
        if observation_of is not None and reset_where is not None:
            # The env selects the reset state itself (``reset_where(key, done, state, params)``,
            # equal to the select below), e.g. drawing random levels only for the envs that are
            # done under vmap (lamella.envs.maze.AMaze).
            new_state = reset_where(self.env, key_reset, done, next_state, params)
            if mask_of is not None and "action_mask" in info:
                info["action_mask"] = jnp.where(
                    done, mask_of(self.env, new_state, params), info["action_mask"]
                )
            return observation_of(self.env, new_state, params), new_state, reward, terminated, truncated, info
        with_mask = mask_of is not None and "action_mask" in info
        # The env's observation is a function of its state (observation_of): select the (small)
        # state and build one observation from it, instead of the step's and the reset's
        # observations and a select over the (large) observation. When the caller ignores the
        # final observation the step's observation is never built.
        select_obs = observation_of is None

        def reset_where_done(key: PRNGKey, done: jax.Array, kept: Any, params: Any) -> Any:
            obs, state, mask = kept
            reset_obs, reset_state = self.env.reset_env(key, params)
            if with_mask:
                # The inner step's action mask is the last state's; after a reset the agents act
                # in the new episode's first state (class lookup, as for observation_of above).
                mask = jnp.where(done, mask_of(self.env, reset_state, params), mask)
            if select_obs:
                obs = _where(done, reset_obs, obs)
            return obs, _where(done, reset_state, state), mask

        if self.sparse_reset and (self.sparse_reset_on_accelerators or jax.default_backend() == "cpu"):
            reset_where_done = _only_when_some_done(reset_where_done)
        kept = (obs if select_obs else None, next_state, info["action_mask"] if with_mask else None)
        obs, new_state, mask = reset_where_done(key_reset, done, kept, params)
        if with_mask:
            info["action_mask"] = mask
        if not select_obs:
            obs = observation_of(self.env, new_state, params)
        return obs, new_state, reward, terminated, truncated, info


def _only_when_some_done(reset_where_done: Any) -> Any:
    """``reset_where_done(key, done, kept, params)`` (the reset where ``done``, ``kept``
    elsewhere) that under ``vmap`` (a custom batching rule) computes the batch's resets only on
    steps where some env is done: a branch over the whole batch, where the per-env function can
    only select. The branch computes what the select would keep; around it XLA may fuse the step
    otherwise, so float dynamics can round apart in the last bits (``Environment.sparse_reset``)."""

    @jax.custom_batching.custom_vmap
    def only_when_some_done(key: PRNGKey, done: jax.Array, kept: Any, params: Any) -> Any:
        return reset_where_done(key, done, kept, params)

    @only_when_some_done.def_vmap
    def rule(axis_size: int, in_batched: list[Any], key: Any, done: Any, kept: Any, params: Any) -> Any:
        axes = jax.tree.map(lambda batched: 0 if batched else None, tuple(in_batched))
        batched_kept = jax.tree.map(
            lambda x, batched: x if batched else jnp.broadcast_to(x, (axis_size, *jnp.shape(x))),
            kept,
            in_batched[2],
        )
        out = jax.lax.cond(
            jnp.any(done),
            lambda: jax.vmap(reset_where_done, in_axes=axes)(key, done, kept, params),
            lambda: batched_kept,
        )
        return out, jax.tree.map(lambda _: True, out)

    return only_when_some_done


def _check_setting(where: str, name: str, value: Any, fits: Any, expected: str) -> None:
    """Raise ValueError when the concrete ``value`` (a number or an array of them) does not
    satisfy ``fits`` (NaN never does); a traced value (a sweep's) is left alone."""
    try:
        array = np.asarray(value, dtype=np.float64)
    except Exception:  # traced, or not a number: the wrapper's arithmetic will say
        return
    if array.size and not (np.all(fits(array)) and not np.isnan(array).any()):
        raise ValueError(f"{where}: {name} must be {expected}, got {value!r}.")


def _refuse_second_reset(env: Any, where: str) -> None:
    """Raise :class:`~lamella.envs.EnvInputError` when ``env`` (or an env it wraps) already resets
    itself: a second reset wrapper would reset every ended episode twice and hand back the first
    reset's observation as ``info["final_observation"]``, silently."""
    inner = env
    while inner is not None:
        if isinstance(inner, (AutoReset, OptimisticReset)):
            raise _inputs.EnvInputError(
                f"{where}: {_inputs.env_label(env)} already resets itself (it holds an "
                f"{type(inner).__name__}; make(id) returns envs wrapped in AutoReset). A second reset "
                "wrapper would reset each ended episode twice and report the new episode's first "
                "observation as info['final_observation']. Use the env as it is, or wrap the bare "
                "env: env, params = lamella.envs.make(id, autoreset=False)."
            )
        inner = getattr(inner, "env", None)


class OptimisticReset:
    """A batch of ``num_envs`` envs that reset from a small pool of fresh states.

    Auto-reset under ``vmap`` computes a reset for every env on every step, then
    throws almost all of them away. This wrapper computes ``num_envs //
    reset_ratio`` resets per step and gives each env that is done one of them,
    picked at random. Two envs that end on the same step may start from the same
    state (rarely, and harmless for training); the rest of the contract is that of
    :class:`AutoReset` with a leading batch axis and a single key per call.
    """

    def __init__(self, env: Environment[Any, Any], num_envs: int, reset_ratio: int = 16):
        if num_envs < 1 or reset_ratio < 1:
            raise ValueError(
                f"OptimisticReset: num_envs ({num_envs}) and reset_ratio ({reset_ratio}) must be >= 1."
            )
        if num_envs % reset_ratio:
            raise ValueError(
                f"OptimisticReset: num_envs ({num_envs}) must be a multiple of reset_ratio ({reset_ratio})."
            )
        _refuse_second_reset(env, "OptimisticReset(env)")
        self.env = env
        self.num_envs = num_envs
        self.num_resets = num_envs // reset_ratio

    def __getattr__(self, name: str) -> Any:
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, key: PRNGKey, params: Any = None) -> tuple[Any, Any]:
        keys = jax.random.split(key, self.num_envs)
        return jax.vmap(self.env.reset, in_axes=(0, None))(keys, params)

    def step(self, key: PRNGKey, state: Any, action: Any, params: Any = None) -> StepOutput:
        key_step, key_reset, key_pick = jax.random.split(key, 3)
        step_keys = jax.random.split(key_step, self.num_envs)
        obs, next_state, reward, terminated, truncated, info = jax.vmap(
            self.env.step, in_axes=(0, 0, 0, None)
        )(step_keys, state, action, params)
        done = jax.vmap(episode_done)(terminated, truncated)
        pool_obs, pool_state = jax.vmap(self.env.reset, in_axes=(0, None))(
            jax.random.split(key_reset, self.num_resets), params
        )
        pick = fast_random.randint(key_pick, (self.num_envs,), 0, self.num_resets)
        take = lambda pool: pool[pick]  # noqa: E731
        reset_obs, reset_state = jax.tree.map(take, pool_obs), jax.tree.map(take, pool_state)
        batch_where = lambda new, old: jax.vmap(jnp.where)(done, new, old)  # noqa: E731
        info = {**info, "final_observation": obs}
        mask_of: Any = getattr(type(self.env), "action_mask", None)
        if mask_of is not None and "action_mask" in info:  # the reset state's mask, as in AutoReset
            reset_mask = jax.vmap(mask_of, in_axes=(None, 0, None))(self.env, reset_state, params)
            info["action_mask"] = batch_where(reset_mask, info["action_mask"])
        return (
            jax.tree.map(batch_where, reset_obs, obs),
            jax.tree.map(batch_where, reset_state, next_state),
            reward,
            terminated,
            truncated,
            info,
        )


class EpisodeStatisticsState(struct.PyTreeNode):
    env_state: Any
    episode_return: jax.Array  # float32, () or (num_agents,): return so far
    episode_length: jax.Array  # int32 (): steps so far
    returned_episode_return: jax.Array  # return of the last finished episode
    returned_episode_length: jax.Array  # length of the last finished episode


class EpisodeStatistics(Wrapper):
    """Track episode returns and lengths, including under ``vmap``.

    ``info`` gains ``returned_episode_returns`` / ``returned_episode_lengths``
    (last finished episode) and ``returned_episode`` (True on a step that ended
    one). Put it outside :class:`AutoReset`.
    """

    keeps_params = True
    wraps_state = True

    def _zeros(self) -> jax.Array:
        shape = (self.num_agents,) if self.num_agents > 1 else ()
        return jnp.zeros(shape, jnp.float32)

    def reset_env(self, key: PRNGKey, params: Any) -> tuple[Any, EpisodeStatisticsState]:
        obs, env_state = self.env.reset_env(key, params)
        zeros = self._zeros()
        zero_length = jnp.zeros((), jnp.int32)
        return obs, EpisodeStatisticsState(env_state, zeros, zero_length, zeros, zero_length)

    def step_env(self, key: PRNGKey, state: EpisodeStatisticsState, action: Any, params: Any) -> StepOutput:
        obs, env_state, reward, terminated, truncated, info = self.env.step_env(
            key, state.env_state, action, params
        )
        done = episode_done(terminated, truncated)
        episode_return = state.episode_return + reward
        episode_length = state.episode_length + 1
        new_state = EpisodeStatisticsState(
            env_state=env_state,
            episode_return=episode_return * (1 - done),
            episode_length=episode_length * (1 - done),
            returned_episode_return=jnp.where(done, episode_return, state.returned_episode_return),
            returned_episode_length=jnp.where(done, episode_length, state.returned_episode_length),
        )
        info = {
            **info,
            "returned_episode_returns": new_state.returned_episode_return,
            "returned_episode_lengths": new_state.returned_episode_length,
            "returned_episode": done,
        }
        return obs, new_state, reward, terminated, truncated, info

    def reset_done_env(
        self, key: PRNGKey, done: jax.Array, state: EpisodeStatisticsState, obs: Any, params: Any
    ) -> tuple[Any, EpisodeStatisticsState]:
        obs, env_state = self.env.reset_done(key, done, state.env_state, obs, params)
        return obs, state.replace(env_state=env_state)


class FlattenObservation(Wrapper):
    """Observations (a Box, or a Dict/Tuple of Boxes) become one flat float32 vector; a
    multi-agent env's keep their leading agent axis, float32 ``(n, D)``."""

    keeps_params = True

    def _rows(self) -> tuple[int, ...]:
        return (self.num_agents,) if self.num_agents > 1 else ()

    def _flatten(self, obs: Any) -> jax.Array:
        rows = self._rows()
        return jnp.concatenate(
            [jnp.reshape(x, (*rows, -1)).astype(jnp.float32) for x in jax.tree.leaves(obs)], -1
        )

    def reset_env(self, key: PRNGKey, params: Any) -> tuple[Any, Any]:
        obs, state = self.env.reset_env(key, params)
        return self._flatten(obs), state

    def step_env(self, key: PRNGKey, state: Any, action: Any, params: Any) -> StepOutput:
        obs, state, reward, terminated, truncated, info = self.env.step_env(key, state, action, params)
        if "final_observation" in info:
            info = {**info, "final_observation": self._flatten(info["final_observation"])}
        return self._flatten(obs), state, reward, terminated, truncated, info

    def observation_space(self, params: Any = None) -> spaces.Box:
        space = self.env.observation_space(params)
        leaves = jax.tree.leaves(space, is_leaf=lambda s: isinstance(s, spaces.Box))
        if isinstance(space, (spaces.Dict, spaces.Tuple)):
            # Dict entries in sorted-key order, the order in which jax.tree.leaves flattens a dict.
            inner = (
                [space.spaces[k] for k in sorted(space.spaces)]
                if isinstance(space, spaces.Dict)
                else space.spaces
            )
            leaves = list(inner)
        if not all(isinstance(s, spaces.Box) for s in leaves):
            raise TypeError(f"FlattenObservation needs Box observations, got {space!r}.")
        rows = self._rows()
        low, high = (
            np.concatenate(
                [np.broadcast_to(getattr(s, side), s.shape).reshape(*rows, -1) for s in leaves], -1
            ).astype(np.float32)
            for side in ("low", "high")
        )
        return spaces.Box(low, high, low.shape, jnp.float32)


class ClipAction(Wrapper):
    """Clip continuous actions into the action space's bounds before stepping.

    The bounds are those of ``env.action_space(params)`` at construction (default params when
    omitted): spaces are built from concrete numbers, never from traced params.
    """

    keeps_params = True

    def __init__(self, env: Environment[Any, Any], params: Any = None):
        super().__init__(env)
        space = env.action_space(params)
        if not isinstance(space, spaces.Box):
            raise TypeError(f"ClipAction needs a Box action space, got {space!r}.")
        self.low, self.high = np.asarray(space.low), np.asarray(space.high)

    def step_env(self, key: PRNGKey, state: Any, action: Any, params: Any) -> StepOutput:
        return self.env.step_env(key, state, jnp.clip(action, self.low, self.high), params)


class RunningMeanStd(struct.PyTreeNode):
    """Running mean and variance (parallel Welford); ``count`` starts at a small epsilon.

    The one home of running statistics in lamella: the normalising wrappers below keep one in
    their state, and lamella-agents' PPO keeps one in its train state (observation
    normalisation that greedy evaluation reuses).
    """

    mean: jax.Array  # float32, the statistic's shape
    var: jax.Array  # float32, the statistic's shape
    count: jax.Array  # float32 ()

    @classmethod
    def zeros(cls, shape: tuple[int, ...]) -> RunningMeanStd:
        return cls(
            jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32), jnp.asarray(1e-4, jnp.float32)
        )

    def update(self, x: jax.Array, axis_name: str | None) -> RunningMeanStd:
        """Add one sample ``x``; under ``vmap(..., axis_name=...)`` pool the samples of that axis."""
        if axis_name is None:
            batch_mean, batch_var, batch_count = x, jnp.zeros_like(x), jnp.asarray(1.0)
        else:
            batch_mean = jax.lax.pmean(x, axis_name)
            batch_var = jax.lax.pmean(jnp.square(x - batch_mean), axis_name)
            batch_count = jax.lax.psum(jnp.asarray(1.0), axis_name)
        return self.update_from_moments(batch_mean, batch_var, batch_count)

    def update_batch(self, batch: jax.Array) -> RunningMeanStd:
        """Add every sample of ``batch`` (any leading axes before the statistic's shape)."""
        batch = jnp.reshape(batch, (-1, *self.mean.shape))
        return self.update_from_moments(batch.mean(0), batch.var(0), jnp.asarray(batch.shape[0], jnp.float32))

    def update_from_moments(
        self, batch_mean: jax.Array, batch_var: jax.Array, batch_count: jax.Array
    ) -> RunningMeanStd:
        """Merge the mean, variance and count of a batch of samples."""
        delta = batch_mean - self.mean
        total = self.count + batch_count
        mean = self.mean + delta * batch_count / total
        m2 = (
            self.var * self.count
            + batch_var * batch_count
            + jnp.square(delta) * self.count * batch_count / total
        )
        return RunningMeanStd(mean, m2 / total, total)

    def normalize(self, x: jax.Array, clip: float = 10.0, epsilon: float = 1e-8) -> jax.Array:
        """``(x - mean) / sqrt(var + epsilon)``, clipped to ``[-clip, clip]``."""
        return jnp.clip((x - self.mean) / jnp.sqrt(self.var + epsilon), -clip, clip)


class NormalizeObservationState(struct.PyTreeNode):
    env_state: Any
    stats: RunningMeanStd


class NormalizeObservation(Wrapper):
    """Observations normalised by running mean and standard deviation, then clipped.

    Args:
        env: a Box-observation env.
        axis_name: when the env is vmapped with ``jax.vmap(..., axis_name=...)``,
            statistics are pooled over that axis (every env sees the same
            normaliser, as in PureJaxRL); None keeps per-env statistics.
        clip: bound on the normalised values.
    """

    keeps_params = True
    wraps_state = True

    def __init__(
        self,
        env: Environment[Any, Any],
        axis_name: str | None = None,
        clip: float = 10.0,
        epsilon: float = 1e-8,
    ):
        super().__init__(env)
        _check_setting(
            "NormalizeObservation", "clip", clip, lambda c: c > 0, "> 0 (the bound on normalised values)"
        )
        _check_setting("NormalizeObservation", "epsilon", epsilon, lambda e: e > 0, "> 0")
        self.axis_name, self.clip, self.epsilon = axis_name, clip, epsilon

    def _normalize(self, obs: jax.Array, stats: RunningMeanStd) -> jax.Array:
        return stats.normalize(obs, self.clip, self.epsilon)

    def reset_env(self, key: PRNGKey, params: Any) -> tuple[Any, NormalizeObservationState]:
        obs, env_state = self.env.reset_env(key, params)
        stats = RunningMeanStd.zeros(jnp.shape(obs)).update(obs, self.axis_name)
        return self._normalize(obs, stats), NormalizeObservationState(env_state, stats)

    def step_env(
        self, key: PRNGKey, state: NormalizeObservationState, action: Any, params: Any
    ) -> StepOutput:
        obs, env_state, reward, terminated, truncated, info = self.env.step_env(
            key, state.env_state, action, params
        )
        stats = state.stats.update(obs, self.axis_name)
        if "final_observation" in info:
            info = {**info, "final_observation": self._normalize(info["final_observation"], stats)}
        return (
            self._normalize(obs, stats),
            NormalizeObservationState(env_state, stats),
            reward,
            terminated,
            truncated,
            info,
        )

    def reset_done_env(
        self, key: PRNGKey, done: jax.Array, state: NormalizeObservationState, obs: Any, params: Any
    ) -> tuple[Any, NormalizeObservationState]:
        # Statistics persist across episodes; only the inner env resets. Where done, the inner
        # reset_done returns the fresh raw observation, which is normalised here.
        inner_obs, env_state = self.env.reset_done(key, done, state.env_state, obs, params)
        done = jnp.all(done) if jnp.ndim(done) else done
        normalized = jnp.where(done, self._normalize(inner_obs, state.stats), obs)
        return normalized, state.replace(env_state=env_state)

    def observation_space(self, params: Any = None) -> spaces.Box:
        shape = self.env.observation_space(params).shape
        return spaces.Box(-self.clip, self.clip, shape, jnp.float32)


class NormalizeRewardState(struct.PyTreeNode):
    env_state: Any
    discounted_return: jax.Array
    stats: RunningMeanStd


class NormalizeReward(Wrapper):
    """Rewards divided by the running standard deviation of the discounted return.

    ``info["raw_reward"]`` keeps the unscaled reward for logging. ``axis_name``
    pools statistics over a vmapped axis, as in :class:`NormalizeObservation`.
    """

    keeps_params = True
    wraps_state = True

    def __init__(
        self,
        env: Environment[Any, Any],
        gamma: float = 0.99,
        axis_name: str | None = None,
        epsilon: float = 1e-8,
    ):
        super().__init__(env)
        _check_setting(
            "NormalizeReward", "gamma", gamma, lambda g: (g >= 0) & (g <= 1), "in [0, 1] (a discount)"
        )
        _check_setting("NormalizeReward", "epsilon", epsilon, lambda e: e > 0, "> 0")
        self.gamma, self.axis_name, self.epsilon = gamma, axis_name, epsilon

    def reset_env(self, key: PRNGKey, params: Any) -> tuple[Any, NormalizeRewardState]:
        obs, env_state = self.env.reset_env(key, params)
        shape = (self.num_agents,) if self.num_agents > 1 else ()
        return obs, NormalizeRewardState(
            env_state, jnp.zeros(shape, jnp.float32), RunningMeanStd.zeros(shape)
        )

    def step_env(self, key: PRNGKey, state: NormalizeRewardState, action: Any, params: Any) -> StepOutput:
        obs, env_state, reward, terminated, truncated, info = self.env.step_env(
            key, state.env_state, action, params
        )
        done = episode_done(terminated, truncated)
        discounted_return = state.discounted_return * self.gamma + reward
        stats = state.stats.update(discounted_return, self.axis_name)
        new_state = NormalizeRewardState(env_state, discounted_return * (1 - done), stats)
        info = {**info, "raw_reward": reward}
        return obs, new_state, reward / jnp.sqrt(stats.var + self.epsilon), terminated, truncated, info

    def reset_done_env(
        self, key: PRNGKey, done: jax.Array, state: NormalizeRewardState, obs: Any, params: Any
    ) -> tuple[Any, NormalizeRewardState]:
        # Statistics persist across episodes; the discounted return restarts with the episode.
        obs, env_state = self.env.reset_done(key, done, state.env_state, obs, params)
        done = jnp.all(done) if jnp.ndim(done) else done
        return obs, state.replace(
            env_state=env_state, discounted_return=jnp.where(done, 0.0, state.discounted_return)
        )


class TimeLimitState(struct.PyTreeNode):
    env_state: Any
    steps: jax.Array  # int32 (): steps taken in this episode


class TimeLimit(Wrapper):
    """Truncate episodes after ``max_steps`` steps (on top of the env's own limit).

    To lengthen an env's own limit, override its params instead:
    ``make("CartPole-v1", max_steps_in_episode=1000)``.
    """

    keeps_params = True
    wraps_state = True

    def __init__(self, env: Environment[Any, Any], max_steps: int):
        super().__init__(env)
        self.max_steps = _inputs.integer_setting(max_steps, "max_steps", "TimeLimit", minimum=1)

    def reset_env(self, key: PRNGKey, params: Any) -> tuple[Any, TimeLimitState]:
        obs, env_state = self.env.reset_env(key, params)
        return obs, TimeLimitState(env_state, jnp.zeros((), jnp.int32))

    def step_env(self, key: PRNGKey, state: TimeLimitState, action: Any, params: Any) -> StepOutput:
        obs, env_state, reward, terminated, truncated, info = self.env.step_env(
            key, state.env_state, action, params
        )
        steps = state.steps + 1
        truncated = jnp.logical_or(truncated, steps >= self.max_steps)
        steps = jnp.where(episode_done(terminated, truncated), 0, steps)
        return obs, TimeLimitState(env_state, steps), reward, terminated, truncated, info

    def reset_done_env(
        self, key: PRNGKey, done: jax.Array, state: TimeLimitState, obs: Any, params: Any
    ) -> tuple[Any, TimeLimitState]:
        obs, env_state = self.env.reset_done(key, done, state.env_state, obs, params)
        done = jnp.all(done) if jnp.ndim(done) else done
        return obs, TimeLimitState(env_state, jnp.where(done, 0, state.steps))


def _describe(space: spaces.Space) -> str:
    return f"{space!r} (shape {space.shape}, dtype {space.dtype})"


class Validate(Wrapper):
    """Turn bad actions and bad observations into clear errors (for debug runs).

    Shape and dtype mistakes are raised when the step is traced. Values (an
    action outside the action space, a NaN or out-of-space observation) are
    checked with ``jax.experimental.checkify``; run the step through
    :func:`checked` (or ``checkify.checkify``) to raise them.

    Spaces hold concrete bounds, so they are built once, here, from ``params``
    (the env's default params when None): inside ``jit`` the params are traced
    and a space that depends on them (CartPole's observation bounds) could not
    be built from them.
    """

    keeps_params = True

    def __init__(self, env: Environment[Any, Any], params: Any = None):
        super().__init__(env)
        self._action_space = env.action_space(params)
        self._observation_space = env.observation_space(params)

    def _check_action_static(self, action: Any, params: Any) -> None:
        space = self._action_space
        if isinstance(space, (spaces.Tuple, spaces.Dict)):
            return
        action = jnp.asarray(action)
        if action.shape != space.shape:
            raise ValueError(
                f"{self.name}: action has shape {action.shape}, but the action space is {_describe(space)}. "
                "Pass one action per env (vmap over envs) of the space's shape."
            )
        wants_int = jnp.issubdtype(space.dtype, jnp.integer)
        if wants_int != jnp.issubdtype(action.dtype, jnp.integer):
            raise TypeError(
                f"{self.name}: action has dtype {action.dtype}, but the action space is {_describe(space)}. "
                f"Cast it with action.astype({space.dtype.name})."
            )

    def _check_observation(self, obs: Any, params: Any, where: str) -> None:
        for leaf in jax.tree.leaves(obs):
            if jnp.issubdtype(jnp.asarray(leaf).dtype, jnp.floating):
                checkify.check(~jnp.any(jnp.isnan(leaf)), f"{self.name}.{where} returned a NaN observation")
        checkify.check(
            self._observation_space.contains(obs),
            f"{self.name}.{where} returned an observation outside its observation space",
        )

    def reset_env(self, key: PRNGKey, params: Any) -> tuple[Any, Any]:
        obs, state = self.env.reset_env(key, params)
        self._check_observation(obs, params, "reset")
        return obs, state

    def step_env(self, key: PRNGKey, state: Any, action: Any, params: Any) -> StepOutput:
        self._check_action_static(action, params)
        space = self._action_space
        checkify.check(
            space.contains(jnp.asarray(action).astype(space.dtype)),
            f"{self.name}.step got an action outside its action space {space!r}: {{action}}",
            action=jnp.asarray(action),
        )
        out = self.env.step_env(key, state, action, params)
        self._check_observation(out[0], params, "step")
        return out


def checked(fn: Any) -> Any:
    """``fn`` under ``jit`` + ``checkify``: a failed check raises ``JaxRuntimeError`` with its message."""
    checked_fn = jax.jit(checkify.checkify(fn, errors=checkify.user_checks))

    def run(*args: Any, **kwargs: Any) -> Any:
        error, out = checked_fn(*args, **kwargs)
        error.throw()
        return out

    return run
