"""Multi-Robot Warehouse with the rules of ``rware==2.0.0``."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import spaces
from lamella.envs._inputs import bool_setting, check_one_state, integer_setting
from lamella.envs.environment import Environment, StepOutput
from lamella.envs.multi_agent.rware import render as rware_render
from lamella.envs.multi_agent.rware.types import RobotWarehouseParams, RobotWarehouseState

__all__ = [
    "ACTION_NAMES",
    "COLLISIONS",
    "DIFFICULTIES",
    "DIRECTION_NAMES",
    "NUM_ACTIONS",
    "REWARD_TYPES",
    "SIZES",
    "RobotWarehouse",
]

NOOP, FORWARD, TURN_LEFT, TURN_RIGHT, TOGGLE_LOAD = range(5)
NUM_ACTIONS = 5
ACTION_NAMES = ("NOOP", "FORWARD", "LEFT", "RIGHT", "TOGGLE_LOAD")
UP, DOWN, LEFT, RIGHT = range(4)
DIRECTION_NAMES = ("UP", "DOWN", "LEFT", "RIGHT")
# (row, column) step of each heading.
_DIRECTION_DELTAS = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]], np.int32)
# Heading after a left / right turn, indexed by the heading (rware turns along UP, RIGHT, DOWN, LEFT).
_AFTER_LEFT_TURN = np.array([LEFT, RIGHT, DOWN, UP], np.int32)
_AFTER_RIGHT_TURN = np.array([RIGHT, LEFT, UP, DOWN], np.int32)

# (shelf_rows, shelf_columns) of rware's named sizes.
SIZES = {"tiny": (1, 3), "small": (2, 3), "medium": (2, 5), "large": (3, 5)}
# Request queue size per agent of rware's difficulties (the id suffixes -easy, none, -hard).
DIFFICULTIES = {"easy": 2.0, "normal": 1.0, "hard": 0.5}
REWARD_TYPES = ("individual", "global", "two_stage")
COLLISIONS = ("resolve", "terminate")

# Observation features of one sensor cell: has_agent, direction one-hot (4), has_shelf, requested.
_CELL_FEATURES = 7
_SELF_FEATURES = 8


def is_highway(row: Any, col: Any, rows: int, cols: int, column_height: int) -> Any:
    """rware's highway rule for the generated layouts (numpy or JAX integers, broadcasting).

    Highways are the corridor columns (``col % 3 == 0``), the corridor rows
    (``row % (column_height + 1) == 0``), the delivery row (the last) and the two
    middle columns of the last ``column_height + 2`` rows (the queue to the goals).
    Every other cell holds a shelf at reset; shelves are dropped only off highways.
    """
    queue_column = (col == cols // 2 - 1) | (col == cols // 2)
    return (
        (col % 3 == 0)
        | (row % (column_height + 1) == 0)
        | (row == rows - 1)
        | ((row > rows - (column_height + 3)) & queue_column)
    )


def parse_layout(layout: str, owner: str = "RobotWarehouse") -> np.ndarray:
    """rware's layout string as a ``(H, W)`` array of ``"x"`` (shelf), ``"."`` (highway) and ``"g"``
    (goal, a highway cell); rware's reading: surrounding blank lines dropped, spaces ignored, letters
    in either case. Raises ``ValueError`` naming the fix for anything rware would reject (and for a
    layout without shelves, where rware fails later)."""
    if not isinstance(layout, str):
        raise ValueError(
            f"{owner}: layout must be a string (rows of 'x', '.', 'g'), got {type(layout).__name__}."
        )
    lines = layout.strip().replace(" ", "").lower().split("\n")
    if any(len(line) != len(lines[0]) for line in lines):
        lengths = sorted({len(line) for line in lines})
        raise ValueError(
            f"{owner}: the layout must be rectangular (every row as long), got row lengths {lengths}."
        )
    bad = sorted(set("".join(lines)) - set("x.g"))
    if bad:
        raise ValueError(
            f"{owner}: the layout may only hold 'x' (shelf), '.' (highway) and 'g' (goal), got {bad}."
        )
    grid = np.array([list(line) for line in lines])
    if not np.any(grid == "g"):
        raise ValueError(f"{owner}: the layout needs at least one goal 'g' (rware's rule).")
    if not np.any(grid == "x"):
        raise ValueError(f"{owner}: the layout has no shelf 'x'; add at least one (requests are shelves).")
    return grid


def _int_at_least(owner: str, value: Any, name: str, minimum: int) -> int:
    return integer_setting(value, name, owner, minimum)


def _choice(owner: str, value: Any, name: str, options: Any) -> str:
    if value not in options:
        raise ValueError(f"{owner}: unknown {name} {value!r}; choose one of {sorted(options)}.")
    return str(value)


def _lookup(table: np.ndarray, index: jax.Array) -> jax.Array:
    """``table[index]`` for a small constant table, as selects (fuses on CPU, unlike a gather)."""
    out = jnp.full(index.shape + table.shape[1:], table[0], jnp.int32)
    for k in range(1, len(table)):
        out = jnp.where((index == k).reshape(index.shape + (1,) * (table.ndim - 1)), table[k], out)
    return out


def _take(values: jax.Array, index: jax.Array) -> jax.Array:
    """``values[index]`` for a short vector, as compare-and-sum (fuses on CPU, unlike a gather)."""
    hit = index[..., None] == np.arange(values.shape[0])
    return jnp.sum(jnp.where(hit, values, 0), -1).astype(values.dtype)


def _distinct_uniform(u: jax.Array, population: int) -> jax.Array:
    """``len(u)`` distinct integers in ``[0, population)``, an ordered uniform sample without replacement.

    Draw ``i`` is uniform among the ``population - i`` values not taken yet: the ``r``-th free
    value is ``r + #{j : s_j - j <= r}`` over the taken values sorted (``s_j - j`` counts the
    free values below ``s_j`` and grows with ``j``). The sorted list is kept by insertion, so
    ``k`` draws cost ``k^2`` comparisons, in a loop of ``k`` small vector steps.
    """
    k = u.shape[0]
    if k == 0:
        return jnp.zeros((0,), jnp.int32)
    big = population + k + 1
    slots = jnp.arange(k, dtype=jnp.int32)

    def draw(taken: jax.Array, inputs: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        u_i, i = inputs
        free = population - i
        rank = jnp.minimum(jnp.floor(u_i * free.astype(jnp.float32)).astype(jnp.int32), free - 1)
        value = rank + jnp.sum((taken - slots <= rank).astype(jnp.int32))
        where_to = jnp.sum((taken < value).astype(jnp.int32))
        shifted = jnp.concatenate([jnp.full((1,), big, jnp.int32), taken[:-1]])
        taken = jnp.where(slots < where_to, taken, jnp.where(slots == where_to, value, shifted))
        return taken, value

    _, values = jax.lax.scan(draw, jnp.full((k,), big, jnp.int32), (u, slots))
    return values.astype(jnp.int32)


class RobotWarehouse(Environment[RobotWarehouseState, RobotWarehouseParams]):
    """Multi-Robot Warehouse: robots fetch requested shelves, bring them to a goal and put them back.

    The layout, rules, observation, reward and ids are those of ``rware==2.0.0``
    (Papoudakis et al.'s EPyMARL benchmark), checked step by step against it
    (``tests/test_rware.py``). ``n`` = ``n_agents``, ``H x W`` the grid,
    ``S`` the number of shelves, ``R`` the request queue size, ``r`` the sensor
    range, ``L = 8 + 7 (2r + 1)^2`` (71 for ``r = 1``). Coordinates in the
    state are ``(row, column)`` with row 0 at the top: rware's ``(y, x)``.

    Layout (``size`` or ``shelf_rows x shelf_columns`` blocks of 2-wide,
    ``column_height``-tall shelf columns): ``H = (column_height + 1) shelf_rows + 2``,
    ``W = 3 shelf_columns + 1``; tiny 11x10 (32 shelves), small 20x10 (80),
    medium 20x16 (144), large 29x16 (224). Highways are listed in
    :func:`is_highway`; the two goals are the middle cells of the bottom row,
    ``(H - 1, W // 2 - 1)`` and ``(H - 1, W // 2)``. Or ``layout``, rware's
    custom-layout string: one text row per grid row, ``x`` a shelf's home cell,
    ``.`` a highway, ``g`` a goal (a highway cell; ``G`` goals in row-major order,
    at least one); shelf ids row-major over the ``x`` cells, as rware numbers them.

    Agents: ``n`` (leading agent axis on everything below). With one agent
    (the ``-1ag`` ids) the env is single-agent by lamella's convention: no
    agent axis (observation ``(L,)``, a scalar action, reward and flags).

    Action: int32 ``(n,)``, ``MultiDiscrete([5] * n)``: 0 NOOP, 1 FORWARD (one
    cell along the heading; into the grid's edge it stays), 2 LEFT and 3 RIGHT
    (turn in place), 4 TOGGLE_LOAD (pick up the shelf standing on the agent's
    cell, or put the carried shelf down on a non-highway cell). rware has no
    illegal actions and no action mask; an action outside ``0..4`` is NOOP,
    and a toggle with nothing to pick up, or on a highway while carrying,
    does nothing, as in rware. With ``msg_bits = M > 0`` (rware's
    communication) the action is int32 ``(n, 1 + M)``, ``MultiDiscrete`` of
    ``[5, 2, ..., 2]`` per agent: the move, then the agent's ``M`` message bits
    (any non-zero entry counts as 1), kept in ``state.messages`` until its next
    action.

    Movement (``collisions="resolve"``, rware's rule): a carrying agent's
    FORWARD into a cell with a standing shelf is cancelled. Each moving agent
    aims at one cell; agents that aim at each other's cells form chains.
    Within a chain that closes into a cycle, the agents on the cycle move (a
    rotation of 4 or more agents) or all stay (two agents swapping head-on), and
    agents queued behind the cycle stay. Among chains that end in the same
    free cell, the longest moves and every other agent stays. rware breaks
    ties between equally long chains arbitrarily (networkx's iteration order);
    here **the chain whose farthest agent has the lowest index wins**. An agent
    aiming at a standing agent's cell stays. No two agents ever share a cell.
    ``collisions="terminate"`` is Jumanji's variant instead: see
    :meth:`step_with_draws`.

    Delivery: after moving, for each goal in order, a requested shelf carried
    onto it is delivered: its queue slot is refilled with a shelf drawn
    uniformly from those not in the queue (the step's only randomness), and
    the agent on the goal keeps carrying it. A shelf that stays on a goal is
    not delivered again unless it is requested again.

    Observation: float32 ``(n, L)``, rware's default flattened vector, one row
    per agent: ``[x, y, carrying, heading one-hot (UP, DOWN, LEFT, RIGHT),
    on_highway]`` (``x`` the column, ``y`` the row; divided by ``W - 1`` and
    ``H - 1`` with ``normalised_coordinates``), then for each cell of the
    ``(2r + 1) x (2r + 1)`` window around the agent, rows top to bottom and
    columns left to right, the agent's own cell included: ``[has_agent,
    heading one-hot, message (M bits, with msg_bits; zeros without an agent),
    has_shelf, shelf_requested]``; ``L = 8 + (7 + M) (2r + 1)^2``. A cell without an agent,
    and a cell off the grid, has heading ``[1, 0, 0, 0]``, as in rware.

    Reward: float32 ``(n,)``. ``reward_type="individual"`` (every registered
    id): +1 to the agent that delivers. ``"global"``: +1 to every agent per
    delivery (shared). ``"two_stage"``: +0.5 to the agent that delivers, +0.5
    when it later puts that shelf down.

    Terminated: bool ``(n,)``, always False with ``collisions="resolve"``
    (the warehouse has no terminal state); with ``"terminate"``, all True on
    the step two agents collide.

    Truncated: bool ``(n,)``, all True once ``time >= max_steps`` (500) or
    ``inactive_steps >= max_inactivity_steps`` (0: off, as in every registered
    id). rware returns both limits as ``done`` (terminated) with
    ``truncated=False``; lamella reports them as truncation, so
    ``terminated | truncated`` is rware's ``done``, and a learner bootstraps
    from the final observation.

    Info: empty (no action mask: every action is legal).

    Global state (:meth:`global_state`): float32 ``(8 H W,)``, the grid with 8
    channels per cell, row-major over cells: agent present, agent heading
    one-hot (4), agent carrying, shelf present (standing or carried), shelf
    requested.

    State: :class:`~lamella.envs.multi_agent.rware.RobotWarehouseState`.
    Params: :class:`~lamella.envs.multi_agent.rware.RobotWarehouseParams`
    (``max_steps``, ``max_inactivity_steps``).

    Reset (rware's distribution, lamella's random numbers): agents on distinct
    uniform cells of the whole grid (under shelves and on goals included),
    headings uniform, ``R`` distinct requested shelves uniform; every shelf
    stands on its home cell.

    Args:
        size: ``"tiny"``, ``"small"``, ``"medium"`` or ``"large"``; ignored for a
            dimension given by ``shelf_rows`` / ``shelf_columns``.
        n_agents: number of agents, 1 up to the number of cells.
        difficulty: ``"easy"``, ``"normal"`` or ``"hard"``: a request queue of
            ``int(n_agents * {2, 1, 0.5})`` shelves, unless ``request_queue_size``
            is given.
        column_height: height of a shelf column, >= 1 (rware: 8).
        sensor_range: observation window radius, >= 1 (rware: 1).
        request_queue_size: number of requested shelves, ``0 <= R < S`` (with
            ``R = S`` no shelf could replace a delivered one: rware crashes there).
        shelf_rows, shelf_columns: blocks of shelf columns (columns odd).
        reward_type: ``"individual"``, ``"global"`` or ``"two_stage"``.
        normalised_coordinates: divide the own ``x, y`` in the observation by
            ``W - 1, H - 1`` (rware's option).
        collisions: ``"resolve"`` (rware) or ``"terminate"`` (Jumanji).
        max_steps, max_inactivity_steps: defaults of the params.
        msg_bits: rware's message bits per agent, >= 0 (0: no communication, as
            in every registered id); see Action and Observation.
        layout: rware's ``layout`` string (see Layout above), or None for the
            generated layout; with it ``size`` and ``column_height`` are ignored (as in
            rware) and ``shelf_rows`` / ``shelf_columns`` are refused. Spaces and
            surrounding blank lines are dropped and letters may be upper case, as in
            rware; anything else rware rejects (ragged rows, other characters, no
            goal) or fails on later (no shelf) is a ``ValueError`` here.
    """

    sparse_reset = True  # episodes of a fixed length (500 steps): a batch ends together

    def __init__(
        self,
        size: str = "tiny",
        n_agents: int = 2,
        difficulty: str = "normal",
        *,
        column_height: int = 8,
        sensor_range: int = 1,
        request_queue_size: int | None = None,
        shelf_rows: int | None = None,
        shelf_columns: int | None = None,
        reward_type: str = "individual",
        normalised_coordinates: bool = False,
        collisions: str = "resolve",
        max_steps: int = 500,
        max_inactivity_steps: int = 0,
        layout: str | None = None,
        msg_bits: int = 0,
    ):
        owner = "RobotWarehouse"
        self.msg_bits = _int_at_least(owner, msg_bits, "msg_bits", 0)
        size = _choice(owner, size, "size", SIZES)
        difficulty = _choice(owner, difficulty, "difficulty", DIFFICULTIES)
        self.reward_type = _choice(owner, reward_type, "reward_type", REWARD_TYPES)
        self.collisions = _choice(owner, collisions, "collisions", COLLISIONS)
        self.layout: str | None = None
        if layout is not None:
            if shelf_rows is not None or shelf_columns is not None:
                raise ValueError(
                    f"{owner}: a layout string sets the whole grid; drop shelf_rows / shelf_columns "
                    "(size and column_height are ignored, as in rware)."
                )
            grid = parse_layout(layout, owner)
            self.layout = "\n".join("".join(row) for row in grid)
        if layout is None:
            default_rows, default_columns = SIZES[size]
            self.shelf_rows: int | None = _int_at_least(
                owner, default_rows if shelf_rows is None else shelf_rows, "shelf_rows", 1
            )
            self.shelf_columns: int | None = _int_at_least(
                owner, default_columns if shelf_columns is None else shelf_columns, "shelf_columns", 1
            )
            if self.shelf_columns % 2 == 0:
                raise ValueError(
                    f"{owner}: shelf_columns must be odd (the goals sit under the middle column), "
                    f"got {self.shelf_columns}; use {self.shelf_columns + 1}."
                )
            self.column_height: int | None = _int_at_least(owner, column_height, "column_height", 1)
            self.rows = (self.column_height + 1) * self.shelf_rows + 2
            self.cols = 3 * self.shelf_columns + 1
            rows_np, cols_np = np.indices((self.rows, self.cols))
            self.highway = np.asarray(
                is_highway(rows_np, cols_np, self.rows, self.cols, self.column_height), bool
            )
            # (row, column) of each goal, in rware's order.
            self.goals = np.array(
                [[self.rows - 1, self.cols // 2 - 1], [self.rows - 1, self.cols // 2]], np.int32
            )
        else:
            self.shelf_rows = self.shelf_columns = self.column_height = None
            self.rows, self.cols = grid.shape
            self.highway = grid != "x"
            self.goals = np.argwhere(grid == "g").astype(np.int32)  # row-major: rware's order
        self.sensor_range = _int_at_least(owner, sensor_range, "sensor_range", 1)
        self.num_agents = _int_at_least(owner, n_agents, "n_agents", 1)  # type: ignore[misc]
        if self.num_agents > self.rows * self.cols:
            raise ValueError(
                f"{owner}: a {self.rows}x{self.cols} grid cannot hold {self.num_agents} agents; "
                "use a larger size (or more shelf_rows / shelf_columns, or a larger layout) or fewer agents."
            )

        shelf_cells = np.flatnonzero(~self.highway)  # row-major: rware's shelf ids 1..S
        self.num_shelves = len(shelf_cells)
        home = np.zeros(self.rows * self.cols, np.int32)
        home[shelf_cells] = np.arange(1, self.num_shelves + 1)
        self.initial_shelf_grid = home.reshape(self.rows, self.cols)

        if request_queue_size is None:
            request_queue_size = int(self.num_agents * DIFFICULTIES[difficulty])
        self.request_queue_size = _int_at_least(owner, request_queue_size, "request_queue_size", 0)
        if self.request_queue_size >= self.num_shelves:
            raise ValueError(
                f"{owner}: request_queue_size ({self.request_queue_size}) must be below the number of "
                f"shelves ({self.num_shelves}), so that a delivered shelf can be replaced (rware fails at "
                "the first delivery otherwise); use an easier difficulty's neighbour (-normal), fewer "
                "agents or a larger size."
            )
        self.normalised_coordinates = bool_setting(normalised_coordinates, "normalised_coordinates", owner)
        _int_at_least(owner, max_steps, "max_steps", 0)
        _int_at_least(owner, max_inactivity_steps, "max_inactivity_steps", 0)
        self._defaults = (int(max_steps), int(max_inactivity_steps))
        radius = np.arange(-self.sensor_range, self.sensor_range + 1)
        # (row, column) offsets of the sensor window, rows outer (rware's row-major window).
        self._window = (
            np.stack(np.meshgrid(radius, radius, indexing="ij"), -1).reshape(-1, 2).astype(np.int32)
        )
        # Rounds of pointer doubling that follow any chain of agents to its end.
        self._doubling_rounds = max(1, int(np.ceil(np.log2(max(self.num_agents, 2)))))

    # Sizes ---------------------------------------------------------------------------------

    @property
    def default_params(self) -> RobotWarehouseParams:
        return RobotWarehouseParams(*self._defaults)

    @property
    def observation_size(self) -> int:
        return _SELF_FEATURES + (_CELL_FEATURES + self.msg_bits) * len(self._window)

    def _agent_shape(self, *shape: int) -> tuple[int, ...]:
        return shape if self.num_agents == 1 else (self.num_agents, *shape)

    def _per_agent(self, value: jax.Array) -> jax.Array:
        """Drop the agent axis of a single-agent env (lamella's convention for ``num_agents == 1``)."""
        return value[0] if self.num_agents == 1 else value

    def observation_space(self, params: RobotWarehouseParams | None = None) -> spaces.Box:
        high = np.ones(self.observation_size, np.float32)
        if not self.normalised_coordinates:
            high[:2] = [self.cols - 1, self.rows - 1]
        shape = self._agent_shape(self.observation_size)
        return spaces.Box(np.zeros(shape), np.broadcast_to(high, shape), shape)

    def action_space(self, params: RobotWarehouseParams | None = None) -> spaces.Space:
        if self.msg_bits:  # per agent: the move, then one binary entry per message bit
            per_agent = [NUM_ACTIONS] + [2] * self.msg_bits
            return spaces.MultiDiscrete(np.broadcast_to(per_agent, self._agent_shape(len(per_agent))))
        if self.num_agents == 1:
            return spaces.Discrete(NUM_ACTIONS)
        return spaces.MultiDiscrete([NUM_ACTIONS] * self.num_agents)

    def global_state_space(self, params: RobotWarehouseParams | None = None) -> spaces.Box:
        """The space of :meth:`global_state`: float32 ``(8 H W,)`` in ``[0, 1]``."""
        size = 8 * self.rows * self.cols
        return spaces.Box(np.zeros(size), np.ones(size), (size,))

    # Observations --------------------------------------------------------------------------

    def _cells(self, positions: jax.Array) -> jax.Array:
        return positions[..., 0] * self.cols + positions[..., 1]

    def _on_highway(self, positions: jax.Array) -> jax.Array:
        if self.column_height is not None:  # a generated layout: the rule's arithmetic
            return is_highway(positions[..., 0], positions[..., 1], self.rows, self.cols, self.column_height)
        # A layout string: look the cell up (compare-and-sum over the highway cells' flat indices).
        cells = np.flatnonzero(self.highway)
        return jnp.any(self._cells(positions)[..., None] == cells, -1)

    def _observe(self, state: RobotWarehouseState) -> jax.Array:
        """Every agent's observation, float32 ``(n, L)`` (the agent axis always present)."""
        n = self.num_agents
        position = state.agent_positions
        window = position[:, None, :] + self._window[None]  # (n, cells, 2)
        inside = (window >= 0) & (window < np.array([self.rows, self.cols]))
        inside = inside[..., 0] & inside[..., 1]
        # Agents in the window: which agent stands on each window cell.
        here = jnp.all(window[:, :, None, :] == position[None, None, :, :], -1)  # (n, cells, n)
        has_agent = jnp.any(here, -1)
        heading = state.agent_directions[:, None] == np.arange(4)  # (n, 4)
        seen_heading = jnp.any(here[..., None] & heading[None, None], 2)
        seen_heading = jnp.where(has_agent[..., None], seen_heading, np.array([True, False, False, False]))
        carried_here = jnp.sum(jnp.where(here, state.carried_shelves[None, None, :], 0), -1)
        heard: list[jax.Array] = []
        if state.messages is not None:  # msg_bits > 0: the message of the agent on each window cell
            heard = [jnp.sum(jnp.where(here[..., None], state.messages[None, None], 0), 2)]
        # Shelves: the one carried by the agent on the cell, else the one standing there.
        flat = jnp.clip(window[..., 0], 0, self.rows - 1) * self.cols + jnp.clip(
            window[..., 1], 0, self.cols - 1
        )
        standing = jnp.where(inside, state.shelf_grid.reshape(-1)[flat], 0)
        shelf = jnp.where(carried_here > 0, carried_here, standing)
        requested = jnp.any(shelf[..., None] == state.request_queue, -1) & (shelf > 0)
        sensors = jnp.concatenate(
            [has_agent[..., None], seen_heading, *heard, (shelf > 0)[..., None], requested[..., None]], -1
        ).astype(jnp.float32)
        xy = position[:, ::-1].astype(jnp.float32)
        if self.normalised_coordinates:
            xy = xy / np.array([self.cols - 1, self.rows - 1], np.float32)
        own = jnp.concatenate(
            [
                xy,
                (state.carried_shelves > 0)[:, None].astype(jnp.float32),
                heading.astype(jnp.float32),
                self._on_highway(position)[:, None].astype(jnp.float32),
            ],
            -1,
        )
        return jnp.concatenate([own, sensors.reshape(n, -1)], -1)

    def observation_of(
        self, state: RobotWarehouseState, params: RobotWarehouseParams | None = None
    ) -> jax.Array:
        """The observation of ``state``, float32 ``(n, L)`` (``(L,)`` with one agent); see the class docs."""
        check_one_state(self, state, "observation_of")
        return self._per_agent(self._observe(state))

    def global_state(
        self, state: RobotWarehouseState, params: RobotWarehouseParams | None = None
    ) -> jax.Array:
        """The whole grid for a centralised critic, float32 ``(8 H W,)`` (see the class docs)."""
        check_one_state(self, state, "global_state")
        cells = np.arange(self.rows * self.cols)
        at = self._cells(state.agent_positions)[None, :] == cells[:, None]  # (cells, n)
        heading = state.agent_directions[:, None] == np.arange(4)
        agent_heading = jnp.any(at[..., None] & heading[None], 1)
        carrying = jnp.any(at & (state.carried_shelves > 0)[None, :], 1)
        carried = jnp.sum(jnp.where(at, state.carried_shelves[None, :], 0), 1)
        shelf = jnp.where(carried > 0, carried, state.shelf_grid.reshape(-1))
        requested = jnp.any(shelf[:, None] == state.request_queue[None, :], 1) & (shelf > 0)
        channels = [
            jnp.any(at, 1)[:, None],
            agent_heading,
            carrying[:, None],
            (shelf > 0)[:, None],
            requested[:, None],
        ]
        return jnp.concatenate(channels, -1).astype(jnp.float32).reshape(-1)

    # Reset and step ------------------------------------------------------------------------

    def reset_env(
        self, key: jax.Array, params: RobotWarehouseParams
    ) -> tuple[jax.Array, RobotWarehouseState]:
        # One compiled program even when called eagerly (op by op, the draws take seconds);
        # inside an outer jit or vmap the inner jit is inlined.
        return self._reset_compiled(key, params)

    @functools.partial(jax.jit, static_argnums=0)
    def _reset_compiled(
        self, key: jax.Array, params: RobotWarehouseParams
    ) -> tuple[jax.Array, RobotWarehouseState]:
        n, queue_size = self.num_agents, self.request_queue_size
        count = 2 * n + queue_size
        u = fast_random.uniform(key, (count,), vector=True)
        cells = _distinct_uniform(u[:n], self.rows * self.cols)
        directions = jnp.minimum(jnp.floor(u[n : 2 * n] * 4).astype(jnp.int32), 3)
        queue = _distinct_uniform(u[2 * n :], self.num_shelves) + 1
        state = RobotWarehouseState(
            agent_positions=jnp.stack([cells // self.cols, cells % self.cols], -1).astype(jnp.int32),
            agent_directions=directions,
            carried_shelves=jnp.zeros((n,), jnp.int32),
            has_delivered=jnp.zeros((n,), jnp.bool_),
            shelf_grid=jnp.asarray(self.initial_shelf_grid),
            request_queue=queue.astype(jnp.int32),
            inactive_steps=jnp.zeros((), jnp.int32),
            time=jnp.zeros((), jnp.int32),
            messages=jnp.zeros((n, self.msg_bits), jnp.int32) if self.msg_bits else None,
        )
        return self.observation_of(state, params), state

    def step_env(
        self, key: jax.Array, state: RobotWarehouseState, action: Any, params: RobotWarehouseParams
    ) -> StepOutput:
        draws = fast_random.uniform(key, (len(self.goals),))
        return self.step_with_draws(state, action, params, draws)

    def _resolve(self, cell: jax.Array, target: jax.Array) -> jax.Array:
        """Which agents may carry out their move, bool ``(n,)`` (rware's conflict resolution).

        Agent ``i`` points at the agent standing on its target cell (itself when it stays), or
        at a sink when the target is free. Pointer doubling follows every chain to its end: a
        free cell (the chain is a path) or a cycle. On a path, only the longest chain into the
        free cell moves (ties: the chain whose farthest agent has the lowest index); on a cycle,
        only the cycle's agents move, unless it is a head-on swap of two.
        """
        n = self.num_agents
        agents = np.arange(n)
        occupant = target[:, None] == cell[None, :]  # (n, n): i's target is j's cell
        pointer = jnp.where(jnp.any(occupant, 1), jnp.argmax(occupant, 1), n).astype(jnp.int32)
        sink = jnp.full((1,), n, jnp.int32)
        jump = jnp.concatenate([pointer, sink])  # jump[i] = node 2^k steps ahead
        length = jnp.concatenate([jnp.ones((n,), jnp.int32), jnp.zeros((1,), jnp.int32)])  # agents within 2^k
        end_cell = jnp.concatenate([target, jnp.full((1,), -1, target.dtype)])  # last agent's target so far
        jumps = []
        for _ in range(self._doubling_rounds):
            jumps.append(jump)
            end_cell = jnp.where(jump == n, end_cell, _take(end_cell, jump))
            length = length + _take(length, jump)
            jump = _take(jump, jump)
        reaches_free_cell = jump[:n] == n
        on_cycle = jnp.any(jump[:n][None, :] == agents[:, None], 1)
        second = _take(jumps[0], jumps[0])[:n]
        swap = (second == agents) & (pointer != agents)

        # Paths: the longest chain into each free cell wins.
        depth, free_cell = length[:n], end_cell[:n]
        score = depth * (n + 1) + (n - 1 - agents)  # longer first, then lower index
        same_cell = (free_cell[:, None] == free_cell[None, :]) & reaches_free_cell[None, :]
        leader = jnp.argmax(jnp.where(same_cell, score[None, :], -1), 1)  # the winning farthest agent
        steps = _take(depth, leader) - depth
        walker = leader
        for k, table in enumerate(jumps):  # walk `steps` links from the leader
            walker = jnp.where((steps >> k) & 1 == 1, _take(table, walker), walker)
        on_winning_path = walker == agents
        return jnp.where(reaches_free_cell, on_winning_path, on_cycle & ~swap)

    def step_with_draws(
        self, state: RobotWarehouseState, action: Any, params: RobotWarehouseParams, draws: jax.Array
    ) -> StepOutput:
        """:meth:`step` with its random numbers given: ``draws``, float32 ``(G,)`` in ``[0, 1)``, one per
        goal (``G = 2`` on the generated layouts).

        ``draws[g]`` picks the shelf that replaces a delivery on goal ``g``: the
        ``floor(draws[g] * (S - R))``-th (from 0, by id) of the shelves not in the
        queue. ``step`` draws them uniformly from its key; the parity test
        passes the ones that reproduce rware's draws.

        With ``collisions="terminate"`` (Jumanji's ``RobotWarehouse`` rule) no
        conflict is resolved: agents move in index order, each into its target
        cell whoever stands there, and the episode terminates when afterwards an
        agent's cell no longer shows it (two agents ended on one cell, or an
        agent moved away from under one that followed it into its cell). As
        Jumanji's action mask does, a carrying agent's FORWARD into any shelf,
        standing or carried by an agent there, is cancelled.
        """
        n, cols = self.num_agents, self.cols
        messages = None
        if self.msg_bits:  # (n, 1 + M): the move, then the message bits (any non-zero entry is 1)
            action = jnp.asarray(action).reshape(n, 1 + self.msg_bits).astype(jnp.int32)
            action, messages = action[:, 0], (action[:, 1:] != 0).astype(jnp.int32)
        action = jnp.asarray(action).reshape(n).astype(jnp.int32)
        action = jnp.where((action >= 0) & (action < NUM_ACTIONS), action, NOOP)
        position, heading, carried = state.agent_positions, state.agent_directions, state.carried_shelves
        grid = state.shelf_grid.reshape(-1)
        cell = self._cells(position)

        # Movement.
        ahead = jnp.clip(
            position + _lookup(_DIRECTION_DELTAS, heading), 0, np.array([self.rows - 1, cols - 1])
        )
        target = jnp.where(action == FORWARD, self._cells(ahead), cell)
        moving = target != cell
        # A carried shelf cannot pass a standing one (Jumanji's mask: nor another carried one).
        blocked = grid[target] > 0
        if self.collisions == "terminate":
            blocked |= jnp.any((target[:, None] == cell[None, :]) & (carried > 0)[None, :], 1)
        moving &= ~((carried > 0) & blocked)
        target = jnp.where(moving, target, cell)
        if self.collisions == "resolve":
            moves = moving & self._resolve(cell, target)
            collided = jnp.zeros((), jnp.bool_)
        else:
            moves = moving
            collided = self._sequential_collision(cell, target)
        new_cell = jnp.where(moves, target, cell)

        # Turns.
        heading = jnp.where(
            action == TURN_LEFT,
            _lookup(_AFTER_LEFT_TURN, heading),
            jnp.where(action == TURN_RIGHT, _lookup(_AFTER_RIGHT_TURN, heading), heading),
        )

        # Loading: the toggling agent stands still, so its cell is its old one.
        toggle = action == TOGGLE_LOAD
        standing_here = grid[cell]
        carrying = carried > 0
        pick = toggle & ~carrying & (standing_here > 0)
        drop = toggle & carrying & ~self._on_highway(position)
        reward = jnp.zeros((n,), jnp.float32)
        if self.reward_type == "two_stage":
            reward = reward + jnp.where(drop & state.has_delivered, 0.5, 0.0)
        has_delivered = state.has_delivered & ~drop
        # Agents stand on distinct cells unless the "terminate" rule let two collide.
        grid = grid.at[cell].set(
            jnp.where(pick, 0, jnp.where(drop, carried, standing_here)),
            unique_indices=self.collisions == "resolve",
        )
        carried = jnp.where(pick, standing_here, jnp.where(drop, 0, carried))

        # Deliveries, goal by goal: a requested shelf on a goal is replaced in its queue slot.
        queue = state.request_queue
        delivered_any = jnp.zeros((), jnp.bool_)
        if self.request_queue_size > 0:
            slots = np.arange(self.request_queue_size)
            for g, goal in enumerate(self.goals):
                on_goal = new_cell == goal[0] * cols + goal[1]
                shelf = jnp.sum(jnp.where(on_goal, carried, 0))
                in_queue = queue == shelf
                delivered = jnp.any(in_queue) & (shelf > 0)
                replacement = self._draw_request(queue, draws[g])
                queue = jnp.where(delivered & (slots == jnp.argmax(in_queue)), replacement, queue)
                if self.reward_type == "global":
                    reward = reward + jnp.where(delivered, 1.0, 0.0)
                else:
                    gain = 1.0 if self.reward_type == "individual" else 0.5
                    reward = reward + jnp.where(delivered & on_goal, gain, 0.0)
                    if self.reward_type == "two_stage":
                        has_delivered = has_delivered | (delivered & on_goal)
                delivered_any = delivered_any | delivered

        time = state.time + 1
        inactive = jnp.where(delivered_any, 0, state.inactive_steps + 1)
        state = RobotWarehouseState(
            agent_positions=jnp.stack([new_cell // cols, new_cell % cols], -1).astype(jnp.int32),
            agent_directions=heading,
            carried_shelves=carried,
            has_delivered=has_delivered,
            shelf_grid=grid.reshape(self.rows, cols),
            request_queue=queue,
            inactive_steps=inactive.astype(jnp.int32),
            time=time,
            messages=messages,
        )
        # Computed once, not once per reader (observation, flags, auto-reset selects).
        state, reward = jax.lax.optimization_barrier((state, reward))
        max_steps, max_inactive = params.max_steps, params.max_inactivity_steps
        out_of_time = ((max_steps > 0) & (time >= max_steps)) | (
            (max_inactive > 0) & (inactive >= max_inactive)
        )
        terminated = jnp.broadcast_to(collided, self._agent_shape())
        truncated = jnp.broadcast_to(out_of_time, self._agent_shape())
        return self.observation_of(state, params), state, self._per_agent(reward), terminated, truncated, {}

    def _draw_request(self, queue: jax.Array, draw: jax.Array) -> jax.Array:
        """The shelf id ``floor(draw * (S - R))``-th (from 0) among those not in ``queue``."""
        free = self.num_shelves - self.request_queue_size
        rank = jnp.minimum(jnp.floor(draw * free).astype(jnp.int32), free - 1)
        taken = queue - 1
        order = jnp.sum((taken[None, :] < taken[:, None]).astype(jnp.int32), 1)
        return rank + jnp.sum((taken - order <= rank).astype(jnp.int32)) + 1

    def _sequential_collision(self, cell: jax.Array, target: jax.Array) -> jax.Array:
        """Jumanji's collision test after moving agents one by one in index order (see
        :meth:`step_with_draws`): some agent's cell ends up without it."""
        agents = np.arange(self.num_agents)
        moving = target != cell
        # Agent i is shown on its final cell unless another agent j entered that cell after i wrote
        # it (j processed later, or i never moved), or a later agent left it (clearing it).
        later = agents[None, :] > agents[:, None]  # (i, j): j is processed after i
        other = agents[None, :] != agents[:, None]
        entered = other & moving[None, :] & (target[None, :] == target[:, None]) & (later | ~moving[:, None])
        left = later & moving[None, :] & (cell[None, :] == target[:, None])
        return jnp.any(entered | left)

    def render(self, state: RobotWarehouseState, params: RobotWarehouseParams | None = None) -> jax.Array:
        """The warehouse, uint8 ``(32 H, 32 W, 3)``: see :func:`~lamella.envs.multi_agent.rware.render.render`."""
        check_one_state(self, state, "render")
        return rware_render.render(self, state)

    def __repr__(self) -> str:
        messages = f", msg_bits={self.msg_bits}" if self.msg_bits else ""
        if self.layout is not None:
            return (
                f"RobotWarehouse(layout={self.layout!r}, n_agents={self.num_agents}, "
                f"request_queue_size={self.request_queue_size}, sensor_range={self.sensor_range}, "
                f"reward_type={self.reward_type!r}, collisions={self.collisions!r}{messages})"
            )
        return (
            f"RobotWarehouse(shelf_rows={self.shelf_rows}, shelf_columns={self.shelf_columns}, "
            f"column_height={self.column_height}, n_agents={self.num_agents}, "
            f"request_queue_size={self.request_queue_size}, sensor_range={self.sensor_range}, "
            f"reward_type={self.reward_type!r}, collisions={self.collisions!r}{messages})"
        )
