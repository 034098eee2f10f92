"""The multi-agent actor-critic: one network per agent (or one shared), masks, agent ids, a
centralised critic.

:class:`MultiAgentActorCriticNet` takes the dict observation of
:class:`~lamella.marl.observation.MultiAgentObservation` with any leading axes and an agent axis
(``obs`` ``(..., n, L)``, ``action_mask`` ``(..., n, A)``, ``global_state`` ``(..., G)``) and
returns a categorical distribution over each agent's actions and each agent's value
``(..., n)``. It is wrapped by lamella-agents' ``feedforward_actor_critic`` into an
:class:`~lamella.agents.actor_critic.ActorCritic`, so rollout collection, GAE and the PPO
update take it unchanged: the agent axis is one more trailing axis for them.

* **Parameter sharing** (``share_parameters=True``): the layers act on the last axis, so one
  set of weights serves every agent. Off: each torso and head is ``nn.vmap``-ped over the agent
  axis with its own parameters per agent (``params`` get a leading axis ``n``).
* **Agent ids** (``agent_id=True``): a one-hot of the agent index is appended to each agent's
  input (actor and critic), so a shared network can still act differently per agent.
* **Action masks**: logits of illegal actions are set to -1e9 before the distribution is built,
  so sampling never picks them and log-probabilities and entropies are those of the masked
  distribution (an illegal action has probability 0 and adds 0 to the entropy).
* **Centralised critic** (MAPPO, ``centralised_critic=True``): the critic of agent ``i`` reads
  ``global_state`` (plus agent ``i``'s id) instead of agent ``i``'s observation.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from lamella.agents.distributions import ActionHead, Categorical
from lamella.agents.networks import MLP, orthogonal
from lamella.envs import spaces

__all__ = ["MASKED_LOGIT", "MultiAgentActorCriticNet", "masked_categorical"]

#: The logit of an illegal action: exp(-1e9 - max) is 0 in float32, and 0 * -1e9 stays finite.
MASKED_LOGIT = -1e9


def masked_categorical(logits: jax.Array, mask: jax.Array) -> Categorical:
    """A categorical over ``logits`` (``(..., A)``) where ``mask`` (bool, same shape) is True."""
    return Categorical(jnp.where(mask, logits, MASKED_LOGIT))


class _Critic(nn.Module):
    hidden_sizes: tuple[int, ...]
    activation: str

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = MLP(self.hidden_sizes, self.activation, name="torso")(x)
        return nn.Dense(1, kernel_init=orthogonal(1.0), name="out")(x)[..., 0]


class _Actor(nn.Module):
    hidden_sizes: tuple[int, ...]
    activation: str
    num_actions: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = MLP(self.hidden_sizes, self.activation, name="torso")(x)
        dist = ActionHead(spaces.Discrete(self.num_actions), name="head")(x)
        assert isinstance(dist, Categorical)
        return dist.logits


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


class MultiAgentActorCriticNet(nn.Module):
    """``__call__(obs) -> (Categorical with logits (..., n, A), value (..., n))`` (see the module docs).

    Attributes:
        num_agents: ``n``.
        num_actions: ``A``, actions per agent.
        hidden_sizes: widths of the actor's and the critic's MLP torsos.
        activation: activation name.
        share_parameters: one network for every agent (else one per agent).
        agent_id: append a one-hot agent id to the actor's and critic's inputs.
        centralised_critic: the critic reads ``obs["global_state"]`` (MAPPO) instead of each
            agent's own observation (IPPO).
    """

    num_agents: int
    num_actions: int
    hidden_sizes: tuple[int, ...] = (128, 128)
    activation: str = "relu"
    share_parameters: bool = True
    agent_id: bool = True
    centralised_critic: bool = False

    def setup(self) -> None:
        common = {"hidden_sizes": tuple(self.hidden_sizes), "activation": self.activation}
        self.actor = _per_agent(
            _Actor, self.num_agents, self.share_parameters, num_actions=self.num_actions, **common
        )
        self.critic = _per_agent(_Critic, self.num_agents, self.share_parameters, **common)

    def _apply(self, module: nn.Module, x: jax.Array) -> jax.Array:
        """``module`` on ``x`` ``(..., n, F)``, each agent with its own parameters unless shared."""
        if self.share_parameters:
            return module(x)
        out = module(jnp.moveaxis(x, -2, 0))
        return jnp.moveaxis(out, 0, x.ndim - 2)

    def _with_id(self, x: jax.Array) -> jax.Array:
        if not self.agent_id:
            return x
        ids = jnp.broadcast_to(jnp.eye(self.num_agents, dtype=x.dtype), (*x.shape[:-1], self.num_agents))
        return jnp.concatenate([x, ids], axis=-1)

    def __call__(self, obs: dict[str, jax.Array]) -> tuple[Categorical, jax.Array]:
        x = self._with_id(obs["obs"].astype(jnp.float32))
        logits = self._apply(self.actor, x)
        return masked_categorical(logits, obs["action_mask"]), self._value(obs, x)

    def value(self, obs: dict[str, jax.Array]) -> jax.Array:
        """Each agent's value ``(..., n)`` (the critic alone: bootstrap values)."""
        return self._value(obs, self._with_id(obs["obs"].astype(jnp.float32)))

    def _value(self, obs: dict[str, jax.Array], actor_input: jax.Array) -> jax.Array:
        if self.centralised_critic:
            state = obs["global_state"].astype(jnp.float32)
            state = jnp.broadcast_to(
                state[..., None, :], (*state.shape[:-1], self.num_agents, state.shape[-1])
            )
            return self._apply(self.critic, self._with_id(state))
        return self._apply(self.critic, actor_input)
