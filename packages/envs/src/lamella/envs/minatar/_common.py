"""Pieces every MinAtar game shares: action sets, sticky actions, grids, spaces, frames.

MinAtar (Young & Tian 2019) plays on a 10 x 10 grid; the observation is a
``(10, 10, channels)`` bool array with one channel per kind of object. All five
games read the same six actions (``n l u r d f``: no-op, left, up, right, down,
fire), and each has a smaller *minimal* action set of the ones that matter.

Every step first resolves the sticky action (with probability
``sticky_action_prob`` the previous action is repeated instead of the chosen
one), then runs the game's deterministic transition with the step's random
draws passed in. :meth:`MinAtarEnv.transition` is that deterministic part; the
parity tests feed it the same draws they feed the ``minatar`` package.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import spaces
from lamella.envs._fusion import computed_once
from lamella.envs.environment import Environment, StepOutput

NOOP, LEFT, UP, RIGHT, DOWN, FIRE = range(6)
FULL_ACTION_SET = (NOOP, LEFT, UP, RIGHT, DOWN, FIRE)
GRID = 10
CELL_PIXELS = 16

# One colour per channel, drawn in channel order (a higher channel covers a lower one, as in
# minatar's own display); cell colour 0 is the empty background.
_PALETTE = (
    (0, 0, 0),
    (70, 140, 250),
    (240, 80, 70),
    (250, 200, 50),
    (80, 200, 110),
    (200, 110, 230),
    (90, 220, 220),
    (250, 150, 60),
    (170, 170, 180),
    (120, 90, 240),
    (240, 240, 240),
)


def lookup(table: Sequence[int], index: jax.Array) -> jax.Array:
    """``table[index]`` for a small constant table, as a chain of selects (vectorises under vmap)."""
    out = jnp.full(jnp.shape(index), table[0], jnp.int32)
    for i, value in enumerate(table[1:], start=1):
        if value != table[0]:
            out = jnp.where(index == i, jnp.int32(value), out)
    return out


ROW_IDS = np.arange(GRID, dtype=np.int32)


def cell_row(y: Any, x: Any) -> jax.Array:
    """``(10,)`` int32 row masks (bit ``c`` = column ``c``) with the single cell ``(y, x)`` set.

    Nothing is set when ``x`` is off the grid.
    """
    bit = jnp.where((x >= 0) & (x < GRID), jnp.int32(1) << jnp.clip(x, 0, GRID - 1), 0)
    return jnp.where(ROW_IDS == y, bit, 0)


def column_per_row(columns: jax.Array, first_row: int = 1) -> jax.Array:
    """``(10,)`` int32 row masks: row ``first_row + i`` has bit ``columns[i]`` set (-1 = none)."""
    bits = jnp.where((columns >= 0) & (columns < GRID), jnp.int32(1) << jnp.clip(columns, 0, GRID - 1), 0)
    after = GRID - first_row - columns.shape[0]
    return jnp.concatenate([jnp.zeros((first_row,), jnp.int32), bits, jnp.zeros((after,), jnp.int32)])


def grid(rows: Sequence[jax.Array], store_masks: bool = True) -> jax.Array:
    """Channels given as ``(10,)`` int32 row masks -> the ``(10, 10, C)`` bool observation.

    Built per channel and row first (a few values, stored once per env), then
    expanded in one elementwise pass: each of the ``100 C`` cells costs a few selects,
    a shift and a compare. ``store_masks=False`` leaves XLA free to fuse the masks' arithmetic
    into the expansion (cheaper where the masks are little more than state fields).
    """
    # Each channel's masks are computed once per env and stored (computed_once): otherwise XLA on
    # CPU copies what produced them into the expansion, once per cell.
    rows = list(computed_once(*rows)) if store_masks else list(rows)
    channels = len(rows)
    # The expansion writes each grid row as one run of 10 C cells (the observation's memory
    # order: cell j of the run is column j // C, channel j % C), choosing the channel's mask by
    # j % C. XLA's CPU loop then runs its innermost loop over the 10 C cells of a row; built as
    # (10 rows, 10 columns, C channels) it ran over the C channels, a short loop, and the
    # expansion took twice as long (MinAtar's pattern-b loop of benchmarks/envs_throughput.py:
    # Breakout 2.0x, Asterix 1.3x, SpaceInvaders 1.3x, Freeway 1.1x faster).
    position = np.arange(GRID * channels)
    channel_of, column_of = position % channels, (position // channels).astype(np.int32)
    masks = rows[0][:, None]
    for channel in range(1, channels):
        masks = jnp.where(channel_of == channel, rows[channel][:, None], masks)
    return (((masks >> column_of) & 1) != 0).reshape(GRID, GRID, channels)


def sticky_action(
    action: jax.Array,
    last_action: jax.Array,
    uniform: jax.Array,
    sticky_action_prob: Any,
    action_set: Sequence[int],
) -> jax.Array:
    """The full-set action taken: the agent's (mapped through ``action_set``), or the last one.

    As ``minatar.Environment.act``: with probability ``sticky_action_prob``
    (``uniform < sticky_action_prob``) the previous action is repeated.
    """
    chosen = lookup(action_set, jnp.asarray(action, jnp.int32))
    return jnp.where(uniform < sticky_action_prob, last_action, chosen)


def step_uniform(key: jax.Array) -> jax.Array:
    """The sticky-action draw of a step: float32 uniform in [0, 1) from the key's first word."""
    return fast_random.uniform(key, stream=0)


def frame_from_observation(observation: jax.Array) -> jax.Array:
    """A ``(160, 160, 3)`` uint8 frame: each cell coloured by the highest channel set in it."""
    channels = observation.shape[-1]
    weights = jnp.arange(1, channels + 1, dtype=jnp.int32)
    label = jnp.max(jnp.where(observation, weights, 0), axis=-1)
    colours = jnp.asarray(_PALETTE[: channels + 1], jnp.uint8)[label]
    frame = jnp.repeat(jnp.repeat(colours, CELL_PIXELS, axis=0), CELL_PIXELS, axis=1)
    # Faint grid lines so neighbouring cells of one colour stay apart.
    size = GRID * CELL_PIXELS
    on_line = (np.arange(size)[:, None] % CELL_PIXELS == 0) | (np.arange(size)[None, :] % CELL_PIXELS == 0)
    empty = label == 0
    empty_pixels = jnp.repeat(jnp.repeat(empty, CELL_PIXELS, axis=0), CELL_PIXELS, axis=1)
    return jnp.where((on_line & empty_pixels)[..., None], jnp.asarray((40, 40, 48), jnp.uint8), frame)


class MinAtarEnv(Environment[Any, Any]):
    """Base class of the MinAtar games: action sets, spaces, sticky actions and rendering.

    Subclasses set ``channels`` (channel names in order), ``minimal_actions``
    (full-set action indices) and implement ``start`` (the reset), ``draw``,
    ``transition`` and ``get_obs``.

    Args:
        use_minimal_action_set: actions are the game's minimal set (default,
            as gymnax) when True, all six MinAtar actions ``n l u r d f`` when False.
    """

    channels: ClassVar[tuple[str, ...]] = ()
    minimal_actions: ClassVar[tuple[int, ...]] = FULL_ACTION_SET
    # Whether the step stores its new state once before the observation reads it
    # (computed_once): a game whose step is cheaper to recompute than to store turns it off.
    store_state_once: ClassVar[bool] = True

    def __init__(self, use_minimal_action_set: bool = True):
        self.use_minimal_action_set = bool(use_minimal_action_set)
        self.action_set = self.minimal_actions if self.use_minimal_action_set else FULL_ACTION_SET
        # One compiled unit each: called eagerly (tests, notebooks) they compile once instead of
        # once per primitive; inside a caller's jit/vmap/scan they are inlined.
        self._reset_compiled = jax.jit(self.start)
        self._step_compiled = jax.jit(self._step)

    @property
    def obs_shape(self) -> tuple[int, int, int]:
        return (GRID, GRID, len(self.channels))

    def observation_space(self, params: Any = None) -> spaces.Box:
        return spaces.Box(0, 1, self.obs_shape, jnp.bool_)

    def action_space(self, params: Any = None) -> spaces.Discrete:
        return spaces.Discrete(len(self.action_set))

    def draw(self, key: jax.Array, params: Any) -> Any:
        """The step's random draws (a pytree of arrays) from ``key``."""
        raise NotImplementedError

    def transition(self, state: Any, action: Any, draws: Any, params: Any) -> StepOutput:
        """The step with its random draws given: deterministic in ``(state, action, draws)``."""
        raise NotImplementedError

    def get_obs(self, state: Any) -> jax.Array:
        raise NotImplementedError

    def start(self, key: jax.Array, params: Any) -> tuple[jax.Array, Any]:
        """The first observation and state of an episode (``reset_env`` without the jit)."""
        raise NotImplementedError

    def _step(self, key: jax.Array, state: Any, action: Any, params: Any) -> StepOutput:
        _, state, reward, terminated, truncated, info = self.transition(
            state, action, self.draw(key, params), params
        )
        # The new state is stored once and the observation read from it (computed_once).
        if self.store_state_once:
            (state,) = computed_once(state)
        return self.get_obs(state), state, reward, terminated, truncated, info

    def observation_of(self, state: Any, params: Any = None) -> jax.Array:
        """The observation of ``state``: what ``reset_env`` and ``step_env`` return with it.

        :class:`~lamella.envs.wrappers.AutoReset` uses it to select the next state first and
        build one observation from it, instead of building the step's and the reset's
        observations and selecting between them.
        """
        return self.get_obs(state)

    def reset_env(self, key: jax.Array, params: Any) -> tuple[jax.Array, Any]:
        return self._reset_compiled(key, params)

    def step_env(self, key: jax.Array, state: Any, action: Any, params: Any) -> StepOutput:
        return self._step_compiled(key, state, action, params)

    def render(self, state: Any, params: Any = None) -> jax.Array:
        """A ``(160, 160, 3)`` uint8 frame of the observation grid, 16 pixels per cell.

        Each channel has a colour; where several channels share a cell the
        highest-numbered one shows (as in ``minatar``'s own display).
        """
        return frame_from_observation(self.get_obs(state))

    def __repr__(self) -> str:
        return f"{self.name}(use_minimal_action_set={self.use_minimal_action_set})"
