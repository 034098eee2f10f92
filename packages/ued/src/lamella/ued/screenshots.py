"""Pictures of a UED run: the levels of each update interval, the level buffer, the score curves.

- During training (``screenshot_every=N`` in a DR / PLR / ACCEL config): for every seed and
  every interval of ``N`` iterations, a PNG grid of the levels the students were given, one per
  kind the interval played: ``update_<i>_generated.png`` (new random levels),
  ``update_<i>_replayed.png`` (levels drawn from the buffer) and ``update_<i>_mutated.png``
  (ACCEL's edits), plus ``update_<i>_buffer.png``, the buffer's highest-scoring levels (PLR,
  ACCEL), best first. ``<i>`` is the first iteration of the interval; the files go to
  ``<screenshot_dir>/seed_<s>/``, by default ``<run>/screenshots/seed_<s>/`` in the directory
  of the run the lamella-agents driver trains (a sweep over traced settings:
  ``.../<field>=<value>,.../seed_<s>/`` per config). The runner hands
  the levels to the host with ``jax.debug.callback`` (the only side effect of its compiled step), and the host draws them
  with NumPy; with ``screenshot_every=0`` (the default) nothing of this is compiled in.
- After training: :func:`save_buffer_grid` draws a buffer (a checkpoint's, through
  :func:`buffer_grids`) with each level's score; :func:`plot_score_curves` plots every level
  score the runner logs (``train_score_<name>``) against env steps, one panel per score.

Every picture is drawn by a level family's host-side drawer (``LevelFamily.level_image``,
``image(level, tile) -> RGB uint8``); :func:`level_image` picks it by the level's type:

- AMaze (:func:`maze_level_image`), colours of :func:`lamella.envs.maze.render_level`: walls
  grey, floor black, the goal green, the agent a red triangle pointing its way.
- Level-Based Foraging (:func:`foraging_level_image`), colours of ``env.render_level``: food a
  green cell, darker for a higher level, agent ``i`` a disc in its own colour (red, blue,
  orange, ...), each with one white dot per level.
"""

from __future__ import annotations

import math
import os
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs.maze.render import AGENT, FLOOR, GOAL, WALL
from lamella.envs.multi_agent.lbf import ForagingLevel
from lamella.envs.multi_agent.lbf import render as lbf_render

__all__ = [
    "BRANCH_NAMES",
    "buffer_grids",
    "foraging_level_image",
    "level_grid",
    "level_image",
    "make_screenshot_recorder",
    "maze_level_image",
    "plot_score_curves",
    "save_buffer_grid",
    "save_level_grid",
]

#: File names of the runner's branches (0 new, 1 replay, 2 mutate).
BRANCH_NAMES = ("generated", "replayed", "mutated")
SEPARATOR = 255  # white lines between the levels of a grid


def _agent_mask(tile: int, direction: int) -> np.ndarray:
    """bool ``(tile, tile)``: a triangle pointing right (0), down (1), left (2) or up (3)."""
    centre = (np.arange(tile) + 0.5) / tile
    across, along = np.meshgrid(centre, centre, indexing="ij")  # rows, columns of a right-pointing tile
    right = (along >= 0.15) & (along <= 0.85) & (np.abs(across - 0.5) <= 0.4 * (0.85 - along) / 0.7)
    return np.rot90(right, k=-int(direction) % 4)


LevelImage = Callable[[Any, int], np.ndarray]
"""``image(level, tile) -> RGB uint8 (h, w, 3)`` of one level (host arrays); NumPy only, so it
runs inside a host callback (a callback must not call back into JAX)."""


def level_image(level: Any, tile: int = 8) -> np.ndarray:
    """RGB uint8 picture of one level (host arrays), drawn by its family's drawer: an AMaze
    :class:`~lamella.envs.maze.MazeLevel` (:func:`maze_level_image`) or a Level-Based Foraging
    :class:`~lamella.envs.multi_agent.lbf.ForagingLevel` (:func:`foraging_level_image`).

    Raises:
        TypeError: another kind of level, naming the fix (``LevelFamily.level_image``).
    """
    if isinstance(level, ForagingLevel):
        return foraging_level_image(level, tile)
    if hasattr(level, "wall_map"):
        return maze_level_image(level, tile)
    raise TypeError(
        f"no level drawer for {type(level).__name__} levels (AMaze and Level-Based Foraging have "
        "one); give your LevelFamily a level_image(level, tile) -> RGB uint8 NumPy array."
    )


def _disc(tile: int, centre_x: float, centre_y: float, radius: float) -> np.ndarray:
    """bool ``(tile, tile)``: the pixels of one cell whose centres lie in a disc."""
    ys, xs = np.meshgrid(np.arange(tile) + 0.5, np.arange(tile) + 0.5, indexing="ij")
    return (xs - centre_x) ** 2 + (ys - centre_y) ** 2 <= radius**2


def _pips(patch: np.ndarray, count: int, max_count: int) -> None:
    """One white dot per level (at most ``max_count``), laid out as ``env.render`` lays them."""
    tile = patch.shape[0]
    for k in range(min(int(count), max_count)):
        dx = (k % 3 - 1) * tile * 0.2
        dy = (k // 3 - 0.5) * tile * 0.25 if max_count > 3 else 0.0
        patch[_disc(tile, tile / 2 + dx, tile / 2 + dy, max(tile * 0.07, 0.5))] = lbf_render.PIP


def foraging_level_image(
    level: Any,
    tile: int = 8,
    *,
    shape: tuple[int, int] | None = None,
    food_level_bound: int | None = None,
) -> np.ndarray:
    """RGB uint8 ``(rows * tile, columns * tile, 3)`` of one Level-Based Foraging
    :class:`~lamella.envs.multi_agent.lbf.ForagingLevel` (host arrays), in ``env.render_level``'s
    colours: a light floor with grid lines, each food a green cell shaded by its level, each
    agent a disc in its own colour (drawn in index order), one white dot per level on both.

    Args:
        level: one level.
        tile: pixels per cell.
        shape: the env's ``(rows, columns)``; None: the smallest grid that holds every agent
            and food (a level does not carry its grid size; the family passes the env's).
        food_level_bound: the food level drawn darkest (the env's ``food_level_bound``); None:
            the agents' summed level, reset's cap.
    """
    agents = np.asarray(level.agent_positions, np.int64)
    agent_levels = np.asarray(level.agent_levels, np.int64)
    foods = np.asarray(level.food_positions, np.int64)
    food_levels = np.asarray(level.food_levels, np.int64)
    present = food_levels > 0
    if shape is None:
        cells = np.concatenate([agents, foods[present]]) if present.any() else agents
        shape = (int(cells[:, 0].max()) + 1, int(cells[:, 1].max()) + 1)
    rows, cols = shape
    bound = food_level_bound if food_level_bound is not None else max(int(agent_levels.sum()), 1)
    light = np.asarray(lbf_render.BACKGROUND, np.float32)
    cells_rgb = np.broadcast_to(light, (rows, cols, 3)).copy()
    for (r, c), lvl in zip(foods[present], food_levels[present]):
        shade = min(max(lvl / max(bound, 1), 0.0), 1.0)
        cells_rgb[r, c] = light + (0.45 + 0.55 * shade) * (lbf_render.FOOD - light)
    frame = np.repeat(np.repeat(cells_rgb.astype(np.uint8), tile, axis=0), tile, axis=1)
    on_line = (np.arange(rows * tile)[:, None] % tile == 0) | (np.arange(cols * tile)[None, :] % tile == 0)
    frame[on_line] = lbf_render.GRID
    max_food_pips = min(bound, 6)
    for (r, c), lvl in zip(foods[present], food_levels[present]):
        _pips(frame[r * tile : (r + 1) * tile, c * tile : (c + 1) * tile], lvl, max_food_pips)
    max_agent_pips = min(max(int(agent_levels.max(initial=1)), 1), 6)
    for index, ((r, c), lvl) in enumerate(zip(agents, agent_levels)):
        patch = frame[r * tile : (r + 1) * tile, c * tile : (c + 1) * tile]
        patch[_disc(tile, tile / 2, tile / 2, tile * 0.42)] = lbf_render.AGENT_COLORS[
            index % len(lbf_render.AGENT_COLORS)
        ]
        _pips(patch, lvl, max_agent_pips)
    return frame


def maze_level_image(level: Any, tile: int = 8) -> np.ndarray:
    """RGB uint8 ``((H + 2) * tile, (W + 2) * tile, 3)`` of one :class:`~lamella.envs.maze.MazeLevel`
    (host arrays), with its border wall. NumPy only, so it runs inside a host callback."""
    walls = np.pad(np.asarray(level.wall_map, bool), 1, constant_values=True)
    cells = np.where(walls[..., None], np.asarray(WALL, np.uint8), np.asarray(FLOOR, np.uint8))
    height, width = walls.shape
    gx, gy = (int(v) + 1 for v in np.asarray(level.goal_pos))
    if 1 <= gx < width - 1 and 1 <= gy < height - 1:
        cells[gy, gx] = GOAL
    frame = np.repeat(np.repeat(cells, tile, axis=0), tile, axis=1)
    ax, ay = (int(v) + 1 for v in np.asarray(level.agent_pos))
    if 1 <= ax < width - 1 and 1 <= ay < height - 1:
        patch = frame[ay * tile : (ay + 1) * tile, ax * tile : (ax + 1) * tile]
        patch[_agent_mask(tile, int(np.asarray(level.agent_dir)))] = AGENT
    return frame


def level_grid(
    levels: Any, tile: int = 8, columns: int | None = None, image: LevelImage | None = None
) -> np.ndarray:
    """RGB uint8 grid of a batch of levels (leading axis), row by row, white lines between,
    each drawn by ``image`` (default :func:`level_image`, which picks the family's drawer)."""
    draw = image or level_image
    count = np.shape(jax.tree.leaves(levels)[0])[0]
    if count == 0:
        raise ValueError("level_grid: no levels to draw.")
    columns = columns or math.ceil(math.sqrt(count))
    rows = math.ceil(count / columns)
    images = [draw(jax.tree.map(lambda x, i=i: np.asarray(x)[i], levels), tile) for i in range(count)]
    h, w = images[0].shape[:2]
    grid = np.full((rows * (h + 2) + 2, columns * (w + 2) + 2, 3), SEPARATOR, np.uint8)
    for index, picture in enumerate(images):
        r, c = divmod(index, columns)
        grid[2 + r * (h + 2) : 2 + r * (h + 2) + h, 2 + c * (w + 2) : 2 + c * (w + 2) + w] = picture
    return grid


def _save_png(image: np.ndarray, path: str) -> str:
    """Write ``image`` to ``path`` atomically: a temporary file of its own, then a rename."""
    from matplotlib import image as mpimg

    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".png")
    os.close(handle)
    try:
        mpimg.imsave(tmp, image)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def save_level_grid(
    levels: Any, path: str | os.PathLike[str], tile: int = 8, image: LevelImage | None = None
) -> str:
    """Write :func:`level_grid` of ``levels`` to a PNG; return its path."""
    return _save_png(level_grid(levels, tile, image=image), os.fspath(path))


def _top_levels(buffer_state: Any, count: int) -> tuple[Any, jax.Array, jax.Array]:
    """The ``count`` highest-scoring stored levels (best first), their scores, and how many of
    the ``count`` slots hold a level."""
    scores = jnp.where(buffer_state.filled, buffer_state.scores, -jnp.inf)
    order = jnp.argsort(-scores)[:count]
    levels = jax.tree.map(lambda x: x[order], buffer_state.levels)
    return levels, buffer_state.scores[order], jnp.minimum(jnp.sum(buffer_state.filled), count)


def make_screenshot_recorder(
    directory: str,
    every: int,
    buffer_levels: int = 64,
    tile: int = 8,
    image: LevelImage | None = None,
    variant: Mapping[str, Any] | None = None,
) -> Callable[..., None]:
    """``record(iteration, seed, branch, levels, buffer_state)``, to call inside a runner's step.

    It hands the iteration's levels (and the buffer's ``buffer_levels`` best levels, when
    ``buffer_state`` is not None) to the host with ``jax.debug.callback`` every iteration; the
    host writes the first batch of each kind of every interval of ``every`` iterations (see the
    module docs) and ignores the rest. ``image`` draws one level (the family's
    ``LevelFamily.level_image``; default :func:`level_image`). ``variant`` (field name -> the
    runner's traced value, a sweep's swept settings) puts each config's pictures in a folder of
    its own, ``<directory>/<field>=<value>,.../seed_<s>/``.

    ``directory`` ``""`` is ``screenshots/`` in the directory of the run the lamella-agents
    driver is training when the pictures are drawn (:func:`lamella.agents.driver.run_directory`;
    the working directory outside the driver): each run, each program of a sweep and each run on
    a Ray worker keeps its pictures in its own run directory. A resumed run keeps the pictures
    of the interval it resumes in (drawn before it stopped), as if it had never stopped.
    """
    if every < 1:
        raise ValueError(f"make_screenshot_recorder: every must be >= 1, got {every}.")
    names = tuple(variant or {})
    values = tuple((variant or {}).values())
    written: set[tuple[str, int, str]] = set()
    first_drawn: dict[str, int] = {}  # the first iteration this recorder drew into each folder
    # In a program split over devices, jax may run the callback on several devices' threads at
    # once (jax 0.7.1 on 4 CPU devices did): one writes each picture, the others skip it.
    lock = threading.Lock()

    def host(iteration: Any, seed: Any, branch: Any, levels: Any, top: Any, swept: Any) -> None:
        with lock:
            write(iteration, seed, branch, levels, top, swept)

    def root() -> str:
        if directory:
            return directory
        from lamella.agents.driver import run_directory

        return os.path.join(run_directory() or "", "screenshots")

    def write(iteration: Any, seed: Any, branch: Any, levels: Any, top: Any, swept: Any) -> None:
        start = int(iteration) // every * every
        # str of the NumPy scalar: 0.1 for a float32 0.1, as the run log's label writes it.
        config = ",".join(f"{name}={np.asarray(value)[()]!s}" for name, value in zip(names, swept))
        folder = os.path.join(root(), config, f"seed_{int(seed)}")
        first = first_drawn.setdefault(folder, int(iteration))

        def save(pictured: Any, kind: str) -> None:
            written.add((folder, start, kind))
            path = os.path.join(folder, f"update_{start:06d}_{kind}.png")
            # An interval begun before this recorder's first iteration here (a resumed run): its
            # first batch of each kind was drawn then, and stays.
            if not (start < first and os.path.exists(path)):
                save_level_grid(pictured, path, tile, image)

        kind = BRANCH_NAMES[int(branch)]
        if (folder, start, kind) not in written:
            save(levels, kind)
        if top is not None and (folder, start, "buffer") not in written:
            top_levels, _, stored = top
            if int(stored) > 0:
                save(jax.tree.map(lambda x: np.asarray(x)[: int(stored)], top_levels), "buffer")

    def record(
        iteration: jax.Array, seed: jax.Array, branch: jax.Array, levels: Any, buffer_state: Any
    ) -> None:
        top = None
        if buffer_state is not None:
            count = min(buffer_levels, int(buffer_state.scores.shape[0]))
            top = _top_levels(buffer_state, count)
        jax.debug.callback(host, iteration, seed, branch, levels, top, values)

    return record


def save_buffer_grid(
    buffer_state: Any,
    path: str | os.PathLike[str],
    max_levels: int = 64,
    tile: int = 6,
    image: LevelImage | None = None,
) -> str:
    """Draw a level buffer's stored levels, highest score first, each titled with its score,
    staleness and edit count; write the PNG and return its path.

    Args:
        buffer_state: one :class:`~lamella.ued.buffer.LevelBufferState` (no seed axis: index a
            checkpoint's state, ``jax.tree.map(lambda x: x[0], state.buffer)``).
        path: the PNG to write.
        max_levels: draw at most this many (the best).
        tile: pixels per cell.
        image: draws one level (default :func:`level_image`, which picks the family's drawer).

    Raises:
        ValueError: an empty buffer.
    """
    from matplotlib.figure import Figure

    if np.ndim(buffer_state.size) != 0:
        raise ValueError(
            f"save_buffer_grid takes one buffer, got a batch of {np.shape(buffer_state.size)}; "
            "index the seed axis first (jax.tree.map(lambda x: x[0], state.buffer))."
        )
    filled = np.asarray(buffer_state.filled)
    stored = int(filled.sum())
    if stored == 0:
        raise ValueError("save_buffer_grid: the buffer holds no level yet.")
    count = min(stored, max_levels)
    levels, scores, _ = jax.device_get(_top_levels(buffer_state, count))
    order = np.argsort(-np.where(filled, np.asarray(buffer_state.scores), -np.inf))[:count]
    staleness = np.asarray(buffer_state.staleness)[order]
    edits = np.asarray(buffer_state.num_edits)[order]
    columns = math.ceil(math.sqrt(count))
    rows = math.ceil(count / columns)
    figure = Figure(figsize=(max(1.6 * columns, 4.0), 1.8 * rows + 0.4))
    axes = figure.subplots(rows, columns, squeeze=False)
    for index, axis in enumerate(axes.reshape(-1)):
        axis.set_axis_off()
        if index >= count:
            continue
        level = jax.tree.map(lambda x, i=index: np.asarray(x)[i], levels)
        axis.imshow((image or level_image)(level, tile), interpolation="nearest")
        axis.set_title(f"{scores[index]:.3g} s{staleness[index]} e{edits[index]}", fontsize=7)
    figure.suptitle(f"level buffer: {stored} levels, best {count} (score, staleness s, edits e)", fontsize=9)
    figure.tight_layout()
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=100)
    return path


def buffer_grids(run: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """:func:`save_buffer_grid` of every seed of a PLR / ACCEL run's newest checkpoint (a run
    directory or a checkpoint file): ``<out_dir>/buffer_seed_<s>.png`` (default ``out_dir``:
    the run directory); for a sweep's program, every config's seeds,
    ``buffer_<field>=<value>,..._seed_<s>.png``. Returns the paths.

    Raises:
        ValueError: a run without a level buffer (DR).
    """
    from lamella.agents.driver import load_run

    loaded = load_run(run)
    if not hasattr(loaded.state, "buffer") or loaded.state.buffer == ():
        raise ValueError(f"{run}: a {loaded.algorithm!r} run has no level buffer (PLR and ACCEL have one).")
    if out_dir is None:
        run_path = os.fspath(run)
        out_dir = run_path if os.path.isdir(run_path) else os.path.dirname(os.path.dirname(run_path))
    image = None
    if hasattr(loaded.config, "env_id"):  # the run's family draws its levels at the env's size
        from lamella.ued.runners import default_family

        image = default_family(loaded.config).level_image
    paths = []
    seeds = loaded.metadata["seeds"]
    # A sweep's population is every config's seeds, config by config (lamella.agents.driver).
    for number, variant in enumerate(loaded.metadata.get("variants") or [{}]):
        config = ",".join(f"{name}={value}" for name, value in variant.items())
        for index, seed in enumerate(seeds, number * len(seeds)):
            one = jax.tree.map(lambda x, i=index: x[i], loaded.state.buffer)
            name = f"buffer_{config}_seed_{seed}.png" if config else f"buffer_seed_{seed}.png"
            paths.append(save_buffer_grid(one, os.path.join(os.fspath(out_dir), name), image=image))
    return paths


def plot_score_curves(
    metrics_path: str | os.PathLike[str],
    out_path: str | os.PathLike[str] | None = None,
    scores: Sequence[str] | None = None,
) -> str:
    """Plot the level scores of a UED run's log against env steps, one panel per score.

    Each panel is one ``train_score_<name>`` metric (the mean score of the iteration's levels,
    every score the runner computes, whichever drives the buffer): each seed a thin line, the
    mean over seeds a thick one.

    Args:
        metrics_path: the run's ``metrics.json``.
        out_path: the PNG; default ``score_curves.png`` next to ``metrics_path``.
        scores: score names to plot (default: every ``train_score_*`` in the log).

    Returns:
        The path of the PNG.

    Raises:
        ValueError: a log without score metrics, or a score it does not hold.
    """
    from matplotlib.figure import Figure

    from lamella.agents.plotting import learning_curves
    from lamella.agents.runlog import read_metrics

    metrics = read_metrics(metrics_path)
    found: set[str] = set()
    for tasks in metrics.values():
        for algorithms in tasks.values():
            for runs in algorithms.values():
                for entries in runs.values():
                    for name, entry in entries.items():
                        if name.startswith("step_"):
                            found.update(
                                k[len("train_score_") :] for k in entry if k.startswith("train_score_")
                            )
    if not found:
        raise ValueError(
            f"{os.fspath(metrics_path)} holds no train_score_* metrics: DR, PLR and ACCEL runs log "
            "them; a PAIRED run logs its teacher's return (train_teacher_return) instead, plot it "
            "with lamella eval aggregate --metric train_teacher_return."
        )
    names = list(scores) if scores is not None else sorted(found)
    missing = [n for n in names if n not in found]
    if missing:
        raise ValueError(f"{os.fspath(metrics_path)} has no score {missing}; it has {sorted(found)}.")
    figure = Figure(figsize=(4.2 * len(names), 3.4))
    axes = figure.subplots(1, len(names), squeeze=False)[0]
    for axis, name in zip(axes, names):
        curves = learning_curves(metrics, f"train_score_{name}")
        for (_, _, algorithm), runs in sorted(curves.items()):
            length = min(len(x) for x, _ in runs.values())
            x = next(iter(runs.values()))[0][:length]
            ys = np.stack([y[:length] for _, y in runs.values()])
            line = axis.plot(x, ys.mean(0), linewidth=2.0, label=f"{algorithm} ({len(runs)} seeds)")[0]
            for y in ys:
                axis.plot(x, y, color=line.get_color(), alpha=0.3, linewidth=0.8)
        axis.set_title(name)
        axis.set_xlabel("env steps")
        axis.legend(fontsize=7)
    figure.tight_layout()
    if out_path is None:
        out_path = os.path.join(os.path.dirname(os.fspath(metrics_path)), "score_curves.png")
    out_path = os.fspath(out_path)
    figure.savefig(out_path, dpi=100)
    return out_path
