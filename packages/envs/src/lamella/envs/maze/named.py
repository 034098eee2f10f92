"""The 16 named test mazes of minimax (and JaxUED), as levels.

Layouts of the fixed mazes are data from minimax (``src/minimax/envs/maze/maze_ood.py``,
Apache-2.0, Meta Platforms); the first eight are also JaxUED's prefabs. The procedural ones
(``FourRooms``, ``Crossing``, ``PerfectMaze*``) are generated in JAX from a key by lamella's
own code, following minimax's rules (see each generator).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs.maze.env import MEMORY_BOTTOM, MEMORY_TOP
from lamella.envs.maze.levels import choose_cell, parse_maze
from lamella.envs.maze.types import AMazeParams, MazeError, MazeLevel

__all__ = [
    "NAMED_MAZES",
    "crossing",
    "four_rooms",
    "named_maze",
    "named_maze_sampler",
    "perfect_maze",
]

NAMED_MAZES = (
    "SixteenRooms",
    "SixteenRooms2",
    "Labyrinth",
    "LabyrinthFlipped",
    "Labyrinth2",
    "StandardMaze",
    "StandardMaze2",
    "StandardMaze3",
    "SmallCorridor",
    "LargeCorridor",
    "Memory",
    "FourRooms",
    "Crossing",
    "PerfectMaze",
    "PerfectMazeMedium",
    "PerfectMazeXL",
)

_FIXED = {
    "SixteenRooms": """
        ...#..#..#...
        .>.......#...
        ...#..#......
        #.###.##.###.
        ...#.........
        ......#..#...
        ##.#.##.###.#
        ...#.....#...
        ...#..#......
        .####.##.#.##
        ...#..#..#...
        ......#....G.
        ...#.....#...
    """,
    "SixteenRooms2": """
        ...#.....#...
        .>....#..#...
        ...#..#..#...
        ####.##.###.#
        ...#..#......
        ......#..#...
        #.#####.#####
        ...#..#..#...
        ...#.........
        ##.##.##.####
        ...#..#..#...
        ......#....G.
        ...#..#..#...
    """,
    "Labyrinth": """
        .............
        .###########.
        .#.........#.
        .#.#######.#.
        .#.#.....#.#.
        .#.#.###.#.#.
        .#.#.#G#.#.#.
        .#.#.#.#.#.#.
        .#...#...#.#.
        .#########.#.
        .....#.....#.
        ####.#.#####.
        >....#.......
    """,
    "LabyrinthFlipped": """
        .............
        .###########.
        .#.........#.
        .#.#######.#.
        .#.#.....#.#.
        .#.#.###.#.#.
        .#.#.#G#.#.#.
        .#.#.#.#.#.#.
        .#.#...#...#.
        .#.#########.
        .#.....#.....
        .#####.#.####
        .......#....<
    """,
    "Labyrinth2": """
        >#...........
        .#.#########.
        .#.#.......#.
        .#.#.#####.#.
        .#.#.#...#.#.
        ...#.#.#.#.#.
        ####.#G#.#.#.
        ...#.###.#.#.
        .#.#.....#.#.
        .#.#######.#.
        .#.........#.
        .###########.
        .............
    """,
    "StandardMaze": """
        .....#>...#..
        .###.####.##.
        .#...........
        .########.###
        ........#....
        ######.#####.
        ....#..#.....
        .##...##.####
        ..#.#..#...#.
        #.#.##.###.#.
        #.#..#...#...
        #.##.###.###.
        ...#..G#.#...
    """,
    "StandardMaze2": """
        ...#.#....#..
        .#.#.####...#
        .#........#..
        .########.###
        ...#..#.#.#.G
        ##.#.##.#.#..
        >#.#....#.##.
        .#.##.###..#.
        .#..#..###.#.
        .##.##.#.#.#.
        .#...#.#.#.#.
        .#.#.#.#.#.#.
        ...#...#.....
    """,
    "StandardMaze3": """
        ...>#.#......
        .####.#.####.
        .#....#.#....
        ...####.#.#.#
        ##.#....#.#..
        ...#.##.#.##.
        .#.#.#..#..#G
        .#.#.#.###.##
        .#...#.#.#...
        .###.#.#.###.
        .#...#.#...#.
        .#.###.#.#.#.
        .#...#...#...
    """,
}


# minimax's Memory walls (its clue and goal cells are not walls here: AMazeParams.memory places
# them); the G only satisfies the text format, the sampler draws the goal.
_MEMORY = """
    ........#.#....
    ........#.#....
    ........#.#....
    ........#.#....
    ........#.#....
    ####....#.#....
    ...######.#....
    >.........#....
    ...######.#....
    ####....#.#....
    ........#.#....
    ........#.#....
    ........#.#....
    ........#.#....
    ........#G#....
"""


def _singleton_horizon(height: int, width: int) -> int:
    """minimax's evaluation horizon of the named mazes: ``2 (H + 2) (W + 2)`` (450 for 13x13)."""
    return 2 * (height + 2) * (width + 2)


def _params(height: int, width: int, max_episode_steps: int, n_walls: int = 0) -> AMazeParams:
    return AMazeParams(height=height, width=width, n_walls=n_walls, max_episode_steps=max_episode_steps)


def _corridor(length: int) -> tuple[np.ndarray, np.ndarray]:
    """Walls and goal candidates of minimax's Small (13x13) / Large (19x19) corridor.

    Rows 0 and ``size - 1`` are open, every other row has walls at the odd columns up to
    ``size - 2`` (the last column is open), the agent starts at ``(0, size // 2)`` facing right;
    the goal is one of the even columns ``2 .. size - 3`` of rows ``size // 2 - 1`` and
    ``size // 2 + 1``.
    """
    size = length
    walls = np.zeros((size, size), bool)
    walls[1 : size - 1, 1 : size - 1 : 2] = True
    walls[size // 2, 1 : size - 1] = True
    columns = np.arange(2, size - 2, 2)
    goals = [(int(x), size // 2 - 1) for x in columns] + [(int(x), size // 2 + 1) for x in columns]
    return walls, np.asarray(goals, np.int32)


@functools.partial(jax.jit, static_argnames=("size",))
def four_rooms(key: jax.Array, size: int = 17) -> MazeLevel:
    """minimax's FourRooms: a ``size x size`` (odd) grid split by the middle row and column,
    one random door in each of the four half-walls, then the goal on a uniform free cell, the
    agent on a uniform free cell other than the goal's (minimax's version can put the agent on
    the goal, a bug not copied), a uniform direction.
    """
    half = size // 2
    u = fast_random.uniform(key, (7,))
    doors = jnp.minimum(jnp.floor(u[:4] * half).astype(jnp.int32), half - 1)
    walls = jnp.zeros((size, size), jnp.bool_).at[half, :].set(True).at[:, half].set(True)
    walls = walls.at[half, doors[0]].set(False).at[half, doors[1] + half + 1].set(False)
    walls = walls.at[doors[2], half].set(False).at[doors[3] + half + 1, half].set(False)
    return _place(walls, u[4], u[5], u[6])


def _place(walls: jax.Array, u_goal: jax.Array, u_agent: jax.Array, u_dir: jax.Array) -> MazeLevel:
    """A level on ``walls`` with the goal, then the agent (elsewhere), on uniform free cells."""
    height, width = walls.shape
    free = ~walls.reshape(-1)
    goal = choose_cell(u_goal, free)
    agent = choose_cell(u_agent, free.at[goal].set(False))
    return MazeLevel(
        wall_map=walls,
        goal_pos=jnp.stack([goal % width, goal // width]).astype(jnp.int32),
        agent_pos=jnp.stack([agent % width, agent // width]).astype(jnp.int32),
        agent_dir=jnp.minimum(jnp.floor(u_dir * 4).astype(jnp.int32), 3),
    )


@functools.partial(jax.jit, static_argnames=("size", "n_crossings"))
def crossing(key: jax.Array, size: int = 9, n_crossings: int = 5) -> MazeLevel:
    """A Crossing maze (minimax's ``Crossing``, after MiniGrid's SimpleCrossing).

    ``n_crossings`` distinct wall lines among the odd rows and odd columns, then a monotone
    path of right/down moves from the agent at ``(0, 0)`` (facing right) to the goal at
    ``(size - 1, size - 1)`` is cleared; after crossing a wall line the path keeps its
    direction for one more cell, so every opening is a straight gap. The goal is always
    reachable; other free cells may not be.
    """
    lines = (size - 1) // 2  # odd rows 1, 3, ..., and as many odd columns
    if not 1 <= n_crossings <= 2 * lines:
        raise MazeError(
            f"crossing: n_crossings must be in [1, {2 * lines}] for size {size}, got {n_crossings}."
        )
    words = fast_random.bits(key, (2 * lines,), stream=1, vector=True)
    chosen = jnp.argsort(words) < n_crossings  # a uniform subset of the 2 * lines candidates
    odd = jnp.arange(size) % 2 == 1
    line_index = jnp.clip((jnp.arange(size) - 1) // 2, 0, lines - 1)
    row_on = odd & (jnp.arange(size) < size - 1) & chosen[line_index]
    col_on = odd & (jnp.arange(size) < size - 1) & chosen[lines + line_index]
    walls = row_on[:, None] | col_on[None, :]
    moves = fast_random.uniform(key, (2 * size - 2,), stream=2, vector=True)

    Carry = tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]

    def move(carry: Carry, u: jax.Array) -> tuple[Carry, None]:
        walls, x, y, last, through = carry
        choice = jnp.where(through, last, (u < 0.5).astype(jnp.int32))  # 0 right, 1 down
        choice = jnp.where(x >= size - 1, 1, jnp.where(y >= size - 1, 0, choice))
        nx, ny = x + (choice == 0), y + (choice == 1)
        through = walls[ny, nx]
        walls = walls.at[ny, nx].set(False)
        return (walls, nx, ny, choice, through), None

    zero = jnp.zeros((), jnp.int32)
    carry, _ = jax.lax.scan(move, (walls.at[0, 0].set(False), zero, zero, zero, jnp.bool_(False)), moves)
    walls = carry[0]
    return MazeLevel(
        wall_map=walls,
        goal_pos=jnp.asarray([size - 1, size - 1], jnp.int32),
        agent_pos=jnp.zeros((2,), jnp.int32),
        agent_dir=jnp.zeros((), jnp.int32),
    )


@functools.partial(jax.jit, static_argnames=("height", "width"))
def perfect_maze(key: jax.Array, height: int = 13, width: int = 13) -> MazeLevel:
    """A perfect maze (one path between any two free cells) by a depth-first backtracker.

    minimax's ``PerfectMaze`` rule: rooms at the even ``(x, y)``, walls everywhere else; from a
    uniform start room, repeatedly step to a uniform unvisited neighbour room (clearing the wall
    between) or backtrack when there is none, for ``2 * rooms`` iterations (enough to visit
    every room). Then the goal, then the agent, on uniform free cells, with a uniform direction.
    ``height`` and ``width`` must be odd. Jittable; vmap over keys for a batch.
    """
    if height % 2 == 0 or width % 2 == 0:
        raise MazeError(f"perfect_maze: height and width must be odd, got {height}x{width}.")
    rooms_h, rooms_w = height // 2 + 1, width // 2 + 1
    rooms = rooms_h * rooms_w
    words = fast_random.bits(key, (2 * rooms + 1,), stream=1, vector=True)
    start = (words[-1] % np.uint32(rooms)).astype(jnp.int32)
    walls = jnp.ones((height, width), jnp.bool_)
    walls = walls.at[2 * (start // rooms_w), 2 * (start % rooms_w)].set(False)
    visited = jnp.zeros((rooms,), jnp.bool_).at[start].set(True)
    stack = jnp.zeros((rooms,), jnp.int32).at[0].set(start)
    offsets = jnp.asarray(np.array([[1, 0], [0, 1], [-1, 0], [0, -1]], np.int32))

    def iterate(i: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        walls, visited, stack, size = carry
        top = stack[jnp.maximum(size - 1, 0)]
        rx, ry = top % rooms_w, top // rooms_w
        nx, ny = rx + offsets[:, 0], ry + offsets[:, 1]
        inside = (nx >= 0) & (nx < rooms_w) & (ny >= 0) & (ny < rooms_h)
        neighbour = jnp.clip(ny, 0, rooms_h - 1) * rooms_w + jnp.clip(nx, 0, rooms_w - 1)
        open_ = inside & ~visited[neighbour] & (size > 0)
        count = jnp.sum(open_.astype(jnp.int32))
        # The (word % count)-th open neighbour.
        pick_rank = (words[i] % jnp.maximum(count, 1).astype(jnp.uint32)).astype(jnp.int32)
        ranks = jnp.cumsum(open_.astype(jnp.int32)) - 1
        pick = jnp.argmax(open_ & (ranks == pick_rank))
        go = count > 0
        chosen = neighbour[pick]
        wall_x, wall_y = 2 * rx + offsets[pick, 0], 2 * ry + offsets[pick, 1]
        # In-place updates: a skipped one writes out of bounds and is dropped (a `where` over the
        # whole map would copy it on every iteration: 10201 cells for PerfectMazeXL).
        drop = jnp.where(go, 0, height * width)
        flat = walls.reshape(-1)
        flat = flat.at[wall_y * width + wall_x + drop].set(False, mode="drop")
        flat = flat.at[2 * ny[pick] * width + 2 * nx[pick] + drop].set(False, mode="drop")
        walls = flat.reshape(height, width)
        visited = visited.at[jnp.where(go, chosen, rooms)].set(True, mode="drop")
        stack = stack.at[jnp.where(go, jnp.minimum(size, rooms - 1), rooms)].set(chosen, mode="drop")
        size = jnp.where(go, size + 1, jnp.maximum(size - 1, 0))
        return walls, visited, stack, size

    walls, *_ = jax.lax.fori_loop(0, 2 * rooms, iterate, (walls, visited, stack, jnp.ones((), jnp.int32)))
    u = fast_random.uniform(key, (3,), stream=2)
    return _place(walls, u[0], u[1], u[2])


Sampler = Callable[[jax.Array], MazeLevel]


@functools.cache
def _spec(name: str) -> tuple[Sampler, AMazeParams]:
    if name in _FIXED:
        level = parse_maze(_FIXED[name])
        height, width = level.wall_map.shape
        params = _params(height, width, _singleton_horizon(height, width), int(np.sum(level.wall_map)))
        return (lambda key: level), params
    if name in ("SmallCorridor", "LargeCorridor"):
        size = 13 if name == "SmallCorridor" else 19
        walls_np, goals_np = _corridor(size)
        walls, goals = jnp.asarray(walls_np), jnp.asarray(goals_np)

        def corridor(key: jax.Array) -> MazeLevel:
            pick = fast_random.randint(key, (), 0, len(goals_np))
            return MazeLevel(
                wall_map=walls,
                goal_pos=goals[pick],
                agent_pos=jnp.asarray([0, size // 2], jnp.int32),
                agent_dir=jnp.zeros((), jnp.int32),
            )

        return corridor, _params(size, size, _singleton_horizon(size, size), int(walls_np.sum()))
    if name == "FourRooms":
        return four_rooms, _params(17, 17, 250)
    if name == "Crossing":
        return crossing, _params(9, 9, 4 * 11 * 11)
    perfect_sizes = {"PerfectMaze": 13, "PerfectMazeMedium": 19, "PerfectMazeXL": 101}
    if name in perfect_sizes:
        size = perfect_sizes[name]
        return functools.partial(perfect_maze, height=size, width=size), _params(
            size, size, _singleton_horizon(size, size)
        )
    if name == "Memory":
        walls = jnp.asarray(parse_maze(_MEMORY).wall_map)
        top, bottom = jnp.asarray(MEMORY_TOP, jnp.int32), jnp.asarray(MEMORY_BOTTOM, jnp.int32)

        def memory(key: jax.Array) -> MazeLevel:
            is_top = fast_random.randint(key, (), 0, 2) == 1
            return MazeLevel(
                wall_map=walls,
                goal_pos=jnp.where(is_top, top, bottom),
                agent_pos=jnp.asarray([0, 7], jnp.int32),
                agent_dir=jnp.zeros((), jnp.int32),
            )

        params = AMazeParams(height=15, width=15, n_walls=0, max_episode_steps=250, memory=True)
        return memory, params
    raise MazeError(f"unknown named maze {name!r}; the names are {', '.join(NAMED_MAZES)}.")


def named_maze_sampler(name: str) -> tuple[Sampler, AMazeParams]:
    """``(sample, params)``: ``sample(key) -> MazeLevel`` draws the named maze (jittable, vmappable
    over keys; a fixed maze ignores the key) and ``params`` are its size and horizon.

    Horizons (``max_episode_steps``) are minimax's: ``2 (H + 2) (W + 2)`` for the fixed mazes,
    the corridors and the perfect mazes (450 for 13x13), 250 for FourRooms, ``4 (H + 2) (W + 2)``
    = 484 for Crossing, 250 for Memory. Start directions are minimax's effective ones (0, right, wherever its
    classes ask for a random direction that its code never draws).

    Raises:
        MazeError: an unknown name (the message lists the names).

    Memory's params have ``memory=True`` (its rules: :class:`~lamella.envs.maze.AMazeParams`);
    its sampler draws the goal, top ``(9, 5)`` or bottom ``(9, 9)``, with probability 1/2.
    """
    return _spec(name)


def named_maze(name: str, key: jax.Array | None = None) -> tuple[MazeLevel, AMazeParams]:
    """``(level, params)`` of a named maze; see :func:`named_maze_sampler`.

    ``key`` is needed for the mazes that are drawn at random (the corridors' goal, FourRooms,
    Crossing, PerfectMaze*); the eight fixed mazes ignore it.

    Raises:
        MazeError: an unknown name, or a random maze without a key.
    """
    sample, params = _spec(name)
    if key is None:
        if name not in _FIXED:
            raise MazeError(
                f"{name} is drawn at random; pass a key: named_maze({name!r}, jax.random.key(0)), "
                "or use named_maze_sampler(name) to draw a batch."
            )
        key = jax.random.key(0)
    return sample(key), params
