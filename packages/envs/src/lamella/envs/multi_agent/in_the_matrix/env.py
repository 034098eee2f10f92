"""InTheMatrix (STORM): coins, an interaction beam and inventory payoffs on an 8x8 grid (Pax's rules)."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import rendering, spaces, struct
from lamella.envs._inputs import bool_setting, check_one_state, integer_setting
from lamella.envs.environment import Environment, StepOutput
from lamella.envs.multi_agent.matrix_game import check_real_array

__all__ = [
    "ACTION_NAMES",
    "AGENT_SPAWN_PAIRS",
    "COIN_SPAWNS",
    "ITEM_NAMES",
    "InTheMatrix",
    "InTheMatrixParams",
    "InTheMatrixState",
    "check_in_the_matrix_payoff",
]

LEFT, RIGHT, FORWARD, INTERACT, STAY = range(5)
NUM_ACTIONS = 5
ACTION_NAMES = ("left", "right", "forward", "interact", "stay")
EMPTY, RED_AGENT, BLUE_AGENT, RED_COIN, BLUE_COIN, WALL, BEAM = range(7)
ITEM_NAMES = ("empty", "red agent", "blue agent", "red coin", "blue coin", "wall", "interact beam")
NUM_ITEMS = 6  # observation channels for the items 1..6
GRID_SIZE = 8
VIEW = 5  # the egocentric view is VIEW x VIEW
NUM_COINS = 6  # per colour
OBS_CHANNELS = NUM_ITEMS + 4  # items, then the other agent's heading relative to the observer's

# (x, y) step of each heading 0..3, Pax's STEP.
_STEP = np.array([[0, 1], [1, 0], [0, -1], [-1, 0]], np.int32)
# Heading change of each action (left +1, right -1, mod 4).
_TURN = np.array([1, 3, 0, 0, 0], np.int32)

# The twelve coin spawn cells of Pax's fixed layout; even entries are one colour's, odd the other's.
COIN_SPAWNS = np.array(
    [[1, 1], [1, 2], [2, 1], [1, 6], [2, 6], [1, 5], [6, 2], [5, 1], [6, 1], [6, 6], [6, 5], [5, 6]], np.int32
)
_AGENT_SPAWN_CELLS = [
    (0, 0), (0, 1), (0, 2), (1, 0), (1, 2), (0, 7), (0, 6), (0, 5), (1, 7),
    (7, 0), (7, 1), (7, 2), (6, 0), (7, 7), (7, 6), (7, 5), (6, 7), (6, 5),
]  # fmt: skip
# 18 spawn pairs (red's cell, blue's cell), point-mirrored through the grid's centre, as Pax
# builds them from its AGENT_SPAWNS list: (i, j) -> red at (j, i), blue at (7 - j, 7 - i).
AGENT_SPAWN_PAIRS = np.array(
    [[(j, i), (GRID_SIZE - 1 - j, GRID_SIZE - 1 - i)] for i, j in _AGENT_SPAWN_CELLS], np.int32
)
for _table in (COIN_SPAWNS, AGENT_SPAWN_PAIRS):
    _table.flags.writeable = False

# Grid offsets of the egocentric view for each heading: view cell (i, j) is j steps ahead and
# i - 2 steps to the side (the side of heading + 1), so the observer sits at (2, 0) looking
# along the columns. The same cells and orientation as Pax's padded slice rotated by its heading.
_rows, _cols = np.meshgrid(np.arange(VIEW), np.arange(VIEW), indexing="ij")
_VIEW_OFFSETS = np.stack(
    [_cols[..., None] * _STEP[d] + (_rows[..., None] - VIEW // 2) * _STEP[(d + 1) % 4] for d in range(4)]
).reshape(4, VIEW * VIEW, 2)  # (heading, cell, xy)

PAYOFF_SHAPE = (2, 2, 2)


def check_in_the_matrix_payoff(payoff: Any, where: str = "payoff") -> jax.Array:
    """Validate an InTheMatrix payoff and return it as float32 ``(2, 2, 2)``.

    ``payoff[k]`` is player ``k``'s ``2 x 2`` matrix over the two inventories' coin types:
    ``r_k = p_red^T payoff[k] p_blue`` with ``p`` each player's normalised inventory ``[red
    coins, blue coins]`` (Pax's ``payoff_matrix``). Only shape and dtype are read.

    Raises:
        ValueError: another shape, or a dtype that is not a real number.
    """
    expected = (
        f"expected a real-valued array of shape {PAYOFF_SHAPE}, payoff[player] = a 2x2 matrix over "
        "(red player's coin type, blue player's coin type), e.g. [[[3, 0], [5, 1]], [[3, 5], [0, 1]]]"
    )
    hint = (
        " A (4, 2) matrix is the iterated matrix games' layout; InTheMatrix takes one 2x2 "
        "matrix per player (see lamella.envs.multi_agent.in_the_matrix.PAYOFFS)."
    )
    return check_real_array(payoff, PAYOFF_SHAPE, where, expected, {(4, 2): hint})


class InTheMatrixState(struct.PyTreeNode):
    """State of :class:`InTheMatrix`. Cells are ``(x, y)`` in ``0..7`` (Pax's order).

    Attributes:
        agent_positions: int32 ``(2, 2)``, the red player's cell then the blue player's.
        agent_directions: int32 ``(2,)``, headings 0..3; heading ``d`` steps by
            ``[(0, 1), (1, 0), (0, -1), (-1, 0)][d]``.
        grid: int8 ``(8, 8)``, the item in each cell: 0 empty, 1 red agent, 2 blue agent,
            3 red coin, 4 blue coin, 6 interaction beam (shown for one step).
        inventories: int32 ``(2, 2)``, coins each player holds: ``[red coins, blue coins]``.
        coin_cells: int32 ``(2, 6, 2)``, the spawn cells of the red coins then the blue coins
            (drawn at reset, refilled at every respawn).
        freeze: int32 ``()``, -1 when nobody is frozen; after an interaction, the frozen steps
            left (both players stay), the respawn happening when it reaches 0.
        time: int32 ``()``, steps in the current inner episode.
        outer_time: int32 ``()``, inner episodes finished in this episode.
    """

    agent_positions: jax.Array
    agent_directions: jax.Array
    grid: jax.Array
    inventories: jax.Array
    coin_cells: jax.Array
    freeze: jax.Array
    time: jax.Array
    outer_time: jax.Array


class InTheMatrixParams(struct.PyTreeNode):
    """Parameters of :class:`InTheMatrix` (all traced, all vmappable).

    Attributes:
        payoff: float32 ``(2, 2, 2)`` (see :func:`check_in_the_matrix_payoff`).
        freeze_penalty: int, frozen steps after an interaction (5 in every Pax config; >= 1).
        num_inner_steps: int, steps per inner episode (152 in Pax's configs).
        num_outer_steps: int, inner episodes per episode (1: every inner episode is an episode).
    """

    payoff: jax.Array
    freeze_penalty: int = struct.field(default=5, bounds=(1, None))
    num_inner_steps: int = struct.field(default=152, bounds=(1, None))
    num_outer_steps: int = struct.field(default=1, bounds=(1, None))


def _gather(grid: jax.Array, cells: jax.Array) -> jax.Array:
    """Items at ``cells`` (``(..., 2)``, inside the grid) of an ``(8, 8)`` grid."""
    return grid.reshape(-1)[cells[..., 0] * GRID_SIZE + cells[..., 1]]


def _inside(cells: jax.Array) -> jax.Array:
    return jnp.all((cells >= 0) & (cells < GRID_SIZE), -1)


class InTheMatrix(Environment[InTheMatrixState, InTheMatrixParams]):
    """IPD / IMP in the Matrix (STORM): two players gather coins and play a matrix game by beam.

    Khan et al.'s spatio-temporal matrix games (Shaper, AAMAS 2024), with the rules of Pax's
    ``InTheMatrix`` (``pax/envs/in_the_matrix.py``), written anew for lamella's contract.
    Coins are moves of the matrix game: a red coin is the first action (cooperate in the IPD,
    heads in matching pennies) and a blue coin the second, *for both players*.

    Rules (``n = 2``; agent 0 red, agent 1 blue):

    - **Grid.** 8x8 with walls outside. Six red and six blue coins sit on twelve fixed spawn
      cells (:data:`COIN_SPAWNS`). With ``fixed_coins=True`` one colour takes the even entries
      and the other the odd ones (a fair coin decides at reset); otherwise the twelve cells
      are shuffled between the colours at reset.
    - **Moves.** ``left``/``right`` turn (heading + 1 / - 1), ``forward`` steps one cell
      along the heading (clamped at the walls), ``interact`` fires the beam, ``stay`` does
      nothing. If both players end on one cell, the one that did not move keeps its cell;
      if both moved, a fair coin picks who does. Players can walk through each other
      (swap cells).
    - **Coins.** Walking onto a coin moves it into the inventory. Coins do not come back
      until the next respawn.
    - **Beam.** ``interact`` marks the cells 1 and 2 ahead and 1 ahead on either side
      (cells past a wall fall back to the cell ahead); the marks are visible for one step.
      If the other player stands on a marked cell and both inventories hold at least one
      coin, both get their payoff: ``r_k = p_red^T payoff[k] p_blue`` with ``p`` the
      inventories normalised to sum 1. Then both are frozen for ``freeze_penalty`` steps
      (actions ignored, the opponent's inventory visible), after which the respawn puts
      them on a random pair of spawn cells (:data:`AGENT_SPAWN_PAIRS`) with random headings,
      empties the inventories and refills every coin cell (a player that lands on a coin
      cell covers, and so removes, that coin).
    - **Inner and outer episodes** as in :class:`~lamella.envs.multi_agent.CoinGame`: the
      env starts the next inner episode itself (a full reset) while more follow,
      ``info["inner_episode_done"]`` marks every inner end, ``truncated`` the last one;
      with ``num_outer_steps = 1`` (the default) every inner episode is an episode.

    Agents: 2 (leading agent axis on everything below).

    Action: int32 ``(2,)``, ``MultiDiscrete([5, 5])``: 0 left, 1 right, 2 forward,
    3 interact, 4 stay (Pax's ids). An action outside ``0..4`` is stay.

    Observation: a dict, one row per agent:

    - ``"observation"``: uint8 ``(2, 5, 5, 10)``, the 5x5 cells in front of the agent,
      rotated to its heading: view cell ``(i, j)`` is ``j`` steps ahead and ``i - 2`` steps
      to the side (the agent itself at ``(2, 0)``). Channels: one-hot items ``[self, other,
      red coin, blue coin, wall, beam]`` (the blue player sees itself in channel 0, as Pax
      swaps the agent channels; coin channels are not swapped), then a one-hot of the other
      player's heading minus the observer's (mod 4) on the other's cell.
    - ``"inventory"``: uint8 ``(2, 6)``: own red and blue coins, own and other's "holds a
      coin" flags, then the other's red and blue coins while ``freeze >= 0`` (0 otherwise).

    Reward: float32 ``(2,)``, the payoffs above on an interaction step, else 0.

    Terminated: never. Truncated: bool ``(2,)``, all True on the step that ends the last
    inner episode.

    Info: ``inner_episode_done`` bool ``(2,)``; ``interaction`` bool ``(2,)``, all True on a
    paying interaction; ``coins`` int32 ``(2, 2)``, red and blue coins each agent picked
    up this step.

    Global state (:meth:`global_state`): float32 ``(399,)``: the grid one-hot over items
    1..6 ``(8 * 8 * 6)``, both headings one-hot ``(2 * 4)``, the inventories ``(4)``, then
    ``freeze / freeze_penalty``, ``time / num_inner_steps``, ``outer_time / num_outer_steps``.

    Pax's quirks (``pax_quirks=True``): headings at (re)spawn are drawn from 0..2 only
    (Pax's ``randint(0, 3)``); ``fixed_coins`` always gives the red coins the odd spawn
    entries (Pax's ``randint(0, 1)`` is always 0); both rewards are 0 on every step that ends
    an inner episode. By default headings are uniform over 0..3, the colours' layout is a
    fair coin, and that step pays like any other.

    Args:
        payoff: default payoff of the params, ``(2, 2, 2)``; IPD-in-the-Matrix's when omitted.
        fixed_coins: the two fixed coin layouts (Pax's ``fixed_coin_location``) rather than a
            shuffle of the twelve spawn cells.
        freeze_penalty, num_inner_steps, num_outer_steps: defaults of the params (>= 1).
        pax_quirks: Pax's three quirks above.
    """

    num_agents = 2
    #: The agents do not form one team (multi-agent contract: a runner refuses a team reward here).
    cooperative = False

    def __init__(
        self,
        payoff: Any = None,
        fixed_coins: bool = True,
        freeze_penalty: int = 5,
        num_inner_steps: int = 152,
        num_outer_steps: int = 1,
        pax_quirks: bool = False,
    ):
        from lamella.envs.multi_agent.in_the_matrix import PAYOFFS

        payoff = PAYOFFS["prisoners_dilemma"] if payoff is None else payoff
        self._payoff = np.asarray(check_in_the_matrix_payoff(payoff, f"{type(self).__name__}(payoff=...)"))
        for name, value in (
            ("freeze_penalty", freeze_penalty),
            ("num_inner_steps", num_inner_steps),
            ("num_outer_steps", num_outer_steps),
        ):
            integer_setting(value, name, type(self).__name__, minimum=1)
        self._defaults = (int(freeze_penalty), int(num_inner_steps), int(num_outer_steps))
        self.fixed_coins = bool_setting(fixed_coins, "fixed_coins", type(self).__name__)
        self.pax_quirks = bool_setting(pax_quirks, "pax_quirks", type(self).__name__)

    @property
    def default_params(self) -> InTheMatrixParams:
        return InTheMatrixParams(jnp.asarray(self._payoff), *self._defaults)

    # Spaces ----------------------------------------------------------------------------------

    def observation_space(self, params: InTheMatrixParams | None = None) -> spaces.Dict:
        return spaces.Dict(
            {
                "observation": spaces.Box(0, 1, (2, VIEW, VIEW, OBS_CHANNELS), jnp.uint8),
                "inventory": spaces.Box(0, 2 * NUM_COINS, (2, 6), jnp.uint8),
            }
        )

    def action_space(self, params: InTheMatrixParams | None = None) -> spaces.MultiDiscrete:
        return spaces.MultiDiscrete([NUM_ACTIONS, NUM_ACTIONS])

    def global_state_space(self, params: InTheMatrixParams | None = None) -> spaces.Box:
        """The space of :meth:`global_state`: float32 ``(399,)``."""
        size = GRID_SIZE * GRID_SIZE * NUM_ITEMS + 8 + 4 + 3
        high = np.ones(size, np.float32)
        high[GRID_SIZE * GRID_SIZE * NUM_ITEMS + 8 : -3] = 2 * NUM_COINS
        return spaces.Box(np.zeros(size, np.float32), high, (size,), jnp.float32)

    # Observations ----------------------------------------------------------------------------

    def observation_of(
        self, state: InTheMatrixState, params: InTheMatrixParams | None = None
    ) -> dict[str, jax.Array]:
        """Both agents' observations of ``state`` (see the class docs)."""
        check_one_state(self, state, "observation_of")
        offsets = jnp.asarray(_VIEW_OFFSETS)[state.agent_directions]  # (2, 25, 2)
        cells = state.agent_positions[:, None, :] + offsets
        inside = _inside(cells)
        items = jnp.where(inside, _gather(state.grid, jnp.clip(cells, 0, GRID_SIZE - 1)), WALL).astype(
            jnp.int32
        )
        # Blue sees itself as channel 0: swap the two agent codes in its view.
        swapped = jnp.where(items == RED_AGENT, BLUE_AGENT, jnp.where(items == BLUE_AGENT, RED_AGENT, items))
        items = jnp.stack([items[0], swapped[1]])
        one_hot = items[..., None] == jnp.arange(1, NUM_ITEMS + 1)  # (2, 25, 6)
        relative = (state.agent_directions[::-1] - state.agent_directions) % 4  # (2,)
        other_here = items == BLUE_AGENT  # after the swap, the other agent is code 2 for both
        heading = other_here[..., None] & (relative[:, None, None] == jnp.arange(4))
        view = jnp.concatenate([one_hot, heading], -1).astype(jnp.uint8).reshape(2, VIEW, VIEW, OBS_CHANNELS)

        inventory = state.inventories
        holds = jnp.sum(inventory, -1) > 0
        shown = jnp.where(state.freeze >= 0, inventory[::-1], 0)
        inventory_obs = jnp.concatenate([inventory, holds[:, None], holds[::-1, None], shown], -1).astype(
            jnp.uint8
        )
        return {"observation": view, "inventory": inventory_obs}

    def global_state(self, state: InTheMatrixState, params: InTheMatrixParams | None = None) -> jax.Array:
        """The whole state, float32 ``(399,)`` (see the class docs)."""
        check_one_state(self, state, "global_state")
        params = self.default_params if params is None else params
        grid = (state.grid.astype(jnp.int32)[..., None] == jnp.arange(1, NUM_ITEMS + 1)).reshape(-1)
        headings = (state.agent_directions[:, None] == jnp.arange(4)).reshape(-1)
        scalars = jnp.stack(
            [
                jnp.maximum(state.freeze, 0) / jnp.asarray(params.freeze_penalty, jnp.float32),
                state.time / jnp.asarray(params.num_inner_steps, jnp.float32),
                state.outer_time / jnp.asarray(params.num_outer_steps, jnp.float32),
            ]
        )
        return jnp.concatenate(
            [
                grid.astype(jnp.float32),
                headings.astype(jnp.float32),
                state.inventories.reshape(-1).astype(jnp.float32),
                jnp.clip(scalars, 0.0, 1.0).astype(jnp.float32),
            ]
        )

    # Reset and step --------------------------------------------------------------------------

    def _spawn_agents(self, u_pair: jax.Array, u_dirs: jax.Array) -> tuple[jax.Array, jax.Array]:
        pairs = len(AGENT_SPAWN_PAIRS)
        pair = jnp.minimum(jnp.floor(u_pair * pairs).astype(jnp.int32), pairs - 1)
        num_headings = 3 if self.pax_quirks else 4
        dirs = jnp.minimum(jnp.floor(u_dirs * num_headings).astype(jnp.int32), num_headings - 1)
        return jnp.asarray(AGENT_SPAWN_PAIRS)[pair], dirs

    def _fill_grid(self, coin_cells: jax.Array, agents: jax.Array) -> jax.Array:
        """Coins on their cells, then the agents (an agent on a coin cell covers the coin)."""
        cell = jnp.arange(GRID_SIZE * GRID_SIZE, dtype=jnp.int32)
        index = coin_cells[..., 0] * GRID_SIZE + coin_cells[..., 1]  # (2, 6)
        grid = jnp.zeros((GRID_SIZE * GRID_SIZE,), jnp.int32)
        grid = jnp.where(jnp.any(cell[:, None] == index[1][None, :], -1), BLUE_COIN, grid)
        grid = jnp.where(jnp.any(cell[:, None] == index[0][None, :], -1), RED_COIN, grid)
        agent_index = agents[:, 0] * GRID_SIZE + agents[:, 1]
        grid = jnp.where(cell == agent_index[0], RED_AGENT, grid)
        grid = jnp.where(cell == agent_index[1], BLUE_AGENT, grid)
        return grid.reshape(GRID_SIZE, GRID_SIZE).astype(jnp.int8)

    def _fresh_state(self, key: jax.Array, stream: int) -> InTheMatrixState:
        u = fast_random.uniform16(key, (4,), stream=stream)
        agents, dirs = self._spawn_agents(u[0], u[1:3])
        spawns = jnp.asarray(COIN_SPAWNS)
        if self.fixed_coins:
            # Pax's randint(0, 1) is always 0: the red coins take the odd entries.
            red_even = jnp.asarray(False) if self.pax_quirks else u[3] < 0.5
            even, odd = spawns[0::2], spawns[1::2]
            coin_cells = jnp.where(red_even, jnp.stack([even, odd]), jnp.stack([odd, even]))
        else:
            order = jnp.argsort(fast_random.uniform(key, (2 * NUM_COINS,), stream=stream + 1))
            coin_cells = spawns[order].reshape(2, NUM_COINS, 2)
        zero = jnp.zeros((), jnp.int32)
        return InTheMatrixState(
            agent_positions=agents,
            agent_directions=dirs,
            grid=self._fill_grid(coin_cells, agents),
            inventories=jnp.zeros((2, 2), jnp.int32),
            coin_cells=coin_cells,
            freeze=jnp.asarray(-1, jnp.int32),
            time=zero,
            outer_time=zero,
        )

    def reset_env(
        self, key: jax.Array, params: InTheMatrixParams
    ) -> tuple[dict[str, jax.Array], InTheMatrixState]:
        check_in_the_matrix_payoff(params.payoff, "params.payoff")
        # One compiled program even when called eagerly (op by op, a reset takes a second);
        # inside an outer jit or vmap the inner jit is inlined.
        return self._reset_compiled(key, params)

    @functools.partial(jax.jit, static_argnums=0)
    def _reset_compiled(
        self, key: jax.Array, params: InTheMatrixParams
    ) -> tuple[dict[str, jax.Array], InTheMatrixState]:
        state = self._fresh_state(key, 0)
        return self.observation_of(state, params), state

    def step_env(
        self, key: jax.Array, state: InTheMatrixState, action: Any, params: InTheMatrixParams
    ) -> StepOutput:
        check_in_the_matrix_payoff(params.payoff, "params.payoff")
        return self._step_compiled(key, state, jnp.asarray(action), params)

    @functools.partial(jax.jit, static_argnums=0)
    def _step_compiled(
        self, key: jax.Array, state: InTheMatrixState, action: jax.Array, params: InTheMatrixParams
    ) -> StepOutput:
        payoff = jnp.asarray(params.payoff, jnp.float32)
        action = jnp.asarray(action).astype(jnp.int32)
        action = jnp.where((action >= 0) & (action < NUM_ACTIONS) & (state.freeze <= 0), action, STAY)
        u = fast_random.uniform16(key, (4,), stream=0)

        # Turn and move (moves along the heading before the turn; forward does not turn).
        step = jnp.asarray(_STEP)
        dirs = (state.agent_directions + jnp.asarray(_TURN)[action]) % 4
        forward = (action == FORWARD)[:, None]
        old = state.agent_positions
        new = jnp.clip(old + jnp.where(forward, step[state.agent_directions], 0), 0, GRID_SIZE - 1)
        moved = jnp.any(new != old, -1)
        collision = jnp.all(new[0] == new[1])
        red_wins = u[0] < 0.5
        keep_red = collision & ((moved[0] & ~moved[1]) | (moved[0] & moved[1] & ~red_wins))
        keep_blue = collision & ((moved[1] & ~moved[0]) | (moved[0] & moved[1] & red_wins))
        new = jnp.where(jnp.stack([keep_red, keep_blue])[:, None], old, new)

        # Pick up the coin on the new cell.
        grid = state.grid.reshape(-1).astype(jnp.int32)
        found = _gather(state.grid, new).astype(jnp.int32)  # (2,)
        coins = jnp.stack([found == RED_COIN, found == BLUE_COIN], -1).astype(jnp.int32)  # (2, 2)
        inventories = state.inventories + coins
        cell = jnp.arange(GRID_SIZE * GRID_SIZE, dtype=jnp.int32)
        old_index = old[:, 0] * GRID_SIZE + old[:, 1]
        new_index = new[:, 0] * GRID_SIZE + new[:, 1]
        vacated = (cell == old_index[0]) | (cell == old_index[1])
        grid = jnp.where(vacated | (grid == BEAM), EMPTY, grid)
        grid = jnp.where(cell == new_index[0], RED_AGENT, grid)
        grid = jnp.where(cell == new_index[1], BLUE_AGENT, grid)

        # The beam: 1 and 2 ahead, 1 ahead on either side (past a wall: the cell ahead).
        ahead = step[dirs]
        side = step[(dirs + 1) % 4]
        one = jnp.clip(new + ahead, 0, GRID_SIZE - 1)
        two = jnp.clip(new + 2 * ahead, 0, GRID_SIZE - 1)
        plus = new + ahead + side
        minus = new + ahead - side
        plus = jnp.where(_inside(plus)[:, None], plus, one)
        minus = jnp.where(_inside(minus)[:, None], minus, one)
        targets = jnp.stack([one, two, plus, minus], 1)  # (2, 4, 2)
        target_index = targets[..., 0] * GRID_SIZE + targets[..., 1]  # (2, 4)
        target_items = grid[target_index]
        other_code = jnp.array([BLUE_AGENT, RED_AGENT])
        hit = jnp.any(target_items == other_code[:, None], -1)
        zap = action == INTERACT
        holds = jnp.sum(inventories, -1) > 0
        interaction = jnp.any(zap & hit) & holds[0] & holds[1]
        beam_cells = jnp.any(
            (cell[:, None] == target_index.reshape(-1)[None, :]) & jnp.repeat(zap, 4)[None, :], -1
        )
        grid = jnp.where(beam_cells & (grid == EMPTY), BEAM, grid)

        share = inventories.astype(jnp.float32) / jnp.maximum(
            jnp.sum(inventories, -1, keepdims=True), 1
        ).astype(jnp.float32)
        value = jnp.einsum("i,kij,j->k", share[0], payoff, share[1])
        reward = jnp.where(interaction, value, 0.0)

        # Freeze, then the respawn when it runs out.
        freeze = jnp.where(interaction, params.freeze_penalty, state.freeze)
        freeze = jnp.where(freeze > 0, freeze - 1, freeze)
        respawn = freeze == 0
        spawn_agents, spawn_dirs = self._spawn_agents(u[1], u[2:4])
        positions = jnp.where(respawn, spawn_agents, new)
        dirs = jnp.where(respawn, spawn_dirs, dirs)
        grid = jnp.where(respawn, self._fill_grid(state.coin_cells, spawn_agents).reshape(-1), grid)
        inventories = jnp.where(respawn, 0, inventories)
        freeze = jnp.where(interaction, params.freeze_penalty, jnp.where(respawn, -1, freeze))

        time = state.time + 1
        inner_done = time >= params.num_inner_steps
        outer_time = state.outer_time + inner_done.astype(jnp.int32)
        episode_over = outer_time >= params.num_outer_steps
        if self.pax_quirks:
            reward = jnp.where(inner_done, 0.0, reward)
        stepped = InTheMatrixState(
            agent_positions=positions,
            agent_directions=dirs,
            grid=grid.reshape(GRID_SIZE, GRID_SIZE).astype(jnp.int8),
            inventories=inventories,
            coin_cells=state.coin_cells,
            freeze=freeze.astype(jnp.int32),
            time=time,
            outer_time=outer_time,
        )
        restart = inner_done & ~episode_over
        fresh = self._fresh_state(key, 2).replace(outer_time=outer_time)
        state = jax.tree.map(lambda a, b: jnp.where(restart, a, b), fresh, stepped)
        info = {
            "inner_episode_done": jnp.broadcast_to(inner_done, (2,)),
            "interaction": jnp.broadcast_to(interaction, (2,)),
            "coins": coins,
        }
        terminated = jnp.zeros((2,), jnp.bool_)
        truncated = jnp.broadcast_to(episode_over, (2,))
        return (
            self.observation_of(state, params),
            state,
            reward.astype(jnp.float32),
            terminated,
            truncated,
            info,
        )

    # Rendering -------------------------------------------------------------------------------

    def render(self, state: InTheMatrixState, params: InTheMatrixParams | None = None) -> jax.Array:
        """The grid, uint8 ``(272, 256, 3)``: 32-pixel cells, x down the rows, y across the columns.

        Coins are red and blue discs, the beam's cells pale yellow, the players red and blue
        triangles pointing along their heading (grey while frozen); the bar at the bottom
        shows each player's inventory (red and blue coins) and the inner episode's progress.
        """
        check_one_state(self, state, "render")
        params = self.default_params if params is None else params
        cell, bar = 32, 16
        red, blue = (214, 39, 40), (31, 119, 180)
        grid = state.grid.astype(jnp.int32)
        cells = jnp.full((GRID_SIZE, GRID_SIZE, 3), 238, jnp.uint8)
        cells = jnp.where((grid == BEAM)[..., None], jnp.asarray((250, 236, 140), jnp.uint8), cells)
        frame = rendering.cells_to_frame(cells, cell, (200, 198, 190))
        # Coins: one disc per coin cell, drawn for all cells at once (pixel -> its cell's item).
        pixel = np.arange(GRID_SIZE * cell)
        within = (pixel % cell) - (cell - 1) / 2.0
        disc = (within[:, None] ** 2 + within[None, :] ** 2) <= (cell * 0.22) ** 2
        item = jnp.repeat(jnp.repeat(grid, cell, axis=0), cell, axis=1)
        for code, color in ((RED_COIN, red), (BLUE_COIN, blue)):
            frame = jnp.where((disc & (item == code))[..., None], jnp.asarray(color, jnp.uint8), frame)
        frame = jnp.concatenate([frame, jnp.full((bar, GRID_SIZE * cell, 3), 255, jnp.uint8)], 0)
        frozen = state.freeze >= 0
        step = jnp.asarray(_STEP, jnp.float32)
        for agent, color in enumerate((red, blue)):
            center = state.agent_positions[agent].astype(jnp.float32) + 0.5
            ahead = step[state.agent_directions[agent]]
            side = step[(state.agent_directions[agent] + 1) % 4]
            corners = jnp.stack(
                [center + 0.4 * ahead, center - 0.35 * ahead + 0.3 * side, center - 0.35 * ahead - 0.3 * side]
            )
            points = corners[:, ::-1] * cell  # (x, y) cell coordinates -> (column, row) pixels
            frame = rendering.fill_polygon(frame, points, (60, 60, 60))
            shrunk = center + 0.75 * (corners - center)
            fill: Any = jnp.where(
                frozen, jnp.asarray((150, 150, 150), jnp.uint8), jnp.asarray(color, jnp.uint8)
            )
            frame = rendering.fill_polygon(frame, shrunk[:, ::-1] * cell, fill)
        top = GRID_SIZE * cell + 3
        width = GRID_SIZE * cell
        # Inventories: one 3-pixel square per coin held, red then blue, red player left, blue right.
        slot = np.arange(width) // 5  # (width,) which square a pixel column belongs to
        half = slot // (width // 10)  # 0 for the red player's half, 1 for blue's
        index = slot % (width // 10)
        kind = index // (2 * NUM_COINS)
        count = index % (2 * NUM_COINS)
        held = state.inventories[jnp.asarray(np.minimum(half, 1)), jnp.asarray(np.minimum(kind, 1))]
        show = (kind < 2) & (half < 2) & (np.arange(width) % 5 < 3)
        column = show & (count < held)
        palette = jnp.where(
            jnp.asarray(kind == 0)[:, None], jnp.asarray(red, jnp.uint8), jnp.asarray(blue, jnp.uint8)
        )
        strip = jnp.where(column[:, None], palette, frame[top + 2])
        frame = frame.at[top + 2 : top + 5].set(jnp.broadcast_to(strip, (3, width, 3)))
        progress = jnp.clip(state.time / jnp.maximum(params.num_inner_steps, 1), 0.0, 1.0)
        return rendering.fill_rect(frame, 0, top + 9, progress * width, top + 12, (40, 160, 60))

    def __repr__(self) -> str:
        return (
            f"InTheMatrix(fixed_coins={self.fixed_coins}, freeze_penalty={self._defaults[0]}, "
            f"num_inner_steps={self._defaults[1]}, num_outer_steps={self._defaults[2]}, "
            f"pax_quirks={self.pax_quirks})"
        )
