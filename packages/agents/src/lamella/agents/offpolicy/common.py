"""What the off-policy agents share: the batch they learn from, observation and action
conversion, networks, and Polyak averaging."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from lamella.agents.devices import DeviceAxis
from lamella.agents.distributions import rows_index
from lamella.agents.networks import activation_by_name
from lamella.envs import random as fast_random
from lamella.envs import spaces

__all__ = [
    "ACTION_MASK",
    "ActionScaler",
    "Batch",
    "ContinuousCritic",
    "DeterministicActor",
    "DiscreteActor",
    "DiscreteCritic",
    "QNetwork",
    "SquashedGaussianActor",
    "device_block",
    "flatten_observation",
    "obs_example_input",
    "polyak",
    "split_action_mask",
    "squashed_gaussian_sample",
    "without_action_mask",
]

#: The key of a dict observation that holds the legal actions (bool ``(..., num_actions)``), as
#: lamella-marl's ``MultiAgentObservation`` gives it. DQN reads it instead of feeding it to its network.
ACTION_MASK = "action_mask"


@struct.dataclass
class Batch:
    """A batch of (n-step) transitions, what ``agent.update`` of every off-policy agent takes.

    Any object with these attributes works (``lamella.buffers.NStepTransition`` plus a key, for
    example). Leading axis ``batch`` on every leaf.

    Attributes:
        obs: observations (an array, or a goal dict ``observation / achieved_goal / desired_goal``).
        action: actions in the env's units: int32 ``(batch,)`` for Discrete, float32
            ``(batch, action_dim)`` for Box.
        reward: float32 ``(batch,)``, the discounted sum of the k rewards of the transition.
        discount: float32 ``(batch,)``: ``gamma ** k``, or 0 where the episode terminated. A
            time-limit truncation is *not* a termination: ``next_obs`` is then the true final
            observation and the target bootstraps from it.
        next_obs: observations to bootstrap from.
        key: PRNG key of the update's randomness (next-action sampling, target noise).
    """

    obs: Any
    action: jax.Array
    reward: jax.Array
    discount: jax.Array
    next_obs: Any
    key: jax.Array


def device_block(batch: Batch, devices: DeviceAxis) -> Batch:
    """This device's equal block of a sampled batch (every device samples the whole batch with
    the same key; its ``key`` stays whole). On one device, the batch's own leaves."""
    obs, action, reward, discount, next_obs = devices.take(
        (batch.obs, batch.action, batch.reward, batch.discount, batch.next_obs)
    )
    return Batch(obs, action, reward, discount, next_obs, batch.key)


def flatten_observation(obs: Any, batch_ndim: int = 1) -> jax.Array:
    """The network input of a batch of observations, float32 ``(*batch, features)``.

    A goal dict becomes ``concat(observation, desired_goal)`` (the achieved goal is a function
    of the observation); any other dict or tuple concatenates its leaves (dict keys in sorted
    order); an array is flattened after the batch axes.
    """
    if isinstance(obs, Mapping) and "observation" in obs and "desired_goal" in obs:
        leaves = [obs["observation"], obs["desired_goal"]]
    else:
        leaves = jax.tree.leaves(obs)
    parts = [jnp.asarray(x, jnp.float32) for x in leaves]
    parts = [x.reshape((*x.shape[:batch_ndim], -1)) for x in parts]
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=-1)


def split_action_mask(obs: Any) -> tuple[Any, jax.Array | None]:
    """``(obs without its action mask, bool mask (..., num_actions))``; ``(obs, None)`` when
    ``obs`` is not a dict holding :data:`ACTION_MASK`."""
    if isinstance(obs, Mapping) and ACTION_MASK in obs:
        rest = {k: v for k, v in obs.items() if k != ACTION_MASK}
        return rest, jnp.asarray(obs[ACTION_MASK], jnp.bool_)
    return obs, None


def without_action_mask(space: spaces.Space) -> spaces.Space:
    """``space`` less its :data:`ACTION_MASK` entry (a Dict space holding one), else ``space``."""
    if isinstance(space, spaces.Dict) and ACTION_MASK in space.spaces:
        return spaces.Dict({k: v for k, v in space.spaces.items() if k != ACTION_MASK})
    return space


class ActionScaler:
    """Maps a 1-D Box's actions to ``[-1, 1]`` (what actors output and critics take) and back."""

    def __init__(self, space: spaces.Space):
        if not isinstance(space, spaces.Box) or len(space.shape) != 1:
            raise TypeError(
                f"This agent needs a 1-D Box action space, got {space!r}; for Discrete actions use DQN or "
                "discrete SAC."
            )
        low, high = np.asarray(space.low, np.float32), np.asarray(space.high, np.float32)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ValueError(f"The action space {space!r} must be bounded (finite low and high).")
        self.low, self.high = np.broadcast_to(low, space.shape), np.broadcast_to(high, space.shape)
        self.dim = int(space.shape[0])

    def to_env(self, unit: jax.Array) -> jax.Array:
        # The jax array on the left, so the sum is typed (and is) a jax array.
        return (jnp.clip(unit, -1.0, 1.0) + 1.0) * 0.5 * (self.high - self.low) + self.low

    def to_unit(self, action: jax.Array) -> jax.Array:
        half = np.where(self.high > self.low, (self.high - self.low) * 0.5, 1.0)
        return (jnp.asarray(action, jnp.float32) - (self.high + self.low) * 0.5) / half


def polyak(target: Any, online: Any, tau: float | jax.Array) -> Any:
    """``(1 - tau) * target + tau * online`` leaf by leaf (``tau = 1``: a hard copy)."""
    return jax.tree.map(lambda t, o: (1.0 - tau) * t + tau * o, target, online)


def apply_fn(module: nn.Module) -> Callable[..., Any]:
    """``module.apply``, typed as returning the network's output.

    flax types ``Module.apply`` as ``Any | tuple[Any, variables]`` (the tuple only when called with
    ``mutable=``, which these agents never pass); this is the one place that says so.
    """
    return module.apply


def _mlp(x: jax.Array, hidden_sizes: Sequence[int], activation: str, layer_norm: bool = False) -> jax.Array:
    act = activation_by_name(activation)
    for size in hidden_sizes:
        x = nn.Dense(size)(x)
        x = act(nn.LayerNorm()(x) if layer_norm else x)
    return x


class QNetwork(nn.Module):
    """Discrete Q-values ``(..., num_actions)``; ``dueling`` splits value and advantage streams."""

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "relu"
    dueling: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if not self.dueling:
            return nn.Dense(self.num_actions)(_mlp(x, self.hidden_sizes, self.activation))
        torso = _mlp(x, self.hidden_sizes[:-1], self.activation)
        act = activation_by_name(self.activation)
        width = self.hidden_sizes[-1] if self.hidden_sizes else 64
        value = nn.Dense(1)(act(nn.Dense(width)(torso)))
        advantage = nn.Dense(self.num_actions)(act(nn.Dense(width)(torso)))
        return value + advantage - advantage.mean(axis=-1, keepdims=True)


class _CriticMLP(nn.Module):
    hidden_sizes: Sequence[int]
    activation: str
    num_outputs: int
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(self.num_outputs)(_mlp(x, self.hidden_sizes, self.activation, self.layer_norm))


class ContinuousCritic(nn.Module):
    """An ensemble of ``num_critics`` independent Q(obs, action) networks.

    ``__call__(obs, action) -> float32 (num_critics, ..., num_outputs)`` (``num_outputs`` is 1
    for a value, the number of quantiles for TQC). ``layer_norm`` normalises every hidden
    layer's pre-activations (LayerNorm with a learned scale and offset).
    """

    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    num_critics: int = 2
    num_outputs: int = 1
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        ensemble = nn.vmap(
            _CriticMLP,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            out_axes=0,
            axis_size=self.num_critics,
        )
        return ensemble(tuple(self.hidden_sizes), self.activation, self.num_outputs, self.layer_norm)(
            jnp.concatenate([obs, action], axis=-1)
        )


class DiscreteCritic(nn.Module):
    """An ensemble of ``num_critics`` Q(obs, .) networks: ``float32 (num_critics, ..., num_actions)``
    (``layer_norm`` as in :class:`ContinuousCritic`)."""

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "relu"
    num_critics: int = 2
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        ensemble = nn.vmap(
            _CriticMLP,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            out_axes=0,
            axis_size=self.num_critics,
        )
        return ensemble(tuple(self.hidden_sizes), self.activation, self.num_actions, self.layer_norm)(obs)


class SquashedGaussianActor(nn.Module):
    """SAC's actor: ``(mean, log_std)`` of a Gaussian whose sample is squashed by tanh into [-1, 1]."""

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    log_std_min: float = -5.0
    log_std_max: float = 2.0

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = _mlp(obs, self.hidden_sizes, self.activation)
        mean = nn.Dense(self.action_dim)(x)
        log_std = nn.Dense(self.action_dim)(x)
        # A smooth bound keeps gradients alive at the limits (as in SB3/CleanRL).
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (jnp.tanh(log_std) + 1)
        return mean, log_std


def squashed_gaussian_sample(
    key: jax.Array, mean: jax.Array, log_std: jax.Array, first_row: Any = None
) -> tuple[jax.Array, jax.Array]:
    """A reparameterised sample ``tanh(mean + std * noise)`` and its log-probability ``(...,)``.

    ``first_row``: ``mean`` is rows ``first_row, ...`` of a larger batch (a device's block), and
    the noise is those rows of the larger batch's noise; None: the whole batch.
    """
    noise = fast_random.normal(key, mean.shape, vector=True, index=rows_index(mean.shape, first_row))
    u = mean + jnp.exp(log_std) * noise
    log_prob = jnp.sum(-0.5 * jnp.square(noise) - log_std - 0.5 * np.log(2 * np.pi), axis=-1)
    # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable for large |u|.
    log_prob = log_prob - jnp.sum(2 * (np.log(2.0) - u - jax.nn.softplus(-2 * u)), axis=-1)
    return jnp.tanh(u), log_prob


class DeterministicActor(nn.Module):
    """TD3/DDPG's actor: an action in [-1, 1] (tanh output)."""

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return jnp.tanh(nn.Dense(self.action_dim)(_mlp(obs, self.hidden_sizes, self.activation)))


class DiscreteActor(nn.Module):
    """Discrete SAC's actor: logits ``(..., num_actions)``."""

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return nn.Dense(self.num_actions)(_mlp(obs, self.hidden_sizes, self.activation))


def obs_example_input(observation_space: spaces.Space) -> jax.Array:
    """A zero network input of one observation of ``observation_space`` (batch of 1)."""
    example = jax.tree.map(
        lambda s: jnp.zeros((1, *s.shape), jnp.float32),
        _space_tree(observation_space),
        is_leaf=lambda s: isinstance(s, spaces.Space),
    )
    return flatten_observation(example)


def _space_tree(space: spaces.Space) -> Any:
    if isinstance(space, spaces.Dict):
        return {k: _space_tree(v) for k, v in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_space_tree(v) for v in space.spaces)
    return space
