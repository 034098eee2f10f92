"""The multi-agent actor-critics: one network per agent (or one shared), masks, agent ids, a
centralised critic; feed-forward or recurrent; discrete or continuous actions.

:class:`MultiAgentActorCriticNet` takes the dict observation of
:class:`~lamella.marl.observation.MultiAgentObservation` with any leading axes and an agent axis
(``obs`` ``(..., n, L)``, ``action_mask`` ``(..., n, A)`` for discrete actions,
``global_state`` ``(..., G)``) and returns a distribution over each agent's actions and each
agent's value ``(..., n)``. It is wrapped by lamella-agents' ``feedforward_actor_critic`` into an
:class:`~lamella.agents.actor_critic.ActorCritic`, so rollout collection, GAE and the PPO
update take it unchanged: the agent axis is one more trailing axis for them.

:class:`MultiAgentRecurrentActorCriticNet` is the recurrent one (Mava's ``rec_ippo`` /
``rec_mappo`` network): actor and critic each a pre-torso MLP, a GRU (lamella-agents'
:class:`~lamella.agents.networks.RecurrentCore`, which zeroes the carry where an episode starts)
and a post-torso MLP. Its memory is ``(actor carry, critic carry)``, each ``(batch, n, H)``: one
hidden state per agent, all of an env's agents reset together at the env's episode boundary.
It is wrapped by lamella-agents' ``recurrent_actor_critic``; the PPO update then keeps whole env
sequences together in its minibatches.

* **Parameter sharing** (``share_parameters=True``): the layers act on the last axis (the
  recurrent core on agents folded into the batch axis), so one set of weights serves every
  agent. Off: each torso and head is ``nn.vmap``-ped over the agent axis with its own
  parameters per agent (``params`` get a leading axis ``n``).
* **Agent ids** (``agent_id=True``): a one-hot of the agent index is appended to each agent's
  input (actor and critic), so a shared network can still act differently per agent.
* **Action masks** (discrete actions): logits of illegal actions are set to -1e9 before the
  distribution is built, so sampling never picks them and log-probabilities and entropies are
  those of the masked distribution (an illegal action has probability 0 and adds 0 to the
  entropy).
* **Continuous actions** (``action_low`` / ``action_high`` given, one entry per action
  dimension of an agent): lamella-agents' :class:`~lamella.agents.distributions.Gaussian` per
  agent, with a learned state-independent ``log_std`` per dimension (per agent unless shared),
  tanh-squashed into ``[low, high]`` (``squash="tanh"``) or clipped there (``"clip"``).
* **Centralised critic** (MAPPO, ``centralised_critic=True``): the critic of agent ``i`` reads
  ``global_state`` (plus agent ``i``'s id) instead of agent ``i``'s observation.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents.distributions import ActionHead, Categorical, Gaussian
from lamella.agents.networks import MLP, Dense, RecurrentCore, orthogonal, zero_carry
from lamella.envs import spaces

__all__ = [
    "MASKED_LOGIT",
    "MultiAgentActorCriticNet",
    "MultiAgentRecurrentActorCriticNet",
    "masked_categorical",
]

#: The logit of an illegal action: exp(-1e9 - max) is 0 in float32, and 0 * -1e9 stays finite.
MASKED_LOGIT = -1e9


def masked_categorical(logits: jax.typing.ArrayLike, mask: jax.typing.ArrayLike) -> Categorical:
    """A categorical over ``logits`` (``(..., A)``) where ``mask`` (bool, same shape) is True.

    An integer mask counts as bool (nonzero: legal). A row with no legal action (the mask's
    values are data under jit, so nothing can refuse it) samples uniformly over all its actions.

    Raises:
        ValueError: ``mask`` and ``logits`` differ in shape (at trace time; a mask that would
            broadcast, one row per batch entry say, masks the wrong entries).
        TypeError: a floating-point ``mask``: an additive mask (``0`` legal, ``-inf`` illegal) would
            make every action legal here.
    """
    logits, mask = jnp.asarray(logits), jnp.asarray(mask)
    if mask.shape != logits.shape:
        raise ValueError(
            f"masked_categorical: mask has shape {mask.shape} but logits {logits.shape}; give one bool "
            "per action of each row, the logits' shape (..., num_actions)."
        )
    if jnp.issubdtype(mask.dtype, jnp.floating) or jnp.issubdtype(mask.dtype, jnp.complexfloating):
        raise TypeError(
            f"masked_categorical: mask must be bool (True: legal), got {mask.dtype}; an additive mask "
            "(0 legal, -inf illegal) is `mask == 0`, a 0/1 float mask `mask > 0`."
        )
    return Categorical(jnp.where(mask, logits, MASKED_LOGIT))


def _policy_outputs(
    x: jax.Array,
    num_actions: int,
    action_low: tuple[float, ...],
    action_high: tuple[float, ...],
    squash: str,
    log_std_init: float,
    fast_gradient: bool = False,
) -> tuple[jax.Array, ...]:
    """The policy head on features ``x`` (called inside a compact module): ``(logits,)`` for
    ``num_actions`` discrete actions, ``(mean, log_std)`` (both ``(..., D)``) for a Box of
    ``len(action_low)`` dimensions."""
    if not action_low:
        dist = ActionHead(spaces.Discrete(num_actions), fast_gradient=fast_gradient, name="head")(x)
        assert isinstance(dist, Categorical)
        return (dist.logits,)
    box = spaces.Box(np.asarray(action_low), np.asarray(action_high), (len(action_low),), np.float32)
    gaussian = ActionHead(box, squash, log_std_init, fast_gradient, name="head")(x)
    assert isinstance(gaussian, Gaussian)
    # Broadcast to the mean's shape: every leaf of the outputs then carries the leading axes
    # (time, batch, agent), which the recurrent wrapper slices and nn.vmap stacks.
    return gaussian.mean, jnp.broadcast_to(gaussian.log_std, gaussian.mean.shape)


class _Critic(nn.Module):
    hidden_sizes: tuple[int, ...]
    activation: str

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = MLP(self.hidden_sizes, self.activation, fast_gradient=True, name="torso")(x)
        return Dense(1, kernel_init=orthogonal(1.0), name="out")(x)[..., 0]


class _Actor(nn.Module):
    hidden_sizes: tuple[int, ...]
    activation: str
    num_actions: int
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    squash: str = "tanh"
    log_std_init: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, ...]:
        x = MLP(self.hidden_sizes, self.activation, fast_gradient=True, name="torso")(x)
        return _policy_outputs(
            x, self.num_actions, self.action_low, self.action_high, self.squash, self.log_std_init, True
        )


class _RecurrentTorso(nn.Module):
    """Pre-torso MLP, recurrent core, post-torso MLP on ``x`` ``(T, B, F)`` with carry ``(B, H)``."""

    pre_sizes: tuple[int, ...]
    post_sizes: tuple[int, ...]
    activation: str
    cell: str
    hidden_size: int

    @nn.compact
    def __call__(self, carry: Any, x: jax.Array, reset: jax.Array) -> tuple[Any, jax.Array]:
        x = MLP(self.pre_sizes, self.activation, name="pre_torso")(x)
        carry, x = RecurrentCore(self.cell, self.hidden_size, name="core")(carry, (x, reset))
        return carry, MLP(self.post_sizes, self.activation, name="post_torso")(x)


class _RecurrentCritic(nn.Module):
    pre_sizes: tuple[int, ...]
    post_sizes: tuple[int, ...]
    activation: str
    cell: str
    hidden_size: int

    @nn.compact
    def __call__(self, carry: Any, x: jax.Array, reset: jax.Array) -> tuple[Any, jax.Array]:
        carry, x = _RecurrentTorso(
            self.pre_sizes, self.post_sizes, self.activation, self.cell, self.hidden_size, name="torso"
        )(carry, x, reset)
        return carry, nn.Dense(1, kernel_init=orthogonal(1.0), name="out")(x)[..., 0]


class _RecurrentActor(nn.Module):
    pre_sizes: tuple[int, ...]
    post_sizes: tuple[int, ...]
    activation: str
    cell: str
    hidden_size: int
    num_actions: int
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    squash: str = "tanh"
    log_std_init: float = 0.0

    @nn.compact
    def __call__(self, carry: Any, x: jax.Array, reset: jax.Array) -> tuple[Any, tuple[jax.Array, ...]]:
        carry, x = _RecurrentTorso(
            self.pre_sizes, self.post_sizes, self.activation, self.cell, self.hidden_size, name="torso"
        )(carry, x, reset)
        outputs = _policy_outputs(
            x, self.num_actions, self.action_low, self.action_high, self.squash, self.log_std_init
        )
        return carry, outputs


def _per_agent(module_class: Any, num_agents: int, share: bool, **kwargs: Any) -> nn.Module:
    if share:
        return module_class(**kwargs)
    # One set of parameters per agent: the agent axis is moved first by the caller.
    return nn.vmap(
        module_class,
        in_axes=0,
        out_axes=0,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        axis_size=num_agents,
    )(**kwargs)


class _MultiAgentBase(nn.Module):
    """What the feed-forward and the recurrent network share: ids, distributions, critic inputs."""

    num_agents: int
    num_actions: int

    def _with_id(self, x: jax.Array) -> jax.Array:
        if not self.agent_id:
            return x
        ids = jnp.broadcast_to(jnp.eye(self.num_agents, dtype=x.dtype), (*x.shape[:-1], self.num_agents))
        return jnp.concatenate([x, ids], axis=-1)

    def _critic_input(self, obs: dict[str, jax.Array], actor_input: jax.Array) -> jax.Array:
        if not self.centralised_critic:
            return actor_input
        state = obs["global_state"].astype(jnp.float32)
        state = jnp.broadcast_to(state[..., None, :], (*state.shape[:-1], self.num_agents, state.shape[-1]))
        return self._with_id(state)

    def _distribution(self, outputs: tuple[jax.Array, ...], obs: dict[str, jax.Array]) -> Any:
        action_low: tuple[float, ...] = self.action_low
        if not action_low:
            if "action_mask" in obs:
                return masked_categorical(outputs[0], obs["action_mask"])
            return Categorical(outputs[0])
        mean, log_std = outputs
        low = jnp.broadcast_to(jnp.asarray(action_low, jnp.float32), mean.shape)
        high = jnp.broadcast_to(jnp.asarray(self.action_high, jnp.float32), mean.shape)
        return Gaussian(mean, log_std, low, high, squash=self.squash)

    def _head_kwargs(self) -> dict[str, Any]:
        return {
            "num_actions": self.num_actions,
            "action_low": tuple(self.action_low),
            "action_high": tuple(self.action_high),
            "squash": self.squash,
            "log_std_init": self.log_std_init,
        }


class MultiAgentActorCriticNet(_MultiAgentBase):
    """``__call__(obs) -> (distribution, value (..., n))`` (see the module docs): a masked
    categorical with logits ``(..., n, A)``, or a Gaussian over ``(..., n, D)``.

    Attributes:
        num_agents: ``n``.
        num_actions: ``A``, actions per agent (discrete actions; ignored when ``action_low``
            is given).
        hidden_sizes: widths of the actor's and the critic's MLP torsos.
        activation: activation name.
        share_parameters: one network for every agent (else one per agent).
        agent_id: append a one-hot agent id to the actor's and critic's inputs.
        centralised_critic: the critic reads ``obs["global_state"]`` (MAPPO) instead of each
            agent's own observation (IPPO).
        action_low, action_high: continuous actions: each agent's Box bounds, one float per
            action dimension (empty: discrete actions).
        squash: continuous actions ``"tanh"``-squashed into the bounds or ``"clip"``-ped.
        log_std_init: initial log standard deviation of continuous actions.
    """

    hidden_sizes: tuple[int, ...] = (128, 128)
    activation: str = "relu"
    share_parameters: bool = True
    agent_id: bool = True
    centralised_critic: bool = False
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    squash: str = "tanh"
    log_std_init: float = 0.0

    def setup(self) -> None:
        common = {"hidden_sizes": tuple(self.hidden_sizes), "activation": self.activation}
        self.actor = _per_agent(
            _Actor, self.num_agents, self.share_parameters, **common, **self._head_kwargs()
        )
        self.critic = _per_agent(_Critic, self.num_agents, self.share_parameters, **common)

    def _apply(self, module: nn.Module, x: jax.Array) -> Any:
        """``module`` on ``x`` ``(..., n, F)``, each agent with its own parameters unless shared.

        The module sees a 2-D ``(rows, F)`` input (one per agent when not shared): XLA on the CPU
        differentiates a dense layer over a 3-D input ``(batch, n, F)`` with a transposed copy
        of every layer's output gradient, which cost a quarter of the PPO update's time.
        """
        lead = x.shape[:-1]
        if self.share_parameters:
            out = module(x.reshape((-1, x.shape[-1])))
            return jax.tree.map(lambda y: y.reshape((*lead, *y.shape[1:])), out)
        rows = jnp.moveaxis(x, -2, 0)
        out = module(rows.reshape((rows.shape[0], -1, rows.shape[-1])))
        return jax.tree.map(
            lambda y: jnp.moveaxis(y.reshape((*rows.shape[:-1], *y.shape[2:])), 0, x.ndim - 2), out
        )

    def __call__(self, obs: dict[str, jax.Array]) -> tuple[Any, jax.Array]:
        x = self._with_id(obs["obs"].astype(jnp.float32))
        dist = self._distribution(self._apply(self.actor, x), obs)
        return dist, self._apply(self.critic, self._critic_input(obs, x))

    def value(self, obs: dict[str, jax.Array]) -> jax.Array:
        """Each agent's value ``(..., n)`` (the critic alone: bootstrap values)."""
        x = self._with_id(obs["obs"].astype(jnp.float32))
        return self._apply(self.critic, self._critic_input(obs, x))


class MultiAgentRecurrentActorCriticNet(_MultiAgentBase):
    """``__call__(memory, (obs, reset)) -> (memory, (distribution, value))`` over time-major
    sequences (see the module docs): ``obs`` leaves ``(T, B, n, ...)`` (``global_state``
    ``(T, B, G)``), ``reset`` bool ``(T, B)`` (the env's episode starts at that step: every
    agent's carry is zeroed before it), ``memory`` ``(actor carry, critic carry)`` with leaves
    ``(B, n, H)``; the distribution is over ``(T, B, n, ...)`` actions, the value ``(T, B, n)``.

    Attributes:
        num_agents, num_actions, activation, share_parameters, agent_id, centralised_critic,
            action_low, action_high, squash, log_std_init: as :class:`MultiAgentActorCriticNet`.
        pre_torso_sizes: widths of the MLP before the recurrent core (actor and critic each).
        post_torso_sizes: widths of the MLP after it.
        cell: ``"gru"`` or ``"lstm"``.
        rnn_hidden_size: ``H``, the width of each agent's carry.
    """

    pre_torso_sizes: tuple[int, ...] = (128,)
    post_torso_sizes: tuple[int, ...] = (128,)
    activation: str = "relu"
    cell: str = "gru"
    rnn_hidden_size: int = 128
    share_parameters: bool = True
    agent_id: bool = True
    centralised_critic: bool = False
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    squash: str = "tanh"
    log_std_init: float = 0.0

    def setup(self) -> None:
        common = {
            "pre_sizes": tuple(self.pre_torso_sizes),
            "post_sizes": tuple(self.post_torso_sizes),
            "activation": self.activation,
            "cell": self.cell,
            "hidden_size": self.rnn_hidden_size,
        }
        share = self.share_parameters
        self.actor = _per_agent(_RecurrentActor, self.num_agents, share, **common, **self._head_kwargs())
        self.critic = _per_agent(_RecurrentCritic, self.num_agents, share, **common)

    def initial_memory(self, batch_size: int) -> tuple[Any, Any]:
        """Zero memory of ``batch_size`` envs: ``(actor carry, critic carry)``, leaves
        ``(batch_size, n, H)`` (call on the unbound module)."""
        n = self.num_agents
        carry = zero_carry(self.cell, batch_size * n, self.rnn_hidden_size)
        carry = jax.tree.map(lambda c: c.reshape((batch_size, n, *c.shape[1:])), carry)
        return carry, carry

    def _run(self, module: nn.Module, carry: Any, x: jax.Array, reset: jax.Array) -> tuple[Any, Any]:
        """``module`` on ``x`` ``(T, B, n, F)`` from ``carry`` (leaves ``(B, n, H)``), every agent
        of an env reset where ``reset`` ``(T, B)``."""
        num_steps, batch, n = x.shape[:3]
        if self.share_parameters:
            # Agents folded into the batch axis: one core, one carry row per (env, agent).
            flat_carry = jax.tree.map(lambda c: c.reshape((batch * n, *c.shape[2:])), carry)
            flat_reset = jnp.broadcast_to(reset[..., None], (num_steps, batch, n)).reshape(
                num_steps, batch * n
            )
            flat_carry, out = module(flat_carry, x.reshape(num_steps, batch * n, -1), flat_reset)
            carry = jax.tree.map(lambda c: c.reshape((batch, n, *c.shape[1:])), flat_carry)
            out = jax.tree.map(lambda y: y.reshape((num_steps, batch, n, *y.shape[2:])), out)
            return carry, out
        agent_carry = jax.tree.map(lambda c: jnp.moveaxis(c, 1, 0), carry)
        agent_reset = jnp.broadcast_to(reset, (n, num_steps, batch))
        agent_carry, out = module(agent_carry, jnp.moveaxis(x, 2, 0), agent_reset)
        carry = jax.tree.map(lambda c: jnp.moveaxis(c, 0, 1), agent_carry)
        return carry, jax.tree.map(lambda y: jnp.moveaxis(y, 0, 2), out)

    def __call__(
        self, memory: tuple[Any, Any], inputs: tuple[dict[str, jax.Array], jax.Array]
    ) -> tuple[tuple[Any, Any], tuple[Any, jax.Array]]:
        obs, reset = inputs
        actor_carry, critic_carry = memory
        x = self._with_id(obs["obs"].astype(jnp.float32))
        actor_carry, outputs = self._run(self.actor, actor_carry, x, reset)
        critic_carry, value = self._run(self.critic, critic_carry, self._critic_input(obs, x), reset)
        return (actor_carry, critic_carry), (self._distribution(outputs, obs), value)
