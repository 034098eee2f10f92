"""Watchers of the opponent-shaping runner: what each agent does, measured every iteration.

Pure functions of a rollout (time-major arrays ``(T, num_envs, n, ...)``), so they run inside
the compiled training step and come out as metrics (one value per agent; the driver logs
``train_cooperation_CC_agent_0`` and so on).

Iterated two-action matrix games (``IteratedMatrixGame`` and its named ids: each agent observes
a one-hot over ``CC, CD, DC, DD, START``, its own action first):

* ``cooperation_<state>``: the agent's probability of cooperating (action 0) in each state.
  The runner computes it from the policy where it is a function of the state (a feed-forward
  PPO learner's network on the five one-hot states; a memory-one strategy's table); for any other
  agent (a recurrent learner, whose choice depends on its memory too, or any other ``Agent``) it
  is :func:`empirical_cooperation` of the rollout.
* ``visits_<state>``: the fraction of the rollout's steps each agent spent in each state, from
  its own side (:func:`state_visits`).

CoinGame (an env whose ``info`` reports ``own_coins`` and ``other_coins``):

* ``own_coin_share``: of the coins the agent picked up in the rollout, the fraction of its own
  colour (:func:`own_coin_share`); 1 is fully cooperative, 0.5 takes coins regardless of colour.
* ``coins_per_step``: coins the agent picked up per env step.

IPD-in-the-Matrix (STORM; an env whose ``info`` reports ``interaction``, ``coins`` and, through
:class:`~lamella.marl.shaping.observations.FlatAgentObservation`, ``held_coins``). A red coin is
the cooperate move for both players, a blue coin defect:

* ``cooperate_coin_share``: Pax's ``ratio`` of ``ipditm_stats``: over the rollout's paying
  interactions, the red (cooperate) share of the coins the agent held when it happened
  (:func:`cooperate_coin_share`); 1 plays pure C, 0 pure D; 0 when no interaction happened.
* ``cooperate_pickup_share``: of the coins the agent picked up, the red share (0 when none).
* ``coins_per_step``: coins the agent picked up per env step.
* ``interactions_per_step``: paying interactions per env step (the same for both agents).

Iterated n-player tensor games (``IteratedTensorGame``: two actions each, a one-hot over the
``2**n`` joint actions and START):

* ``cooperation_rate``: the fraction of the rollout's steps on which the agent cooperated
  (action 0; :func:`cooperation_rate`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

__all__ = [
    "COOPERATE",
    "IN_THE_MATRIX_INFO",
    "STATE_NAMES",
    "coin_game_metrics",
    "cooperate_coin_share",
    "cooperation_rate",
    "empirical_cooperation",
    "in_the_matrix_metrics",
    "matrix_game_metrics",
    "metric_names",
    "own_coin_share",
    "state_visits",
]

#: The observation index of each state of the iterated matrix games, from the observer's side.
STATE_NAMES = ("CC", "CD", "DC", "DD", "START")
#: The action that cooperates in the social dilemmas (Pax's convention: 0 = C, 1 = D).
COOPERATE = 0


def state_visits(obs: jax.Array) -> jax.Array:
    """Fraction of steps in each state, float32 ``(n, 5)``, from one-hot ``obs`` ``(T, E, n, 5)``."""
    return jnp.asarray(obs, jnp.float32).mean((0, 1))


def empirical_cooperation(obs: jax.Array, action: jax.Array) -> jax.Array:
    """Each agent's frequency of cooperating in each state it visited, float32 ``(n, 5)``.

    ``obs`` is one-hot ``(T, E, n, 5)``, ``action`` int ``(T, E, n)``. A state the agent never
    visited in the rollout reports 0 (its ``visits`` entry is 0 then).
    """
    obs = jnp.asarray(obs, jnp.float32)
    cooperated = (action == COOPERATE).astype(jnp.float32)[..., None]
    count = obs.sum((0, 1))
    return jnp.where(count > 0, (obs * cooperated).sum((0, 1)) / jnp.maximum(count, 1.0), 0.0)


def cooperation_rate(action: jax.Array) -> jax.Array:
    """Each agent's fraction of cooperating steps (action 0), float32 ``(n,)``, from int
    ``action`` ``(..., n)``."""
    cooperated = (jnp.asarray(action) == COOPERATE).astype(jnp.float32)
    return cooperated.reshape((-1, cooperated.shape[-1])).mean(0)


def matrix_game_metrics(cooperation: jax.Array, visits: jax.Array) -> dict[str, jax.Array]:
    """``{"cooperation_CC": (n,), ..., "visits_START": (n,)}`` from ``(n, 5)`` tables."""
    metrics = {}
    for index, name in enumerate(STATE_NAMES):
        metrics[f"cooperation_{name}"] = cooperation[:, index].astype(jnp.float32)
        metrics[f"visits_{name}"] = visits[:, index].astype(jnp.float32)
    return metrics


def own_coin_share(own_coins: jax.Array, other_coins: jax.Array) -> jax.Array:
    """Each agent's own-colour share of the coins it picked up, float32 ``(n,)``.

    ``own_coins`` and ``other_coins`` are CoinGame's per-step ``info`` entries summed over any
    leading axes (``(T, E, n)``); an agent that picked up nothing reports 0.
    """
    own = jnp.asarray(own_coins, jnp.float32).reshape((-1, own_coins.shape[-1])).sum(0)
    other = jnp.asarray(other_coins, jnp.float32).reshape((-1, other_coins.shape[-1])).sum(0)
    return jnp.where(own + other > 0, own / jnp.maximum(own + other, 1.0), 0.0)


def coin_game_metrics(info: dict[str, Any]) -> dict[str, jax.Array]:
    """``own_coin_share`` and ``coins_per_step`` ``(n,)`` from a rollout's CoinGame ``info``."""
    own, other = info["own_coins"], info["other_coins"]
    picked = jnp.asarray(own, jnp.float32) + jnp.asarray(other, jnp.float32)
    return {
        "own_coin_share": own_coin_share(own, other),
        "coins_per_step": picked.reshape((-1, picked.shape[-1])).mean(0),
    }


def _per_agent_sum(x: jax.Array) -> jax.Array:
    """``(..., n)`` summed over every leading axis, float32 ``(n,)``."""
    x = jnp.asarray(x, jnp.float32)
    return x.reshape((-1, x.shape[-1])).sum(0)


def cooperate_coin_share(held_coins: jax.Array) -> jax.Array:
    """Each agent's red (cooperate) share of the coins it held at its paying interactions, float32
    ``(n,)`` (Pax's ``coop_coin / (coop_coin + defect_coin)``).

    ``held_coins`` is int ``(..., n, 2)``, ``[red, blue]`` held on a paying-interaction step and
    zeros on other steps (``info["held_coins"]``); an agent with no such step reports 0.
    """
    held = jnp.asarray(held_coins, jnp.float32)
    red = _per_agent_sum(held[..., 0])
    total = red + _per_agent_sum(held[..., 1])
    return jnp.where(total > 0, red / jnp.maximum(total, 1.0), 0.0)


def in_the_matrix_metrics(info: dict[str, Any]) -> dict[str, jax.Array]:
    """``cooperate_coin_share``, ``cooperate_pickup_share``, ``coins_per_step`` and
    ``interactions_per_step`` ``(n,)`` from a rollout's IPD-in-the-Matrix ``info``
    (``held_coins`` and ``coins`` ``(T, E, n, 2)``, ``interaction`` ``(T, E, n)``)."""
    coins = jnp.asarray(info["coins"], jnp.float32)
    red, total = _per_agent_sum(coins[..., 0]), _per_agent_sum(coins.sum(-1))
    steps = coins[..., 0].size // coins.shape[-2]
    return {
        "cooperate_coin_share": cooperate_coin_share(info["held_coins"]),
        "cooperate_pickup_share": jnp.where(total > 0, red / jnp.maximum(total, 1.0), 0.0),
        "coins_per_step": total / steps,
        "interactions_per_step": _per_agent_sum(info["interaction"]) / steps,
    }


#: The info entries the IPD-in-the-Matrix watchers read.
IN_THE_MATRIX_INFO = ("interaction", "coins", "held_coins")


def metric_names(
    matrix_game: bool, coin_game: bool, in_the_matrix: bool = False, tensor_game: bool = False
) -> tuple[str, ...]:
    """The per-agent watcher metrics the runner reports for a game of this kind."""
    names: list[str] = ["cooperation_rate"] if tensor_game else []
    if matrix_game:
        names += [f"cooperation_{s}" for s in STATE_NAMES] + [f"visits_{s}" for s in STATE_NAMES]
    if coin_game:
        names += ["own_coin_share", "coins_per_step"]
    if in_the_matrix:
        names += ["cooperate_coin_share", "cooperate_pickup_share", "coins_per_step", "interactions_per_step"]
    return tuple(names)
