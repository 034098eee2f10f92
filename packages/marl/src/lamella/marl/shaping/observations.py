"""Dict observations for the shaping runners: each agent's entries flattened into one row.

The opponent-shaping runners give every agent an MLP (or GRU) on a ``Box`` observation with one
row per agent, ``(n, D)``. An env whose observation is a dict of per-agent arrays (IPD-in-the-Matrix:
``{"inventory": (2, 6), "observation": (2, 5, 5, 10)}``) is wrapped by :class:`FlatAgentObservation`,
which concatenates each agent's entries in sorted-key order (``jax.tree.leaves``'s order of a dict)
into float32 ``(n, D)``: on IPD-in-the-Matrix the 6 inventory values come first, then the
250-value egocentric view.

**The layout contract** (what a network that reads one entry back relies on): agent ``i``'s row
is its entries in sorted-key order, each entry's per-agent array flattened in row-major (C)
order, with no padding; :meth:`FlatAgentObservation.entries` gives each entry's ``(start,
shape)`` in the row. :func:`view_layout` finds the one image entry (rank 3 per agent, ``(H, W,
C)``), which is how the shaping runners' ``torso="cnn"`` (lamella-agents'
:class:`~lamella.agents.networks.ViewCNN`) takes IPD-in-the-Matrix's 5 x 5 x 10 view back out of
the row at index 6 and convolves it, with the 6 inventory values joined after the convolution.

On IPD-in-the-Matrix it also reports, per step, ``info["held_coins"]``: int32 ``(2, 2)``, the
``[red, blue]`` coins each player held when a paying interaction happened on this step (its
inventory before the step plus the coins it picked up on it), zeros on other steps. That is the
inventory Pax's ``ipditm_stats`` reads (its ``coop_coin`` and ``defect_coin``), taken from the
state so that the coin picked up on the interaction step itself counts and an interaction that
pays 0 still counts (Pax marks interactions by a non-zero reward).

:class:`TheftMemory` gives CoinGame's players a one-bit memory of the other's behaviour: whether
the other took the player's coin in the last few steps, as two copies of the observation (one
live at a time). A memory-less (tabular) meta-agent can then play a different policy after a
theft, which is what lets an evolved meta-agent shape a naive PPO co-player on CoinGame (measured in
the README's meta-learning CoinGame section; ``tests/test_shaping_coin_game.py``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents.config import ConfigError
from lamella.envs import spaces, struct
from lamella.envs.environment import Environment, StepOutput, Wrapper

__all__ = [
    "FlatAgentObservation",
    "TheftMemory",
    "TheftMemoryState",
    "flatten_agent_observations",
    "view_layout",
]


def _flatten(obs: Any, num_agents: int) -> jax.Array:
    return jnp.concatenate(
        [jnp.asarray(x).reshape(num_agents, -1).astype(jnp.float32) for x in jax.tree.leaves(obs)], -1
    )


class FlatAgentObservation(Wrapper):
    """A multi-agent env's dict observation as float32 ``(n, D)``: each agent's entries, flattened
    and concatenated in sorted-key order (see the module docs).

    Wrap the bare env (inside ``AutoReset``). Every entry of the observation space must be a
    ``Box`` with the agent axis first.
    """

    def reset_env(self, key: jax.Array, params: Any) -> tuple[jax.Array, Any]:
        obs, state = self.env.reset_env(key, params)
        return _flatten(obs, self.num_agents), state

    def step_env(self, key: jax.Array, state: Any, action: Any, params: Any) -> StepOutput:
        obs, next_state, reward, terminated, truncated, info = self.env.step_env(key, state, action, params)
        if "interaction" in info and "coins" in info and hasattr(state, "inventories"):
            held = jnp.asarray(state.inventories, jnp.int32) + jnp.asarray(info["coins"], jnp.int32)
            info = {**info, "held_coins": jnp.where(jnp.asarray(info["interaction"])[:, None], held, 0)}
        return _flatten(obs, self.num_agents), next_state, reward, terminated, truncated, info

    def entries(self, params: Any = None) -> dict[str, tuple[int, tuple[int, ...]]]:
        """Each entry of the dict observation as ``name: (start, shape)``: where its values start
        in an agent's row and its per-agent shape (in row order: sorted keys)."""
        space = self.observation_space(params)  # the check
        del space
        inner = self.env.observation_space(params)
        assert isinstance(inner, spaces.Dict)
        out, start = {}, 0
        for name in sorted(inner.spaces):
            shape = tuple(int(d) for d in inner.spaces[name].shape[1:])
            out[name] = (start, shape)
            start += int(np.prod(shape, dtype=np.int64))
        return out

    def observation_space(self, params: Any = None) -> spaces.Box:
        space = self.env.observation_space(params)
        entries = (
            [space.spaces[name] for name in sorted(space.spaces)] if isinstance(space, spaces.Dict) else []
        )
        boxes = [s for s in entries if isinstance(s, spaces.Box) and s.shape[:1] == (self.num_agents,)]
        if not entries or len(boxes) != len(entries):
            raise ConfigError(
                f"{type(self).__name__} flattens a dict of Box observations with the agent axis first "
                f"({self.num_agents} rows each); {self.env!r} observes {space!r}."
            )

        def rows(bound: Any, box: spaces.Box) -> np.ndarray:
            return np.broadcast_to(np.asarray(bound, np.float32), box.shape).reshape(self.num_agents, -1)

        low = np.concatenate([rows(box.low, box) for box in boxes], -1)
        high = np.concatenate([rows(box.high, box) for box in boxes], -1)
        return spaces.Box(low, high, low.shape, jnp.float32)


class _FlatAgentObservationOf(FlatAgentObservation):
    """:class:`FlatAgentObservation` of an env that builds its observation from its state
    (``observation_of``), which ``AutoReset`` then uses to build one observation per step."""

    def observation_of(self, state: Any, params: Any = None) -> jax.Array:
        return _flatten(type(self.env).observation_of(self.env, state, params), self.num_agents)  # type: ignore[attr-defined]


def flatten_agent_observations(env: Environment[Any, Any], params: Any) -> Environment[Any, Any]:
    """``env`` wrapped in :class:`FlatAgentObservation` when its observation space is a ``Dict``;
    ``env`` itself otherwise.

    Raises:
        ConfigError: a dict observation whose entries are not ``Box`` es with the agent axis first.
    """
    if not isinstance(env.observation_space(params), spaces.Dict):
        return env
    wrapped_class = (
        _FlatAgentObservationOf
        if callable(getattr(type(env), "observation_of", None))
        else FlatAgentObservation
    )
    wrapped = wrapped_class(env)
    wrapped.observation_space(params)  # the check, before anything compiles
    return wrapped


def view_layout(env: Environment[Any, Any], params: Any, who: str) -> tuple[int, tuple[int, int, int]]:
    """``(start, (H, W, C))``: where the image view sits in each agent's flat row of ``env`` (a
    :func:`flatten_agent_observations` env whose dict observation has exactly one entry of rank 3
    per agent, such as IPD-in-the-Matrix's ``"observation"``: ``(6, (5, 5, 10))``).

    Raises:
        ConfigError: ``env`` has no such view (a flat observation, or a dict without exactly one
            image entry); the message starts with ``who`` (the setting that asked for a CNN) and
            names the fix.
    """
    layouts = (
        {name: layout for name, layout in env.entries(params).items() if len(layout[1]) == 3}
        if isinstance(env, FlatAgentObservation)
        else {}
    )
    if len(layouts) != 1:
        inner = env.env if isinstance(env, FlatAgentObservation) else env
        space = inner.observation_space(params)
        name = getattr(inner, "name", type(inner).__name__)
        described = repr(space) if isinstance(space, spaces.Dict) else f"{tuple(space.shape)}"
        raise ConfigError(
            f"{who} runs a CNN on the image view (H, W, C) inside each agent's dict observation, as on "
            f"IPD-in-the-Matrix ('observation': 5 x 5 x 10, beside 'inventory'); {name} observes "
            f"{described}, which has {'several' if layouts else 'no'} such view. Use torso='mlp' for this env."
        )
    ((start, shape),) = layouts.values()
    return start, (shape[0], shape[1], shape[2])


class TheftMemoryState(struct.PyTreeNode):
    """State of :class:`TheftMemory`: the inner env's state and, per player, the steps left of its
    memory of a theft (int32 ``(2,)``, 0: none)."""

    env_state: Any
    theft: jax.Array


class TheftMemory(Wrapper):
    """CoinGame observations that remember a theft: float32 ``(2, 2 * 36)``.

    Player ``i``'s 36 observation values fill the first half of its row while the other player
    has not taken ``i``'s coin in the last ``steps`` steps, and the second half (the first half
    zero) for ``steps`` steps after it has (counting the step of the theft; the memory clears at
    the end of each inner episode). A policy linear in this observation (a tabular meta-agent)
    is then two policies: one after a theft and one otherwise. Wrap the bare CoinGame (its
    ``info`` must report ``other_coins`` and ``inner_episode_done``); everything else (reward,
    info, episode ends) passes through.

    Args:
        env: a bare two-player CoinGame (flat observations ``(2, 36)``).
        steps: how long a theft is remembered (>= 1).
    """

    wraps_state = True

    def __init__(self, env: Environment[Any, Any], steps: int = 4):
        super().__init__(env)
        if isinstance(steps, bool) or int(steps) != steps or int(steps) < 1:
            raise ConfigError(f"TheftMemory: steps must be an integer >= 1, got {steps!r}.")
        self.steps = int(steps)

    def _observe(self, obs: Any, theft: jax.Array) -> jax.Array:
        obs = jnp.asarray(obs, jnp.float32)
        robbed = (theft > 0)[:, None].astype(jnp.float32)
        return jnp.concatenate([obs * (1.0 - robbed), obs * robbed], -1)

    def reset_env(self, key: jax.Array, params: Any) -> tuple[jax.Array, TheftMemoryState]:
        obs, state = self.env.reset_env(key, params)
        theft = jnp.zeros((2,), jnp.int32)
        return self._observe(obs, theft), TheftMemoryState(state, theft)

    def step_env(self, key: jax.Array, state: TheftMemoryState, action: Any, params: Any) -> StepOutput:
        obs, next_state, reward, terminated, truncated, info = self.env.step_env(
            key, state.env_state, action, params
        )
        # other_coins[j]: player j took the other's coin; so player i was robbed by other_coins[1 - i].
        robbed = jnp.asarray(info["other_coins"])[::-1] > 0
        theft = jnp.where(robbed, self.steps, jnp.maximum(state.theft - 1, 0))
        theft = jnp.where(jnp.asarray(info["inner_episode_done"]), 0, theft).astype(jnp.int32)
        return (
            self._observe(obs, theft),
            TheftMemoryState(next_state, theft),
            reward,
            terminated,
            truncated,
            info,
        )

    def observation_space(self, params: Any = None) -> spaces.Box:
        space = self.env.observation_space(params)
        if not (isinstance(space, spaces.Box) and tuple(space.shape) == (2, 36)):
            raise ConfigError(
                f"TheftMemory wraps CoinGame's flat observations (2, 36); {self.env!r} observes {space!r}. "
                "Make CoinGame-v0 with grid_observation=False (the default)."
            )
        return spaces.Box(0.0, 1.0, (2, 72), jnp.float32)
