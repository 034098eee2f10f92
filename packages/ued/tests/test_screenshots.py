"""Screenshots: level pictures (checked pixel by pixel), the recorder a runner calls inside its
compiled step (driven here by a small vmapped scan, two seeds), the buffer grid, the score curves.
The end-to-end run with the driver is in the top-level tests/test_ued_eval.py."""

import concurrent.futures
import json
import os
import threading
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from matplotlib import image as mpimg

from lamella.envs import maze
from lamella.envs.maze.render import AGENT, FLOOR, GOAL, WALL
from lamella.ued import screenshots
from lamella.ued.buffer import make_level_buffer

PARAMS = maze.AMazeParams(height=5, width=5, n_walls=4)


def sample(n, seed=0):
    return jax.vmap(maze.sample_dr_level, in_axes=(0, None))(
        jax.random.split(jax.random.key(seed), n), PARAMS
    )


def test_level_image_matches_the_jax_renderer_cell_colours():
    level = maze.parse_maze(
        """
        #..
        .>G
        """
    )
    tile = 8
    image = screenshots.level_image(jax.device_get(level), tile)
    assert image.shape == (4 * tile, 5 * tile, 3) and image.dtype == np.uint8
    reference = np.asarray(maze.render_level(level, maze.AMazeParams(height=2, width=3, n_walls=0), tile))
    # Cell colours (the centre pixel of each cell but the agent's) agree with render_level.
    for y in range(4):
        for x in range(5):
            if (x, y) == (2, 2):
                continue
            np.testing.assert_array_equal(
                image[y * tile + 1, x * tile + 1], reference[y * tile + 1, x * tile + 1]
            )
    assert tuple(image[0, 0]) == WALL and tuple(image[1 * tile + 1, 1 * tile + 1]) == WALL  # border, wall
    assert tuple(image[2 * tile + 1, 3 * tile + 1]) == GOAL
    agent = image[2 * tile : 3 * tile, 2 * tile : 3 * tile].reshape(-1, 3)
    assert (agent == AGENT).all(-1).sum() > tile and (agent == FLOOR).all(-1).sum() > tile


def test_foraging_level_image_is_render_level_pixel_for_pixel():
    """The host-side NumPy drawer of a Level-Based Foraging level (what the screenshots use)
    draws exactly ``env.render_level``'s picture at its 32 pixels per cell."""
    import lamella.envs
    from lamella.envs.multi_agent.lbf import render as lbf_render
    from lamella.ued.levels import level_family

    env, params = lamella.envs.make("Foraging-8x8-2p-2f-v3", autoreset=False)
    image = level_family(env, params).level_image
    for seed in (3, 4):
        level = jax.device_get(env.sample_level(jax.random.key(seed), params))
        np.testing.assert_array_equal(
            image(level, lbf_render.CELL), np.asarray(env.render_level(level, params))
        )
    # Without the env's size, the grid is the smallest that holds the agents and the food.
    assert screenshots.level_image(level, 4).shape[0] <= 8 * 4
    with pytest.raises(TypeError, match="level_image"):
        screenshots.level_image(object())


def test_level_grid_lays_out_every_level():
    levels = jax.device_get(sample(5))
    grid = screenshots.level_grid(levels, tile=4, columns=3)
    cell = 7 * 4  # (5 + 2) cells of 4 pixels
    assert grid.shape == (2 * (cell + 2) + 2, 3 * (cell + 2) + 2, 3)
    for index in range(5):
        r, c = divmod(index, 3)
        one = jax.tree.map(lambda x, i=index: x[i], levels)
        block = grid[
            2 + r * (cell + 2) : 2 + r * (cell + 2) + cell, 2 + c * (cell + 2) : 2 + c * (cell + 2) + cell
        ]
        np.testing.assert_array_equal(block, screenshots.level_image(one, 4))
    with pytest.raises(ValueError, match="no levels"):
        screenshots.level_grid(jax.tree.map(lambda x: x[:0], levels))


def test_recorder_writes_each_kind_once_per_interval(tmp_path):
    """Iterations 0..5 with branches new, replay, new, new, replay, mutate and every=2: the
    first batch of each kind in each interval, and the buffer's best levels, per seed."""
    levels = sample(4)
    buffer = make_level_buffer(8, levels_equal=maze.levels_equal)
    state = buffer.init(jax.tree.map(lambda x: x[0], levels))
    state, _ = buffer.insert(state, levels, jnp.array([0.1, 0.7, 0.3, -jnp.inf]), jnp.zeros(4))
    record = screenshots.make_screenshot_recorder(str(tmp_path), every=2, tile=4)
    branches = jnp.array([0, 1, 0, 0, 1, 2], jnp.int32)

    def run(seed):
        def body(carry, xs):
            iteration, branch = xs
            record(iteration, seed, branch, levels, state)
            return carry, None

        jax.lax.scan(body, 0, (jnp.arange(6, dtype=jnp.int32), branches))
        return seed

    jax.block_until_ready(jax.jit(jax.vmap(run))(jnp.array([4, 9], jnp.uint32)))
    expected = {
        "update_000000_generated.png",
        "update_000000_replayed.png",
        "update_000000_buffer.png",
        "update_000002_generated.png",
        "update_000002_buffer.png",
        "update_000004_replayed.png",
        "update_000004_mutated.png",
        "update_000004_buffer.png",
    }
    assert sorted(os.listdir(tmp_path)) == ["seed_4", "seed_9"]
    for seed in ("seed_4", "seed_9"):
        assert set(os.listdir(tmp_path / seed)) == expected
        for name in expected:
            assert os.path.getsize(tmp_path / seed / name) > 0
    # The buffer picture holds the three stored levels, best score first (0.7, 0.3, 0.1).
    picture = (mpimg.imread(tmp_path / "seed_4" / "update_000000_buffer.png")[..., :3] * 255).round()
    best = jax.tree.map(lambda x: np.asarray(x)[np.array([1, 2, 0])], levels)
    np.testing.assert_array_equal(picture.astype(np.uint8), screenshots.level_grid(best, 4))
    with pytest.raises(ValueError, match="every"):
        screenshots.make_screenshot_recorder(str(tmp_path), every=0)


def test_a_sweeps_configs_draw_into_folders_of_their_own(tmp_path, monkeypatch):
    """A sweep over traced settings trains every config's seed ``s`` in one program: the runner
    hands the recorder its swept fields, and each config's pictures go to
    ``<dir>/<field>=<value>,.../seed_<s>/`` (before, every config drew into ``seed_<s>`` and
    only the first config's levels were kept)."""
    import dataclasses

    from lamella.ued.runners import PLRConfig, make_ued_runner

    given = []
    make = screenshots.make_screenshot_recorder
    monkeypatch.setattr(
        screenshots,
        "make_screenshot_recorder",
        lambda *a, **k: given.append(k.get("variant")) or make(*a, **k),
    )
    config = PLRConfig(
        height=5, width=5, n_walls=3, max_episode_steps=12, num_envs=8, num_steps=24, num_minibatches=1,
        recurrent=False, eval_levels=("random",), buffer_size=16, screenshot_every=2,
    )  # fmt: skip
    jax.eval_shape(
        lambda t, c: make_ued_runner(dataclasses.replace(config, temperature=t, ent_coef=c)) and t, 0.3, 0.0
    )
    make_ued_runner(config)
    assert [sorted(v) for v in given] == [["ent_coef", "temperature"], []]

    # Two configs (temperature 0.1 and 0.3), seed 0 each, as the sweep's program vmaps them.
    levels = jax.tree.map(lambda x: x.reshape(2, 2, *x.shape[1:]), sample(4))

    def run(temperature, levels):
        record = make(str(tmp_path), every=2, tile=4, variant={"temperature": temperature})
        record(jnp.int32(0), jnp.uint32(0), jnp.int32(0), levels, None)
        return temperature

    jax.block_until_ready(jax.jit(jax.vmap(run))(jnp.array([0.1, 0.3], jnp.float32), levels))
    assert sorted(os.listdir(tmp_path)) == ["temperature=0.1", "temperature=0.3"]
    for index, name in enumerate(("temperature=0.1", "temperature=0.3")):
        picture = mpimg.imread(tmp_path / name / "seed_0" / "update_000000_generated.png")[..., :3]
        mine = jax.tree.map(lambda x, i=index: np.asarray(x)[i], levels)
        np.testing.assert_array_equal(
            (picture * 255).round().astype(np.uint8), screenshots.level_grid(mine, 4)
        )


def drawn(folder, name):
    return (mpimg.imread(folder / name)[..., :3] * 255).round().astype(np.uint8)


def host_calls(monkeypatch):
    """Run a recorder's host callback here, without compiling: ``calls`` gets each call."""
    calls = []
    monkeypatch.setattr(jax.debug, "callback", lambda host, *args: calls.append((host, args)) or host(*args))
    return calls


def test_pictures_go_to_the_run_directory_the_driver_trains(tmp_path, monkeypatch):
    """``screenshot_dir=""`` (the default) draws into ``<run>/screenshots/``: the programs of a
    sweep over a static setting (``num_envs=4,8``), each its own run directory, no longer share
    one folder (before, the second overwrote the first's pictures); an explicit folder is kept."""
    from lamella.agents import driver
    from lamella.ued.runners import DRConfig

    assert DRConfig().screenshot_dir == ""
    host_calls(monkeypatch)
    first, second = sample(4, seed=1), sample(4, seed=2)
    for program, levels in (("p0", first), ("p1", second)):
        monkeypatch.setattr(driver, "_RUN_DIRECTORY", str(tmp_path / program))
        screenshots.make_screenshot_recorder("", every=2, tile=4)(
            jnp.int32(0), jnp.uint32(0), jnp.int32(0), levels, None
        )
    name = "update_000000_generated.png"
    for program, levels in (("p0", first), ("p1", second)):
        folder = tmp_path / program / "screenshots" / "seed_0"
        np.testing.assert_array_equal(drawn(folder, name), screenshots.level_grid(levels, 4))
    screenshots.make_screenshot_recorder(str(tmp_path / "mine"), every=2, tile=4)(
        jnp.int32(0), jnp.uint32(0), jnp.int32(0), first, None
    )
    assert os.listdir(tmp_path / "mine" / "seed_0") == [name]


def test_a_resumed_run_keeps_the_pictures_of_an_interval_it_began(tmp_path, monkeypatch):
    """A run resumed inside an interval (checkpoint at iteration 4, ``every=3``) keeps the
    interval's first batch drawn before it stopped, as an uninterrupted run does (before, the
    resumed run drew iteration 4's levels and buffer over iteration 3's)."""
    from lamella.ued.buffer import LevelBufferState

    host_calls(monkeypatch)
    levels, other = sample(4, seed=1), sample(4, seed=2)
    zeros = jnp.zeros(4, jnp.int32)
    before = LevelBufferState(
        levels, jnp.array([0.1, 0.7, 0.3, 0.2]), zeros * 1.0, zeros, zeros, jnp.int32(4), jnp.int32(4)
    )
    after = before.replace(scores=jnp.array([0.9, 0.8, 0.1, 0.2]))
    record = screenshots.make_screenshot_recorder(str(tmp_path), every=3, tile=4)
    record(jnp.int32(3), jnp.uint32(0), jnp.int32(0), levels, before)  # the checkpoint is at 4
    resumed = screenshots.make_screenshot_recorder(str(tmp_path), every=3, tile=4)
    for iteration in (4, 6):
        resumed(jnp.int32(iteration), jnp.uint32(0), jnp.int32(0), other, after)
    folder = tmp_path / "seed_0"
    np.testing.assert_array_equal(
        drawn(folder, "update_000003_generated.png"), screenshots.level_grid(levels, 4)
    )
    best = jax.tree.map(lambda x: np.asarray(x)[np.array([1, 2, 3, 0])], levels)
    np.testing.assert_array_equal(drawn(folder, "update_000003_buffer.png"), screenshots.level_grid(best, 4))
    np.testing.assert_array_equal(
        drawn(folder, "update_000006_generated.png"), screenshots.level_grid(other, 4)
    )


def test_recorder_writes_each_picture_once_when_devices_call_it_at_once(tmp_path, monkeypatch):
    """A program split over devices may run the recorder's callback on several threads at once
    (jax 0.7.1, 4 CPU devices): every picture is written once, whole, with no temporary file
    left, and two writers of one path both succeed."""
    levels = sample(4)
    buffer = make_level_buffer(8, levels_equal=maze.levels_equal)
    state = buffer.init(jax.tree.map(lambda x: x[0], levels))
    state, _ = buffer.insert(state, levels, jnp.array([0.1, 0.7, 0.3, -jnp.inf]), jnp.zeros(4))
    calls = []
    monkeypatch.setattr(jax.debug, "callback", lambda host, *args: calls.append((host, args)))
    record = screenshots.make_screenshot_recorder(str(tmp_path), every=2, tile=4)
    record(jnp.int32(0), jnp.uint32(3), jnp.int32(0), levels, state)
    ((host, args),) = calls
    saved = []
    save = screenshots.save_level_grid
    monkeypatch.setattr(screenshots, "save_level_grid", lambda *a, **k: saved.append(a[1]) or save(*a, **k))
    barrier = threading.Barrier(8)

    def device():
        barrier.wait()
        host(*args)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for done in [pool.submit(device) for _ in range(8)]:
            done.result()
    folder = tmp_path / "seed_3"
    assert sorted(os.listdir(folder)) == ["update_000000_buffer.png", "update_000000_generated.png"]
    assert sorted(os.path.basename(path) for path in saved) == sorted(os.listdir(folder))
    picture = (mpimg.imread(folder / "update_000000_generated.png")[..., :3] * 255).round()
    np.testing.assert_array_equal(picture.astype(np.uint8), screenshots.level_grid(levels, 4))

    # The atomic write itself: writers of one path at once each finish, the last one wins.
    grids = [np.full((6, 6, 3), value, np.uint8) for value in range(0, 240, 30)]
    barrier = threading.Barrier(len(grids))

    def writer(grid):
        barrier.wait()
        return screenshots._save_png(grid, str(tmp_path / "same.png"))

    with concurrent.futures.ThreadPoolExecutor(len(grids)) as pool:
        assert set(pool.map(writer, grids)) == {str(tmp_path / "same.png")}
    pixel = round(float(mpimg.imread(tmp_path / "same.png")[0, 0, 0]) * 255)
    assert pixel in {int(grid[0, 0, 0]) for grid in grids}
    assert sorted(os.listdir(tmp_path)) == ["same.png", "seed_3"]


def test_buffer_grid(tmp_path):
    levels = sample(3)
    buffer = make_level_buffer(8)
    state = buffer.init(jax.tree.map(lambda x: x[0], levels))
    with pytest.raises(ValueError, match="no level"):
        screenshots.save_buffer_grid(state, tmp_path / "empty.png")
    state, _ = buffer.insert(state, levels, jnp.array([0.5, 0.2, 0.9]), jnp.zeros(3))
    path = screenshots.save_buffer_grid(state, tmp_path / "buffer.png")
    assert mpimg.imread(path).shape[0] > 50
    with pytest.raises(ValueError, match="index the seed axis"):
        screenshots.save_buffer_grid(jax.tree.map(lambda x: jnp.stack([x, x]), state), tmp_path / "x.png")


def test_buffer_grids_draw_every_member_of_a_sweep(tmp_path, monkeypatch):
    """``buffer_grids`` of a run draws each seed's buffer; of a sweep's program (its checkpoint
    holds every config's seeds, config by config) each config's too, named by its settings as
    the screenshots' folders are (before, only the first config's seeds were drawn)."""
    from lamella.agents import driver
    from lamella.ued.runners import PLRConfig

    buffer = make_level_buffer(8)
    members = []
    for member in range(4):  # 2 configs x 2 seeds; member m holds m + 1 levels
        levels = sample(member + 1, seed=member)
        state = buffer.init(jax.tree.map(lambda x: x[0], levels))
        state, _ = buffer.insert(state, levels, jnp.linspace(0.1, 0.9, member + 1), jnp.zeros(member + 1))
        members.append(state)
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *members)
    config = PLRConfig(height=5, width=5, n_walls=4)
    sweep = {"seeds": [0, 1], "variants": [{"temperature": 0.1}, {"temperature": 0.3}]}
    loaded = driver.LoadedRun("plr", config, None, types.SimpleNamespace(buffer=stacked), sweep)
    monkeypatch.setattr(driver, "load_run", lambda run: loaded)
    paths = screenshots.buffer_grids(tmp_path)
    names = [f"buffer_temperature={t}_seed_{s}.png" for t in (0.1, 0.3) for s in (0, 1)]
    assert paths == [str(tmp_path / name) for name in names]
    heights = [mpimg.imread(path).shape[0] for path in paths]
    assert heights == sorted(heights) and len(set(heights)) > 1, heights  # member m: m + 1 levels
    # A run of one config: one picture per seed, named as before.
    one = loaded._replace(state=types.SimpleNamespace(buffer=jax.tree.map(lambda x: x[:2], stacked)))
    monkeypatch.setattr(driver, "load_run", lambda run: one._replace(metadata={"seeds": [0, 1]}))
    assert screenshots.buffer_grids(tmp_path) == [str(tmp_path / f"buffer_seed_{s}.png") for s in (0, 1)]


def test_score_curves(tmp_path):
    def entry(step, value):
        return {
            "step_count": step,
            "train_score_max_mc": [value],
            "train_score_positive_value_loss": [value / 2],
        }

    runs = {f"seed_{s}": {f"step_{i}": entry(100 * i, 0.1 * i + s) for i in range(1, 4)} for s in range(2)}
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"maze": {"AMaze-13x13-v0": {"plr": runs}}}))
    out = screenshots.plot_score_curves(path)
    assert out == str(tmp_path / "score_curves.png") and os.path.getsize(out) > 0
    with pytest.raises(ValueError, match="no score"):
        screenshots.plot_score_curves(path, scores=["l1_value_loss"])
    path.write_text(json.dumps({"maze": {"t": {"paired": {"seed_0": {"step_1": {"step_count": 1}}}}}}))
    with pytest.raises(
        ValueError, match=r"no train_score_\* metrics.*PAIRED run logs .*train_teacher_return"
    ):
        screenshots.plot_score_curves(path)
