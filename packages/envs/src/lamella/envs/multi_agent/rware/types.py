"""State and params of :class:`~lamella.envs.multi_agent.rware.RobotWarehouse`."""

from __future__ import annotations

import jax

from lamella.envs import struct

__all__ = ["RobotWarehouseParams", "RobotWarehouseState"]


class RobotWarehouseState(struct.PyTreeNode):
    """State of :class:`~lamella.envs.multi_agent.rware.RobotWarehouse`.

    ``n`` is the number of agents, ``H x W`` the grid, ``R`` the request queue
    size. Coordinates are ``(row, column)``, row 0 at the top: rware's ``(y, x)``.
    Shelves are numbered ``1..S`` as in rware (row-major over the shelf cells of
    the empty layout); 0 means "no shelf".

    Attributes:
        agent_positions: int32 ``(n, 2)``, each agent's cell; no two agents
            share a cell.
        agent_directions: int32 ``(n,)``, each agent's heading: 0 UP (row - 1),
            1 DOWN (row + 1), 2 LEFT (column - 1), 3 RIGHT (column + 1).
        carried_shelves: int32 ``(n,)``, the id of the shelf each agent carries,
            0 when it carries none. A carried shelf is on its agent's cell.
        has_delivered: bool ``(n,)``, the agent delivered the shelf it carries
            (rware's ``has_delivered``: only the two-stage reward reads it).
        shelf_grid: int32 ``(H, W)``, the id of the shelf standing on each cell
            (not carried), 0 where none stands.
        request_queue: int32 ``(R,)``, the ids of the requested shelves in
            rware's queue order (a delivered slot is refilled in place).
        inactive_steps: int32 ``()``, steps since the last delivery (rware's
            ``_cur_inactive_steps``).
        time: int32 ``()``, steps taken in this episode (rware's ``_cur_steps``).
        messages: int32 ``(n, M)``, each agent's message bits of its last action
            (0 or 1; zeros at reset), with ``msg_bits = M > 0``; None otherwise.
    """

    agent_positions: jax.Array
    agent_directions: jax.Array
    carried_shelves: jax.Array
    has_delivered: jax.Array
    shelf_grid: jax.Array
    request_queue: jax.Array
    inactive_steps: jax.Array
    time: jax.Array
    messages: jax.Array | None = None


class RobotWarehouseParams(struct.PyTreeNode):
    """Traced parameters of :class:`~lamella.envs.multi_agent.rware.RobotWarehouse`.

    Attributes:
        max_steps: int, the episode is truncated once ``time >= max_steps``
            (rware: 500 for every registered id); 0 disables the limit.
        max_inactivity_steps: int, the episode is truncated once
            ``inactive_steps >= max_inactivity_steps`` (rware: None, i.e. off,
            for every registered id); 0 disables the limit.
    """

    max_steps: int = struct.field(default=500, bounds=(0, None))
    max_inactivity_steps: int = struct.field(default=0, bounds=(0, None))
