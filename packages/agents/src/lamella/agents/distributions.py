"""Action distributions and the heads that produce them, for Discrete, MultiDiscrete and Box spaces.

Every distribution works on a *raw* sample, the value whose log-probability the
policy gradient needs, and maps it to the env's action with ``to_action``:

* :class:`Categorical` / :class:`MultiCategorical`: raw = action (int32).
* :class:`Gaussian` with ``squash="tanh"``: raw ``u`` is the Gaussian sample,
  the action is ``low + (tanh(u) + 1) / 2 * (high - low)``; ``log_prob`` includes
  the change-of-variables term. Its entropy is the base Gaussian's (the squashed
  one has no closed form; this is the usual surrogate).
* :class:`Gaussian` with ``squash="clip"``: the action is ``clip(u, low, high)``
  and ``log_prob`` is the Gaussian's (the clip belongs to the env).

Learners store raw samples, so no ``atanh`` of a saturated action is ever taken.
Randomness for a whole batch comes from one key, hashed into uniform bits by
:mod:`lamella.envs.random` (a dozen integer operations per number instead of a
Threefry evaluation: on CPU, Threefry in the rollout loop costs more than the
policy network, and its code is a large part of the compile time).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from lamella.agents.networks import Dense, orthogonal
from lamella.envs import random as fast_random
from lamella.envs import spaces

__all__ = ["ActionHead", "Categorical", "Gaussian", "MultiCategorical", "check_action_space", "rows_index"]

_LOG_2PI = float(np.log(2 * np.pi))


def rows_index(shape: tuple[int, ...], first_row: Any) -> Any:
    """Flat positions of an array of ``shape`` whose leading axis is rows ``first_row, ...`` of a
    larger batch (``None``: the whole batch, drawn as it always was)."""
    if first_row is None:
        return None
    row = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return jnp.asarray(first_row, jnp.uint32) * np.uint32(row) + jnp.arange(
        int(np.prod(shape)), dtype=jnp.uint32
    ).reshape(shape)


def _sample_categorical(key: jax.Array, logits: jax.Array, first_row: Any = None) -> jax.Array:
    """Gumbel-max sampling over the last axis with hashed uniforms (one key for the batch)."""
    u = fast_random.uniform(key, logits.shape, vector=True, index=rows_index(logits.shape, first_row))
    u = jnp.maximum(u, np.float32(1e-20))
    return jnp.argmax(logits - jnp.log(-jnp.log(u)), axis=-1).astype(jnp.int32)


def _chosen(log_p: jax.Array, raw: jax.Array) -> jax.Array:
    """``log_p[..., raw]`` by a one-hot select over the last axis, not a gather: the same values,
    and a gradient without a scatter (on a GPU the scatter and its separate softmax were an eighth
    of IPPO's update)."""
    hit = jnp.arange(log_p.shape[-1], dtype=jnp.int32) == raw[..., None].astype(jnp.int32)
    return jnp.sum(jnp.where(hit, log_p, np.float32(0.0)), axis=-1)


@struct.dataclass
class Categorical:
    """Categorical over the last axis of ``logits`` (float32 ``(..., n)``)."""

    logits: jax.Array

    def sample(self, key: jax.Array, first_row: Any = None) -> jax.Array:
        return _sample_categorical(key, self.logits, first_row)

    def log_prob(self, raw: jax.Array) -> jax.Array:
        return _chosen(jax.nn.log_softmax(self.logits), raw)

    def entropy(self) -> jax.Array:
        log_p = jax.nn.log_softmax(self.logits)
        return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)

    def mode(self) -> jax.Array:
        return jnp.argmax(self.logits, axis=-1).astype(jnp.int32)

    def to_action(self, raw: jax.Array) -> jax.Array:
        return raw


@struct.dataclass
class MultiCategorical:
    """Independent categoricals, one per entry of a MultiDiscrete action.

    ``logits`` float32 ``(..., len(nvec), max(nvec))``; entries beyond ``nvec[i]``
    are masked to -1e9 (probability 0) when the distribution is built by :class:`ActionHead`.
    """

    logits: jax.Array

    def sample(self, key: jax.Array, first_row: Any = None) -> jax.Array:
        return _sample_categorical(key, self.logits, first_row)

    def log_prob(self, raw: jax.Array) -> jax.Array:
        return _chosen(jax.nn.log_softmax(self.logits), raw).sum(-1)

    def entropy(self) -> jax.Array:
        log_p = jax.nn.log_softmax(self.logits)
        return -jnp.sum(jnp.exp(log_p) * log_p, axis=(-2, -1))

    def mode(self) -> jax.Array:
        return jnp.argmax(self.logits, axis=-1).astype(jnp.int32)

    def to_action(self, raw: jax.Array) -> jax.Array:
        return raw


@struct.dataclass
class Gaussian:
    """Diagonal Gaussian over ``(..., dim)``, tanh-squashed or clipped into ``[low, high]``."""

    mean: jax.Array
    log_std: jax.Array
    low: jax.Array
    high: jax.Array
    squash: str = struct.field(pytree_node=False, default="tanh")

    def sample(self, key: jax.Array, first_row: Any = None) -> jax.Array:
        shape = jnp.shape(self.mean)
        noise = fast_random.normal(key, shape, vector=True, index=rows_index(shape, first_row))
        return self.mean + jnp.exp(self.log_std) * noise

    def _base_log_prob(self, raw: jax.Array) -> jax.Array:
        z = (raw - self.mean) * jnp.exp(-self.log_std)
        return jnp.sum(-0.5 * jnp.square(z) - self.log_std - 0.5 * _LOG_2PI, axis=-1)

    def log_prob(self, raw: jax.Array) -> jax.Array:
        base = self._base_log_prob(raw)
        if self.squash == "tanh":
            half_range = (self.high - self.low) / 2
            # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable for large |u|.
            log_det = 2 * (np.log(2.0) - raw - jax.nn.softplus(-2 * raw)) + jnp.log(half_range)
            base = base - jnp.sum(log_det, axis=-1)
        return base

    def entropy(self) -> jax.Array:
        log_std = jnp.broadcast_to(self.log_std, jnp.shape(self.mean))
        return jnp.sum(log_std + 0.5 * (1 + _LOG_2PI), axis=-1)

    def mode(self) -> jax.Array:
        return self.mean

    def to_action(self, raw: jax.Array) -> jax.Array:
        if self.squash == "tanh":
            return self.low + (jnp.tanh(raw) + 1) / 2 * (self.high - self.low)
        return jnp.clip(raw, self.low, self.high)


Distribution = Categorical | MultiCategorical | Gaussian


def check_action_space(space: spaces.Space, squash: str = "tanh") -> None:
    """Raise a clear error for action spaces the heads do not support."""
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete)):
        return
    if isinstance(space, spaces.Box):
        if len(space.shape) != 1:
            raise ValueError(f"Box action spaces must be 1-D; got shape {space.shape}. Flatten the actions.")
        if squash not in ("tanh", "clip"):
            raise ValueError(f"continuous_action must be 'tanh' or 'clip', got {squash!r}.")
        if squash == "tanh" and not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise ValueError("tanh squashing needs a bounded Box action space; use continuous_action='clip'.")
        return
    raise TypeError(
        f"Unsupported action space {space!r}: the action heads handle Discrete, MultiDiscrete and 1-D Box."
    )


class ActionHead(nn.Module):
    """A dense layer from features to the distribution of ``action_space``.

    Output layer initialised orthogonally with gain 0.01 (near-uniform initial
    policy). Box actions get a state-independent learned ``log_std`` (initial
    value ``log_std_init``).

    Attributes:
        action_space: a Discrete, MultiDiscrete or 1-D Box space.
        squash: for Box: ``"tanh"`` or ``"clip"``.
        log_std_init: initial log standard deviation for Box.
        fast_gradient: the output layer is :class:`~lamella.agents.networks.Dense` (a faster
            gradient on the CPU) instead of ``flax.linen.Dense``.
    """

    action_space: Any
    squash: str = "tanh"
    log_std_init: float = 0.0
    fast_gradient: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> Distribution:
        space = self.action_space
        init = orthogonal(0.01)
        layer = Dense if self.fast_gradient else nn.Dense
        if isinstance(space, spaces.Discrete):
            return Categorical(layer(space.n, kernel_init=init)(x))
        if isinstance(space, spaces.MultiDiscrete):
            nvec = np.asarray(space.nvec).reshape(-1)
            width = int(nvec.max())
            logits = layer(len(nvec) * width, kernel_init=init)(x)
            logits = logits.reshape((*x.shape[:-1], len(nvec), width))
            valid = np.arange(width)[None, :] < nvec[:, None]
            return MultiCategorical(jnp.where(valid, logits, -1e9))
        dim = space.shape[0]
        mean = layer(dim, kernel_init=init)(x)
        log_std = self.param("log_std", nn.initializers.constant(self.log_std_init), (dim,))
        # Every field with the mean's shape, so a distribution over a sequence slices like an
        # array (the recurrent actor-critic's one step is ``dist[0]`` of a length-1 sequence).
        shape = mean.shape
        low = jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), shape)
        high = jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), shape)
        return Gaussian(mean, jnp.broadcast_to(log_std, shape), low, high, squash=self.squash)
