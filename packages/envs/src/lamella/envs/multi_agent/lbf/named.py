"""Named Level-Based Foraging test levels: fixed start layouts written out as text.

A layout is a grid of space-separated cells, one text row per grid row:

- ``.``: an empty cell;
- ``A1``, ``B2``, ...: an agent and its level; the letter is the agent's index (``A`` is agent
  0, ``B`` agent 1, ...), so a layout with ``n`` agents names ``A`` to the ``n``-th letter once
  each;
- ``F2``: a food and its level (foods are numbered in reading order).

:func:`parse_level` turns a layout into a :class:`~lamella.envs.multi_agent.lbf.ForagingLevel`
for an env and checks that it is a level the env's reset could have drawn, so that a student
trained on the env's reset distribution is tested on familiar rules: the env's grid size and
agent count, at most ``max_num_food`` foods (the other slots stay empty), agent levels in
``[min_player_level, max_player_level]``, food levels in ``[min_food_level, cap]`` (reset's
cap: ``max_food_level``, or the sum of the three lowest agent levels; with ``force_coop``
exactly the cap), food on interior cells only. Every food is then within the whole team's
reach, so every named level is solvable. :data:`NAMED_LEVELS` holds the layouts;
:func:`named_level` builds one for an env and :func:`named_levels_for` lists those that fit an
env. The 5x5 layouts fit ``Foraging-5x5-2p-1f-v3`` (lamella-ued's LBF presets), the 8x8 ones
``Foraging-8x8-2p-2f-v3``.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

from lamella.envs.environment import EnvInputError
from lamella.envs.multi_agent.lbf.levels import ForagingLevel

if TYPE_CHECKING:
    from lamella.envs.multi_agent.lbf.env import LevelBasedForaging

__all__ = ["NAMED_LEVELS", "named_level", "named_levels_for", "parse_level"]

NAMED_LEVELS: dict[str, str] = {
    # 5x5, two agents, one food (Foraging-5x5-2p-1f-v3).
    # Both agents beside a food either can load alone: the easiest test.
    "Adjacent": """
        .  .  .  .  .
        .  A1 F1 B1 .
        .  .  .  .  .
        .  .  .  .  .
        .  .  .  .  .
    """,
    # Food far from both agents, in the opposite interior corner.
    "FarCorner": """
        A1 B1 .  .  .
        .  .  .  .  .
        .  .  .  .  .
        .  .  .  F1 .
        .  .  .  .  .
    """,
    # Agents at both ends of the middle row; the food between them needs both (2 > 1).
    "Corridor": """
        .  .  .  .  .
        .  .  .  .  .
        A1 .  F2 .  B1
        .  .  .  .  .
        .  .  .  .  .
    """,
    # Opposite corners; the food needs both (3 = 1 + 2), nearer the weaker agent.
    "OppositeCorners": """
        A1 .  .  .  .
        .  .  .  F3 .
        .  .  .  .  .
        .  .  .  .  .
        .  .  .  .  B2
    """,
    # The stronger agent can load alone but stands far away; the weaker one is near but cannot.
    "StrongFar": """
        .  .  .  .  B2
        .  .  .  .  .
        .  .  .  .  .
        .  F2 .  .  .
        A1 .  .  .  .
    """,
    # 8x8, two agents, two foods (Foraging-8x8-2p-2f-v3).
    # Two foods in opposite interior corners, the agents in the middle.
    "SplitFoods": """
        .  .  .  .  .  .  .  .
        .  F1 .  .  .  .  .  .
        .  .  .  .  .  .  .  .
        .  .  .  A1 B1 .  .  .
        .  .  .  .  .  .  .  .
        .  .  .  .  .  .  .  .
        .  .  .  .  .  .  F1 .
        .  .  .  .  .  .  .  .
    """,
    # Both foods need both agents, which start in opposite corners.
    "CoopCorners": """
        A1 .  .  .  .  .  .  .
        .  .  .  .  .  .  .  .
        .  .  F2 .  .  .  .  .
        .  .  .  .  .  .  .  .
        .  .  .  .  .  .  .  .
        .  .  .  .  .  F2 .  .
        .  .  .  .  .  .  .  .
        .  .  .  .  .  .  .  B1
    """,
}
"""Named layouts: name -> layout text (see the module docs)."""


def _cells(text: str, where: str) -> list[list[str]]:
    rows = [line.split() for line in textwrap.dedent(text).strip("\n").splitlines() if line.strip()]
    if not rows:
        raise EnvInputError(f"{where}: the layout is empty; write one text row per grid row.")
    widths = {len(row) for row in rows}
    if len(widths) > 1:
        raise EnvInputError(
            f"{where}: ragged layout (rows of {sorted(widths)} cells); every row needs the same "
            "number of space-separated cells."
        )
    return rows


def _check_foraging_env(env: object, what: str) -> None:
    """Refuse an env of another family (its attributes would fail or mislead further on)."""
    from lamella.envs.multi_agent.lbf.env import LevelBasedForaging

    if not isinstance(getattr(env, "unwrapped", env), LevelBasedForaging):
        raise EnvInputError(
            f"lbf.{what} builds levels of a LevelBasedForaging env, got {env!r:.120}; pass one, e.g. "
            "lamella.envs.make('Foraging-5x5-2p-1f-v3')[0]."
        )


def parse_level(text: str, env: LevelBasedForaging, name: str = "layout") -> ForagingLevel:
    """The :class:`~lamella.envs.multi_agent.lbf.ForagingLevel` of a layout (module docs) for
    ``env``, checked to be a level ``env``'s reset could draw.

    Raises:
        EnvInputError: a malformed layout (ragged rows, an unknown cell, an agent named twice or
            skipped), or one that does not fit ``env`` (grid size, agent or food count, levels
            out of reset's ranges, food on the border), or an env of another family; the
            message names the fix.
    """
    _check_foraging_env(env, "parse_level")
    where = f"{env.name} level {name!r}"
    rows = _cells(text, where)
    if (len(rows), len(rows[0])) != (env.rows, env.cols):
        raise EnvInputError(
            f"{where}: the layout is {len(rows)}x{len(rows[0])} but the env's grid is "
            f"{env.rows}x{env.cols}; use an env of the layout's size."
        )
    agents: dict[int, tuple[int, int, int]] = {}
    foods: list[tuple[int, int, int]] = []
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            if cell == ".":
                continue
            kind, digits = cell[0], cell[1:]
            if not digits.isdigit() or int(digits) < 1 or not (kind == "F" or "A" <= kind <= "Z"):
                raise EnvInputError(
                    f"{where}: unknown cell {cell!r} at row {r}, column {c}; a cell is '.', an agent "
                    "'A1' (letter = agent index, digits = level >= 1) or a food 'F2'."
                )
            if kind == "F":
                foods.append((r, c, int(digits)))
                continue
            index = ord(kind) - ord("A")
            if index in agents:
                raise EnvInputError(f"{where}: agent {kind} is placed twice; name each agent once.")
            agents[index] = (r, c, int(digits))
    if sorted(agents) != list(range(env.num_agents)):
        letters = "".join(chr(ord("A") + i) for i in range(env.num_agents))
        raise EnvInputError(
            f"{where}: the layout names agents {''.join(chr(ord('A') + i) for i in sorted(agents))} but "
            f"the env has {env.num_agents}; name {letters}, once each."
        )
    if not foods or len(foods) > env.max_num_food:
        raise EnvInputError(
            f"{where}: the layout has {len(foods)} foods; the env holds 1 to {env.max_num_food}."
        )
    agent_levels = np.asarray([agents[i][2] for i in range(env.num_agents)], np.int32)
    if agent_levels.min() < env.min_player_level or agent_levels.max() > env.max_player_level:
        raise EnvInputError(
            f"{where}: agent levels {agent_levels.tolist()} leave the env's range "
            f"[{env.min_player_level}, {env.max_player_level}]."
        )
    cap = (
        env.max_food_level
        if env.max_food_level is not None
        else int(np.sort(agent_levels)[: min(3, env.num_agents)].sum())
    )
    low = cap if env.force_coop else min(env.min_food_level, cap)
    for r, c, level in foods:
        if not low <= level <= cap:
            raise EnvInputError(
                f"{where}: food level {level} at row {r}, column {c} is outside reset's range "
                f"[{low}, {cap}] for these agents."
            )
        if level > agent_levels.sum():
            raise EnvInputError(
                f"{where}: food level {level} is above the whole team's {agent_levels.sum()}."
            )
        if not (1 <= r <= env.rows - 2 and 1 <= c <= env.cols - 2):
            raise EnvInputError(
                f"{where}: food at row {r}, column {c} is on the border; reset puts food on "
                "interior cells only."
            )
    empty = env.max_num_food - len(foods)
    return ForagingLevel(
        agent_positions=jnp.asarray([agents[i][:2] for i in range(env.num_agents)], jnp.int32).reshape(-1, 2),
        agent_levels=jnp.asarray(agent_levels),
        food_positions=jnp.asarray([f[:2] for f in foods] + [(0, 0)] * empty, jnp.int32),
        food_levels=jnp.asarray([f[2] for f in foods] + [0] * empty, jnp.int32),
    )


def named_level(name: str, env: LevelBasedForaging) -> ForagingLevel:
    """The named level ``name`` of :data:`NAMED_LEVELS` for ``env`` (see :func:`parse_level`).

    Raises:
        EnvInputError: an unknown name (the message lists the names that fit ``env``), or a
            level that does not fit ``env``, or an env of another family.
    """
    _check_foraging_env(env, "named_level")
    if name not in NAMED_LEVELS:
        fitting = named_levels_for(env)
        raise EnvInputError(
            f"unknown Level-Based Foraging level {name!r}; "
            + (f"{env.name} fits {', '.join(fitting)}." if fitting else f"none fits {env.name}.")
        )
    return parse_level(NAMED_LEVELS[name], env, name)


def named_levels_for(env: LevelBasedForaging) -> tuple[str, ...]:
    """The names of :data:`NAMED_LEVELS` that fit ``env``, in :data:`NAMED_LEVELS` order.

    Raises:
        EnvInputError: an env of another family.
    """
    _check_foraging_env(env, "named_levels_for")
    fitting = []
    for name, text in NAMED_LEVELS.items():
        try:
            parse_level(text, env, name)
        except EnvInputError:
            continue
        fitting.append(name)
    return tuple(fitting)
