"""Level generators, mutators, comparators and the text format of the AMaze family."""

from __future__ import annotations

import textwrap
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import _inputs
from lamella.envs import random as fast_random
from lamella.envs._fusion import computed_once
from lamella.envs.maze.types import AMazeParams, MazeError, MazeLevel

__all__ = [
    "AGENT_CHARS",
    "check_level_fits",
    "check_params",
    "format_maze",
    "levels_equal",
    "mutate_level",
    "parse_maze",
    "sample_dr_level",
]

# Text format: one character per cell, rows top to bottom.
WALL_CHAR, FREE_CHAR, GOAL_CHAR = "#", ".", "G"
AGENT_CHARS = ">v<^"  # the start direction: 0 right, 1 down, 2 left, 3 up

FLIP_WALL, MOVE_GOAL, MOVE_AGENT = range(3)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_params(params: AMazeParams) -> None:
    """Raise :class:`MazeError` naming the fix if the static settings of ``params`` cannot work."""
    if not isinstance(params, AMazeParams):
        raise MazeError(
            f"expected AMazeParams, got {type(params).__name__}; build them with AMazeParams(...)."
        )
    for name in ("height", "width"):
        value = getattr(params, name)
        if not _is_int(value) or value < 1:
            raise MazeError(f"AMazeParams.{name} must be an int >= 1, got {value!r}.")
    view = params.agent_view_size
    if not _is_int(view) or view < 3 or view % 2 == 0:
        raise MazeError(
            f"AMazeParams.agent_view_size must be an odd int >= 3 (MiniGrid's rule), got {view!r}."
        )
    cells = params.height * params.width
    if cells < 2:
        raise MazeError(
            f"a {params.height}x{params.width} maze has no room for an agent and a goal; use at least 2 cells."
        )
    if not _is_int(params.n_walls) or not 0 <= params.n_walls <= cells - 2:
        raise MazeError(
            f"AMazeParams.n_walls must be an int in [0, {cells - 2}] for a {params.height}x{params.width} "
            f"maze (two cells stay free for the agent and the goal), got {params.n_walls!r}."
        )
    steps = params.max_episode_steps
    if _is_int(steps) and steps < 1:
        raise MazeError(f"AMazeParams.max_episode_steps must be >= 1, got {steps!r}.")
    if params.memory and (params.height, params.width) != (15, 15):
        raise MazeError(
            "AMazeParams.memory=True is minimax's Memory maze, whose clue and goal cells are fixed "
            f"on a 15x15 grid, got {params.height}x{params.width}; use height=width=15 "
            "(named_maze_sampler('Memory') gives its level and params)."
        )


def check_level_fits(level: MazeLevel, params: AMazeParams, what: str = "level") -> None:
    """Raise :class:`MazeError` if ``level``'s shapes do not fit ``params`` (checked while tracing)."""
    if not isinstance(level, MazeLevel):
        raise MazeError(f"{what} must be a MazeLevel, got {type(level).__name__}.")
    shape = tuple(jnp.shape(level.wall_map))
    expected = (params.height, params.width)
    if shape != expected:
        raise MazeError(
            f"{what} has a wall_map of shape {shape} (H, W) but the params are for a "
            f"{params.height}x{params.width} maze; use params of the level's size, e.g. "
            f"AMazeParams(height={shape[0] if len(shape) == 2 else '?'}, "
            f"width={shape[1] if len(shape) == 2 else '?'}) or the params named_maze() returns."
        )
    for name, want in (("goal_pos", (2,)), ("agent_pos", (2,)), ("agent_dir", ())):
        got = tuple(jnp.shape(getattr(level, name)))
        if got != want:
            raise MazeError(f"{what}.{name} must have shape {want}, got {got} (batch levels with jax.vmap).")


def _cell(index: jax.Array, width: int) -> jax.Array:
    """``(x, y)`` int32 of a flat ``y * width + x`` index."""
    return jnp.stack([index % width, index // width]).astype(jnp.int32)


def choose_cell(u: jax.Array, allowed: jax.Array) -> jax.Array:
    """The flat index of a uniform True cell of ``allowed`` (flat bool), from a uniform ``u`` in [0, 1).

    Exact: the ``floor(u * count)``-th allowed cell. Returns 0 if no cell is allowed.
    """
    counts = jnp.cumsum(allowed.astype(jnp.int32))
    target = jnp.floor(u * counts[-1]).astype(jnp.int32)
    return jnp.argmax(counts > target).astype(jnp.int32)


# Placement by rejection: the first free cell among K uniform candidates is uniform over the free
# cells. K is the fewest candidates that all miss with probability below this bound at the
# densest wall budget; above CANDIDATE_LIMIT candidates the exact pass over the grid is cheaper.
MISS_PROBABILITY = 1e-9
CANDIDATE_LIMIT = 48


def placement_candidates(occupied: int, cells: int) -> int:
    """Candidates per placement so that all hit one of ``occupied`` cells with probability < 1e-9 (0: exact)."""
    density = occupied / cells
    if density <= 0:
        return 1
    if density >= 1:
        return 0
    k = int(np.ceil(np.log(MISS_PROBABILITY) / np.log(density)))
    return k if k <= CANDIDATE_LIMIT else 0


def _place(u_words: jax.Array, allowed: jax.Array, candidates: int, u_exact: jax.Array) -> jax.Array:
    """A uniform allowed cell (flat index) of ``allowed`` (flat bool).

    With ``candidates > 0``: the first allowed one of the uniform candidate cells drawn from
    ``u_words`` (uniform given that one is allowed; if none is, which the caller made rarer than
    1e-9, the first allowed cell of the grid). With 0: exact, from the uniform ``u_exact``.
    """
    cells = allowed.shape[0]
    if candidates == 0:
        return choose_cell(u_exact, allowed)
    cand = ((u_words >> 8).astype(jnp.float32) * (cells / 16777216.0)).astype(jnp.int32)
    cand = jnp.minimum(cand, cells - 1)
    ok = allowed[cand]
    first = cand[jnp.argmax(ok)]
    return jnp.where(jnp.any(ok), first, jnp.argmax(allowed)).astype(jnp.int32)


def sample_dr_level(key: jax.Array, params: AMazeParams) -> MazeLevel:
    """A random (domain-randomised) level: minimax's AMaze distribution.

    Walls: ``n_walls`` cells drawn uniformly, distinct (``replace_wall_pos=False``) or with
    replacement (``True``: duplicates collapse). With ``sample_n_walls`` only the first ``k``
    draws are kept, ``k`` uniform in ``0 .. n_walls``. Then the agent on a uniform free cell with
    a uniform direction, then the goal on a uniform free cell other than the agent's. Solvability
    is not enforced (as in minimax). Jittable and vmappable over keys.

    Placement is by rejection (the first free cell among ``K`` uniform candidates, ``K`` fixed
    from the wall budget so that all candidates hit walls with probability below 1e-9; then the
    first free cell in row-major order), or exact over the whole grid when the budget is so dense
    that more than 48 candidates would be needed.
    """
    check_params(params)
    return _sample_dr_level(key, params)


@jax.jit
def _sample_dr_level(key: jax.Array, params: AMazeParams) -> MazeLevel:
    # Jitted (the static settings are part of the params' tree structure), so an eager call is
    # one compiled program instead of dozens of op-by-op compilations.
    return _sample(key, params, packed=True)


@jax.jit
def _sample_dr_level_scatter(key: jax.Array, params: AMazeParams) -> MazeLevel:
    """The same levels as :func:`_sample_dr_level`, by a scatter and gathers (the sampler before
    the packed bits; tests/test_maze.py checks that both give the same levels)."""
    return _sample(key, params, packed=False)


def _sample(key: jax.Array, params: AMazeParams, packed: bool) -> MazeLevel:
    height, width, n = params.height, params.width, params.n_walls
    cells = height * width
    if params.replace_wall_pos:
        draws = jnp.minimum(
            jnp.floor(fast_random.uniform(key, (max(n, 1),), stream=1, vector=True) * cells).astype(
                jnp.int32
            ),
            cells - 1,
        )
    else:
        # n distinct cells: the n smallest of one uniform word per cell (a random permutation).
        words = fast_random.bits(key, (cells,), stream=1, vector=True)
        draws = jnp.argsort(words)[: max(n, 1)].astype(jnp.int32)
    count = fast_random.randint(key, (), 0, n + 1, stream=2) if params.sample_n_walls else None
    k_agent = placement_candidates(n, cells)
    k_goal = placement_candidates(n + 1, cells)
    u = fast_random.uniform(key, (3,), stream=3)
    words = fast_random.bits(key, (max(k_agent, 1) + max(k_goal, 1),), stream=4, vector=True)
    if packed and _packs(n, cells) and k_agent > 0 and k_goal > 0:
        walls, agent, goal = _walls_and_placements_packed(draws, count, words, n, cells, k_agent, k_goal)
    else:
        keep = jnp.arange(max(n, 1)) < n
        if count is not None:
            keep = keep & (jnp.arange(max(n, 1)) < count)
        draws = jnp.where(keep, draws, cells)  # index `cells` is dropped by the scatter
        walls = jnp.zeros((cells,), jnp.bool_).at[draws].set(True, mode="drop")
        agent = _place(words[: max(k_agent, 1)], ~walls, k_agent, u[0])
        goal = _place(words[max(k_agent, 1) :], (~walls).at[agent].set(False), k_goal, u[1])
    direction = jnp.minimum(jnp.floor(u[2] * 4).astype(jnp.int32), 3)
    return MazeLevel(
        wall_map=walls.reshape(height, width),
        goal_pos=_cell(goal, width),
        agent_pos=_cell(agent, width),
        agent_dir=direction,
    )


# The DR sampler keeps the wall set as bits of a few uint32 words (bit ``c % 32`` of word
# ``c // 32`` for cell ``c``): an OR-reduction of an ``(n_walls, words)`` array builds it, and a
# few selects per placement candidate read it. Under ``vmap`` on CPU these are a handful of wide
# elementwise kernels, where the scatter of the draws and the gathers of the candidates are
# serial loops over the batch (2.8x faster at 13x13 with 60 walls, the same levels bit for bit).
# Past this many draw-word pairs the scatter is cheaper.
PACKED_LIMIT = 8192


def _packs(n_walls: int, cells: int) -> bool:
    return 1 <= n_walls and n_walls * ((cells + 31) // 32) <= PACKED_LIMIT


def _bit_words(cells: jax.Array, on: jax.Array | None, n_words: int) -> jax.Array:
    """uint32 ``(n_words,)``: the set of flat ``cells`` (int32 ``(n,)``, those with ``on``) as bits."""
    bit = jnp.left_shift(np.uint32(1), (cells & 31).astype(jnp.uint32))
    if on is not None:
        bit = jnp.where(on, bit, np.uint32(0))
    # In chunks of 32 draws: XLA on CPU splits a longer reduction into a windowed one that first
    # writes the whole (draws, words) array to memory; a short one it computes in one fusion.
    words = jnp.zeros((n_words,), jnp.uint32)
    for start in range(0, cells.shape[0], 32):
        part, part_bit = cells[start : start + 32], bit[start : start + 32]
        spread = jnp.where(
            (part[None, :] >> 5) == np.arange(n_words)[:, None], part_bit[None, :], np.uint32(0)
        )
        words = words | jax.lax.reduce(spread, np.uint32(0), jax.lax.bitwise_or, (1,))
    return words


def _first_clear_bit(occupied: jax.Array, cells: int) -> jax.Array:
    """The lowest clear bit below ``cells`` of the words ``occupied`` (the row-major first free
    cell; 0 if none)."""
    first = jnp.zeros((), jnp.int32)
    for j in reversed(range(occupied.shape[0])):
        free = ~occupied[j] & np.uint32((1 << min(32, cells - 32 * j)) - 1)
        lowest = free & (~free + np.uint32(1))
        position = jax.lax.population_count(lowest - np.uint32(1)).astype(jnp.int32)
        first = jnp.where(free != 0, 32 * j + position, first)
    return first


def _place_packed(candidate_words: jax.Array, occupied: jax.Array, cells: int) -> jax.Array:
    """:func:`_place` on packed occupied cells: the first free candidate, else the first free cell."""
    cand = ((candidate_words >> 8).astype(jnp.float32) * (cells / 16777216.0)).astype(jnp.int32)
    cand = jnp.minimum(cand, cells - 1)
    word = jnp.zeros_like(candidate_words)
    for j in range(occupied.shape[0]):
        word = jnp.where((cand >> 5) == j, occupied[j], word)
    free = ((word >> (cand & 31).astype(jnp.uint32)) & 1) == 0
    # The first free candidate as one min-reduction: candidate i encodes as i * cells + cell.
    k = candidate_words.shape[0]
    code = jnp.min(jnp.where(free, np.arange(k) * cells + cand, k * cells))
    place = jnp.where(code < k * cells, code % cells, _first_clear_bit(occupied, cells))
    # One fusion computes it; without this XLA copies it into every reader (every wall cell).
    (place,) = computed_once(place)
    return place


def _walls_and_placements_packed(
    draws: jax.Array,
    count: jax.Array | None,
    words: jax.Array,
    n: int,
    cells: int,
    k_agent: int,
    k_goal: int,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Walls (flat bool), agent and goal cells of :func:`_sample_dr_level` with rejection
    placement (``k_agent``, ``k_goal`` > 0), on packed bits."""
    n_words = (cells + 31) // 32
    on = None if count is None else jnp.arange(n) < count
    occupied = _bit_words(draws[:n], on, n_words)
    (occupied,) = computed_once(occupied)
    walls = ((occupied[:, None] >> np.arange(32, dtype=np.uint32)[None, :]) & 1).reshape(-1)[:cells] != 0
    (walls,) = computed_once(walls)  # read by the level, its padded map and the selects around it
    agent = _place_packed(words[:k_agent], occupied, cells)
    goal = _place_packed(words[k_agent:], occupied | _bit_words(agent[None], None, n_words), cells)
    return walls, agent, goal


def levels_equal(a: MazeLevel, b: MazeLevel) -> jax.Array:
    """Whether two levels are the same: walls, goal, agent start and start direction.

    Broadcasts over leading batch axes (a batch against one level gives one bool per level).
    Unlike minimax's comparator the start direction counts: a level that starts facing
    another way is another level.
    """
    return (
        jnp.all(a.wall_map == b.wall_map, axis=(-2, -1))
        & jnp.all(a.goal_pos == b.goal_pos, axis=-1)
        & jnp.all(a.agent_pos == b.agent_pos, axis=-1)
        & (a.agent_dir == b.agent_dir)
    )


def _one_edit(key: jax.Array, level: MazeLevel, index: jax.Array, width: int) -> MazeLevel:
    walls = level.wall_map.reshape(-1)
    cells = walls.shape[0]
    goal = level.goal_pos[1] * width + level.goal_pos[0]
    agent = level.agent_pos[1] * width + level.agent_pos[0]
    u = fast_random.uniform(jax.random.fold_in(key, index), (2,))
    kind = jnp.minimum(jnp.floor(u[0] * 3).astype(jnp.int32), 2)
    occupied = (jnp.arange(cells) == goal) | (jnp.arange(cells) == agent)
    # Flip a wall: any cell but the goal's and the agent's.
    flip = choose_cell(u[1], ~occupied)
    flipped = walls.at[flip].set(~walls[flip])
    # Move the goal or the agent: a free cell that is neither's.
    target = choose_cell(u[1], ~walls & ~occupied)
    has_target = jnp.any(~walls & ~occupied)
    new_walls = jnp.where(kind == FLIP_WALL, flipped, walls)
    new_goal = jnp.where((kind == MOVE_GOAL) & has_target, target, goal)
    new_agent = jnp.where((kind == MOVE_AGENT) & has_target, target, agent)
    can_flip = jnp.any(~occupied)
    new_walls = jnp.where(can_flip, new_walls, walls)
    return MazeLevel(
        wall_map=new_walls.reshape(level.wall_map.shape),
        goal_pos=_cell(new_goal, width),
        agent_pos=_cell(new_agent, width),
        agent_dir=level.agent_dir,
    )


def mutate_level(key: jax.Array, level: MazeLevel, params: AMazeParams, num_edits: int = 1) -> MazeLevel:
    """``level`` after ``num_edits`` random edits (ACCEL's mutator), each one of, uniformly:

    * flip a wall: toggle a uniform cell other than the goal's and the agent's;
    * move the goal to a uniform free cell other than the agent's and its own;
    * move the agent (keeping its direction) to a uniform free cell other than the goal's and
      its own.

    An edit with no cell to act on leaves the level as it is. The goal and the agent never
    land on a wall or on each other, so a mutated level is always a valid level.
    ``num_edits`` may be traced (one ``fori_loop``); vmap over keys and levels for a batch.

    Raises:
        MazeError: ``level`` does not fit ``params`` (another env's level or size), or
            ``num_edits`` is not a whole number >= 0 (a float, a bool, a negative count).
    """
    check_params(params)
    check_level_fits(level, params)
    level = MazeLevel(
        wall_map=jnp.asarray(level.wall_map, jnp.bool_),
        goal_pos=jnp.asarray(level.goal_pos, jnp.int32),
        agent_pos=jnp.asarray(level.agent_pos, jnp.int32),
        agent_dir=jnp.asarray(level.agent_dir, jnp.int32),
    )
    try:
        num_edits = _inputs.count_argument(num_edits, "num_edits", "mutate_level")
    except ValueError as error:
        raise MazeError(str(error)) from None
    return _mutate(key, level, params, num_edits)


@jax.jit
def _mutate(key: jax.Array, level: MazeLevel, params: AMazeParams, num_edits: Any) -> MazeLevel:
    return jax.lax.fori_loop(0, num_edits, lambda i, lv: _one_edit(key, lv, i, params.width), level)


def parse_maze(text: str) -> MazeLevel:
    """A level from text: one character per cell, rows top to bottom.

    ``#`` wall, ``.`` free, ``G`` the goal, ``>`` ``v`` ``<`` ``^`` the agent facing right,
    down, left, up. Exactly one goal and one agent. Leading and trailing blank lines and the
    common indentation are ignored, so a triple-quoted string works as written. The border
    wall is implicit (do not draw it). :func:`format_maze` is the inverse.

    Raises:
        MazeError: ragged rows, an unknown character, no goal, two goals, no agent, or two
            agents, naming the row and column.
    """
    if not isinstance(text, str):
        raise MazeError(f"parse_maze takes a string, got {type(text).__name__}.")
    rows = [line.rstrip() for line in textwrap.dedent(text).strip("\n").splitlines()]
    while rows and not rows[-1]:
        rows.pop()
    if not rows or not rows[0]:
        raise MazeError(
            "parse_maze: the maze string is empty; give one line of '#', '.', 'G', '>v<^' per row."
        )
    width = len(rows[0])
    walls = np.zeros((len(rows), width), bool)
    goals: list[tuple[int, int]] = []
    agents: list[tuple[int, int, int]] = []
    for y, row in enumerate(rows):
        if len(row) != width:
            raise MazeError(
                f"parse_maze: row {y} has {len(row)} cells but row 0 has {width}; every row must "
                f"have the same length (rows are {[len(r) for r in rows]})."
            )
        for x, char in enumerate(row):
            if char == WALL_CHAR:
                walls[y, x] = True
            elif char == GOAL_CHAR:
                goals.append((x, y))
            elif char in AGENT_CHARS:
                agents.append((x, y, AGENT_CHARS.index(char)))
            elif char != FREE_CHAR:
                raise MazeError(
                    f"parse_maze: unknown character {char!r} at row {y}, column {x}; use '#' wall, "
                    f"'.' free, 'G' goal, '>' 'v' '<' '^' agent."
                )
    if len(goals) != 1:
        where = "" if not goals else f" (at {', '.join(f'x={x}, y={y}' for x, y in goals)})"
        raise MazeError(f"parse_maze: a maze needs exactly one goal 'G', found {len(goals)}{where}.")
    if len(agents) != 1:
        where = "" if not agents else f" (at {', '.join(f'x={x}, y={y}' for x, y, _ in agents)})"
        raise MazeError(
            f"parse_maze: a maze needs exactly one agent ('>', 'v', '<' or '^' for its direction), "
            f"found {len(agents)}{where}."
        )
    (gx, gy), (ax, ay, direction) = goals[0], agents[0]
    return MazeLevel(
        wall_map=jnp.asarray(walls),
        goal_pos=jnp.asarray([gx, gy], jnp.int32),
        agent_pos=jnp.asarray([ax, ay], jnp.int32),
        agent_dir=jnp.asarray(direction, jnp.int32),
    )


def format_maze(level: MazeLevel) -> str:
    """The text of one level (the format of :func:`parse_maze`), rows joined by newlines."""
    walls = np.asarray(level.wall_map, bool)
    if walls.ndim != 2:
        raise MazeError(f"format_maze takes one level, got a wall_map of shape {walls.shape}.")
    grid = np.where(walls, WALL_CHAR, FREE_CHAR).astype("<U1")
    gx, gy = (int(v) for v in np.asarray(level.goal_pos))
    ax, ay = (int(v) for v in np.asarray(level.agent_pos))
    grid[gy, gx] = GOAL_CHAR
    grid[ay, ax] = AGENT_CHARS[int(level.agent_dir) % 4]
    return "\n".join("".join(row) for row in grid)
