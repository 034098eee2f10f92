"""Levels, params and state of the AMaze family (:mod:`lamella.envs.maze`)."""

from __future__ import annotations

import jax

from lamella.envs import struct
from lamella.envs.errors import UserError

__all__ = ["AMazeParams", "AMazeState", "MazeError", "MazeLevel"]


class MazeError(UserError, ValueError):
    """A maze string, level or setting that cannot work; the message names the fix."""


class MazeLevel(struct.PyTreeNode):
    """One maze: walls, goal and the agent's start. A pytree, so a batch of levels is one ``vmap``.

    Coordinates are ``(x, y)`` with ``x`` the column (left to right) and ``y`` the row (top to
    bottom). The grid is the interior only: the border wall around it is implicit (a 13x13 level
    is MiniGrid's 15x15 grid).

    Attributes:
        wall_map: bool ``(H, W)``, indexed ``[y, x]``; True where a wall is.
        goal_pos: int32 ``(2,)``, the goal's ``(x, y)``.
        agent_pos: int32 ``(2,)``, the agent's start ``(x, y)``.
        agent_dir: int32 ``()``, the agent's start direction: 0 right (+x), 1 down (+y),
            2 left (-x), 3 up (-y), MiniGrid's numbering.
    """

    wall_map: jax.Array
    goal_pos: jax.Array
    agent_pos: jax.Array
    agent_dir: jax.Array


class AMazeParams(struct.PyTreeNode):
    """Settings of :class:`~lamella.envs.maze.AMaze`.

    The size and view settings change array shapes, so they are static fields (part of the
    pytree's structure, never traced); ``max_episode_steps`` is traced, so a batch of envs with
    different horizons is one ``vmap``.

    Attributes:
        height: static int, interior rows ``H`` (the border wall is not counted), >= 1.
        width: static int, interior columns ``W``, >= 1.
        n_walls: static int, the wall budget of random (DR) levels drawn by ``reset`` and
            :func:`~lamella.envs.maze.sample_dr_level`: at most ``H * W - 2``.
        agent_view_size: static int, side ``V`` of the egocentric view, odd, >= 3 (MiniGrid's
            ``agent_view_size``).
        see_through_walls: static bool. True: every cell of the view is seen (minimax's AMaze,
            and MiniGrid with ``see_through_walls=True``). False: cells hidden behind walls are
            unseen (encoded ``[0, 0, 0]``), by MiniGrid's ``process_vis`` rule.
        replace_wall_pos: static bool, DR walls are drawn with replacement (``n_walls`` draws,
            duplicates collapse, so fewer walls: minimax's 60-block configs) instead of
            ``n_walls`` distinct cells.
        sample_n_walls: static bool, DR levels first draw their wall count uniformly from
            ``0 .. n_walls`` (both ends included), then that many walls.
        max_episode_steps: int (traced), steps after which the episode is truncated; also the
            ``max_steps`` of the reward ``1 - 0.9 * t / max_steps``.
        memory: static bool, minimax's Memory rules (15x15 only; ``named_maze_sampler("Memory")``
            sets it): the goal is one of two goal cells, ``(9, 5)`` (red) or ``(9, 9)`` (green),
            the level's ``goal_pos``; the other is a distractor, and the clue cell ``(0, 6)``
            next to the start shows the goal's colour. Clue and distractor are solid (seen as
            goals of their colour); walking into the distractor ends the episode
            (``terminated``) with reward 0.
    """

    height: int = struct.field(static=True, default=13)
    width: int = struct.field(static=True, default=13)
    n_walls: int = struct.field(static=True, default=60)
    agent_view_size: int = struct.field(static=True, default=5)
    see_through_walls: bool = struct.field(static=True, default=True)
    replace_wall_pos: bool = struct.field(static=True, default=True)
    sample_n_walls: bool = struct.field(static=True, default=False)
    max_episode_steps: int = 250
    memory: bool = struct.field(static=True, default=False)


class AMazeState(struct.PyTreeNode):
    """State of :class:`~lamella.envs.maze.AMaze`.

    Attributes:
        level: :class:`MazeLevel`, the level the episode started from (unchanged by ``step``;
            ``level.agent_pos``/``agent_dir`` are the start, not the current pose).
        agent_pos: int32 ``(2,)``, the agent's current ``(x, y)``.
        agent_dir: int32 ``()``, the agent's current direction (0 right, 1 down, 2 left, 3 up).
        time: int32 ``()``, steps taken in this episode.
        maze_map: uint8 ``(H + 2 (V - 1), W + 2 (V - 1))``, the level as MiniGrid object codes
            (1 empty, 2 wall, 8 goal; with ``memory``: 9 red goal, 10 and 11 solid green and red
            goal-coloured cells, the clue and the distractor) padded with ``V - 1`` wall cells on every side
            (``V = agent_view_size``), built by ``reset_to_level`` from ``level``: the step reads
            the cell ahead and the view window from it without bounds checks. Derived data:
            build states with ``reset_to_level``, not by hand.
    """

    level: MazeLevel
    agent_pos: jax.Array
    agent_dir: jax.Array
    time: jax.Array
    maze_map: jax.Array
