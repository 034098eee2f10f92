"""The actor-critic protocol: what an on-policy learner needs from a network, as pure functions.

An :class:`ActorCritic` wraps a network (feed-forward or recurrent: a network choice, made once
when it is built) behind one set of functions, so collectors and learners never ask which kind
it is::

    actor_critic = feedforward_actor_critic(FeedForwardActorCriticNet(action_space))
    params = actor_critic.init(key, obs_example)                         # obs_example (batch, ...)
    memory, dist, value = actor_critic.step(params, memory, obs, reset)  # one step of a batch
    log_prob, value, entropy = actor_critic.evaluate_actions(
        params, initial_memory, obs, reset, raw_action)                  # time-major (T, batch, ...)

``dist`` is one of :mod:`lamella.agents.distributions` (``sample``, ``log_prob``, ``entropy``,
``mode``, ``to_action``). ``memory`` is ``()`` for a feed-forward network and the recurrent
carry (leading axis ``batch``) otherwise; ``reset`` (bool ``(batch,)`` or ``(T, batch)``) marks
steps that start an episode, where a recurrent network starts from zero memory.

Parameters are a plain flax pytree; a population of networks is a ``jax.vmap`` over them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents.distributions import ActionHead
from lamella.agents.networks import (
    MLP,
    Dense,
    MinAtarCNN,
    RecurrentCore,
    ViewCNN,
    activation_by_name,
    orthogonal,
    zero_carry,
)

__all__ = [
    "TORSOS",
    "ActorCritic",
    "FeedForwardActorCriticNet",
    "RecurrentActorCriticNet",
    "feedforward_actor_critic",
    "recurrent_actor_critic",
]


class ActorCritic(NamedTuple):
    """A policy and value network as pure functions (see the module docs).

    Attributes:
        init: ``init(key, obs_example) -> params``; ``obs_example`` has a leading batch axis
            (an array, or for a feed-forward network a pytree of arrays such as a dict
            observation).
        initial_memory: ``initial_memory(batch_size) -> memory`` (``()`` if feed-forward).
        step: ``step(params, memory, obs, reset) -> (memory, distribution, value)`` for one
            step of a batch: ``obs`` ``(batch, ...)`` (an array, or a pytree of arrays such as a
            dict observation, each leaf with that leading axis), ``reset`` bool ``(batch,)``, ``value``
            float32 ``(batch,)``.
        evaluate_actions: ``evaluate_actions(params, memory, obs, reset, raw_action) ->
            (log_prob, value, entropy)`` over a time-major sequence: ``obs`` ``(T, batch,
            ...)``, ``reset`` ``(T, batch)``, ``memory`` the memory before the first step;
            outputs float32 ``(T, batch)``. What a policy-gradient loss needs.
        value: ``value(params, memory, obs) -> value``: values of ``obs`` ``(batch, ...)``,
            each continuing from its ``memory`` (no reset): the bootstrap value of a final
            observation.
        recurrent: whether outputs depend on memory; a learner that reorders steps must then
            keep whole sequences together.
    """

    init: Callable[[jax.Array, jax.Array], Any]
    initial_memory: Callable[[int], Any]
    step: Callable[[Any, Any, jax.Array, jax.Array], tuple[Any, Any, jax.Array]]
    evaluate_actions: Callable[..., tuple[jax.Array, jax.Array, jax.Array]]
    value: Callable[[Any, Any, jax.Array], jax.Array]
    recurrent: bool


def _example(obs_example: Any, lead: tuple[int, ...]) -> Any:
    """Zeros shaped like one observation with leading axes ``lead``: what a network is initialised
    with. An array gives float32 zeros, as networks see it; in a pytree of arrays (dict
    observations, such as a multi-agent runner's ``{"obs", "action_mask", ...}``) boolean leaves
    (masks) stay boolean and the others are float32."""
    if isinstance(obs_example, (jax.Array, np.ndarray)):
        return jnp.zeros((*lead, *jnp.shape(obs_example)[1:]), jnp.float32)

    def zeros(x: Any) -> jax.Array:
        dtype = jnp.bool_ if jnp.asarray(x).dtype == jnp.bool_ else jnp.float32
        return jnp.zeros((*lead, *jnp.shape(x)[1:]), dtype)

    return jax.tree.map(zeros, obs_example)


def feedforward_actor_critic(network: nn.Module) -> ActorCritic:
    """An :class:`ActorCritic` from a flax module ``network(obs) -> (distribution, value)``.

    The module may define ``value(obs)`` (computing only the critic); else ``__call__`` is used.
    """
    value_method = getattr(type(network), "value", None)

    def init(key: jax.Array, obs_example: Any) -> Any:
        return network.init(key, _example(obs_example, (1,)))

    def step(params: Any, memory: Any, obs: jax.Array, reset: jax.Array) -> tuple[Any, Any, jax.Array]:
        out: Any = network.apply(params, obs)
        dist, value = out
        return memory, dist, value

    def evaluate_actions(
        params: Any, memory: Any, obs: jax.Array, reset: jax.Array, raw_action: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        out: Any = network.apply(params, obs)
        dist, value = out
        return dist.log_prob(raw_action), value, dist.entropy()

    def value(params: Any, memory: Any, obs: jax.Array) -> jax.Array:
        out: Any = (
            network.apply(params, obs, method=value_method)
            if value_method is not None
            else network.apply(params, obs)[1]
        )
        return out

    return ActorCritic(init, lambda batch_size: (), step, evaluate_actions, value, recurrent=False)


def recurrent_actor_critic(network: nn.Module, initial_memory: Callable[[int], Any]) -> ActorCritic:
    """An :class:`ActorCritic` from a flax module over time-major sequences,
    ``network(memory, (obs, reset)) -> (memory, (distribution, value))``.

    Args:
        network: the module (``obs`` ``(T, batch, ...)``, ``reset`` ``(T, batch)``).
        initial_memory: ``initial_memory(batch_size)``, the memory of fresh episodes.
    """

    def init(key: jax.Array, obs_example: Any) -> Any:
        return network.init(key, initial_memory(1), (_example(obs_example, (1, 1)), jnp.zeros((1, 1), bool)))

    def step(params: Any, memory: Any, obs: jax.Array, reset: jax.Array) -> tuple[Any, Any, jax.Array]:
        out: Any = network.apply(params, memory, (jax.tree.map(lambda x: x[None], obs), reset[None]))
        memory, (dist, value) = out
        return memory, jax.tree.map(lambda x: x[0], dist), value[0]

    def evaluate_actions(
        params: Any, memory: Any, obs: jax.Array, reset: jax.Array, raw_action: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        out: Any = network.apply(params, memory, (obs, reset))
        _, (dist, value) = out
        return dist.log_prob(raw_action), value, dist.entropy()

    def value(params: Any, memory: Any, obs: jax.Array) -> jax.Array:
        return step(params, memory, obs, jnp.zeros(jnp.shape(jax.tree.leaves(obs)[0])[:1], bool))[2]

    return ActorCritic(init, initial_memory, step, evaluate_actions, value, recurrent=True)


# Networks ------------------------------------------------------------------------------------


#: The torsos: ``"mlp"`` (flat observations), ``"cnn"`` (MinAtar's, on image observations
#: ``(H, W, C)``), ``"view_cnn"`` (:class:`~lamella.agents.networks.ViewCNN`: an image view inside a
#: flat row, with ``view_shape`` and ``view_start``).
TORSOS = ("mlp", "cnn", "view_cnn")


class _ViewTorso(nn.Module):
    """:class:`~lamella.agents.networks.ViewCNN`, then an MLP of ``hidden_sizes`` (none: the CNN's
    features themselves, as Pax's IPD-in-the-Matrix agents)."""

    view_shape: tuple[int, ...]
    view_start: int
    hidden_sizes: tuple[int, ...]
    activation: str

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = ViewCNN(tuple(self.view_shape), self.view_start, name="cnn")(x)  # type: ignore[arg-type]
        return MLP(tuple(self.hidden_sizes), self.activation, name="mlp")(x)


def _torso(
    torso: str,
    hidden_sizes: tuple[int, ...],
    activation: str,
    name: str,
    view_shape: tuple[int, ...] = (),
    view_start: int = 0,
    fast_gradient: bool = False,
) -> nn.Module:
    if torso not in TORSOS:
        raise ValueError(f"Unknown torso {torso!r}; choose one of {TORSOS}.")
    if torso == "cnn":
        return MinAtarCNN(name=name)
    if torso == "view_cnn":
        return _ViewTorso(tuple(view_shape), view_start, tuple(hidden_sizes), activation, name=name)
    return MLP(tuple(hidden_sizes), activation, fast_gradient=fast_gradient, name=name)


class FeedForwardActorCriticNet(nn.Module):
    """Separate actor and critic torsos; ``__call__(obs) -> (distribution, value)``.

    Attributes:
        action_space: a Discrete, MultiDiscrete or 1-D Box space.
        torso: ``"mlp"``, ``"cnn"`` (MinAtar-sized, for image observations) or ``"view_cnn"``
            (:class:`~lamella.agents.networks.ViewCNN` on the view inside a flat row, then an MLP
            of ``hidden_sizes``; ``()``: none). Actor and critic each have their own.
        hidden_sizes: widths of each MLP torso.
        activation: activation name.
        continuous_action: Box actions ``"tanh"``-squashed or ``"clip"``-ped.
        log_std_init: initial log standard deviation for Box actions.
        view_shape: ``(H, W, C)`` of the view (``"view_cnn"`` only).
        view_start: where the view starts in the flat row (``"view_cnn"`` only).
        fast_gradient: the MLP torsos' and the heads' dense layers are
            :class:`~lamella.agents.networks.Dense` (the same parameters and values, a faster
            gradient on the CPU, float sums in another order) instead of ``flax.linen.Dense``.
    """

    action_space: Any
    torso: str = "mlp"
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    continuous_action: str = "tanh"
    log_std_init: float = 0.0
    view_shape: tuple[int, ...] = ()
    view_start: int = 0
    fast_gradient: bool = False

    def setup(self) -> None:
        self.actor_torso, self.critic_torso = (
            _torso(
                self.torso,
                self.hidden_sizes,
                self.activation,
                name,
                self.view_shape,
                self.view_start,
                self.fast_gradient,
            )
            for name in ("actor_torso", "critic_torso")
        )
        self.head = ActionHead(
            self.action_space, self.continuous_action, self.log_std_init, self.fast_gradient
        )
        self.critic_out = (Dense if self.fast_gradient else nn.Dense)(1, kernel_init=orthogonal(1.0))

    def __call__(self, obs: jax.Array) -> tuple[Any, jax.Array]:
        return self.head(self.actor_torso(obs)), self.value(obs)

    def value(self, obs: jax.Array) -> jax.Array:
        return self.critic_out(self.critic_torso(obs))[..., 0]


class RecurrentActorCriticNet(nn.Module):
    """Torso, a recurrent core shared by actor and critic, then one dense layer each.

    ``__call__(carry, (obs, reset)) -> (carry, (distribution, value))`` with a leading time
    axis on ``obs`` and ``reset``; the carry is zeroed before steps where ``reset`` is True.

    Attributes:
        action_space: a Discrete, MultiDiscrete or 1-D Box space.
        torso: ``"mlp"`` (one dense layer of ``rnn_hidden_size``), ``"cnn"`` or ``"view_cnn"``
            (:class:`~lamella.agents.networks.ViewCNN`, its features straight into the core, as
            Pax's IPD-in-the-Matrix ``PPO_memory``).
        hidden_sizes: the last entry is the width of the actor and critic layers after the
            core (``rnn_hidden_size`` if empty).
        activation: activation name.
        post_core_layers: the actor and the critic each have a dense layer after the core
            (of ``hidden_sizes[-1]`` units); ``False``: the policy and value heads read the
            core's output directly, as Pax's ``PPO_memory`` networks (a smaller network: a
            meta-learning generation against Pax's CoinGame co-player took 17 to 22% less CPU time).
        cell: ``"gru"`` or ``"lstm"``.
        rnn_hidden_size: width of the carry.
        continuous_action: Box actions ``"tanh"``-squashed or ``"clip"``-ped.
        log_std_init: initial log standard deviation for Box actions.
        view_shape: ``(H, W, C)`` of the view (``"view_cnn"`` only).
        view_start: where the view starts in the flat row (``"view_cnn"`` only).
        fast_gradient: the dense layers around the core (the ``"mlp"`` torso's, the actor's
            and critic's, the heads') are :class:`~lamella.agents.networks.Dense` (the same
            parameters and values, a faster gradient on the CPU, float sums in another order)
            instead of ``flax.linen.Dense``; the cell keeps flax's. The shaping runner's GRU
            co-player's update timed alone (96 envs x 16 rounds, 16 members) took 7 to 8% less
            CPU time, a whole meta-learning generation no less (lamella-marl's README).
    """

    action_space: Any
    torso: str = "mlp"
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    cell: str = "gru"
    rnn_hidden_size: int = 64
    continuous_action: str = "tanh"
    log_std_init: float = 0.0
    view_shape: tuple[int, ...] = ()
    view_start: int = 0
    fast_gradient: bool = False
    post_core_layers: bool = True

    @nn.compact
    def __call__(self, carry: Any, inputs: tuple[jax.Array, jax.Array]) -> tuple[Any, tuple[Any, jax.Array]]:
        obs, reset = inputs
        act = activation_by_name(self.activation)
        # Both are named Dense_<i>: the parameters are the same either way.
        layer = Dense if self.fast_gradient else nn.Dense
        if self.torso == "cnn":
            x = MinAtarCNN(name="torso")(obs)
        elif self.torso == "view_cnn":
            x = ViewCNN(tuple(self.view_shape), self.view_start, name="torso")(obs)  # type: ignore[arg-type]
        else:
            x = act(layer(self.rnn_hidden_size, kernel_init=orthogonal(np.sqrt(2)))(obs))
        carry, x = RecurrentCore(self.cell, self.rnn_hidden_size, name="core")(carry, (x, reset))
        width = self.hidden_sizes[-1] if self.hidden_sizes else self.rnn_hidden_size
        actor = critic = x
        if self.post_core_layers:
            actor = act(layer(width, kernel_init=orthogonal(np.sqrt(2)))(x))
        dist = ActionHead(self.action_space, self.continuous_action, self.log_std_init, self.fast_gradient)(
            actor
        )
        if self.post_core_layers:
            critic = act(layer(width, kernel_init=orthogonal(np.sqrt(2)))(x))
        value = layer(1, kernel_init=orthogonal(1.0))(critic)[..., 0]
        return carry, (dist, value)

    def initial_memory(self, batch_size: int) -> Any:
        """Zero memory for ``batch_size`` envs (call on the unbound module)."""
        return zero_carry(self.cell, batch_size, self.rnn_hidden_size)
