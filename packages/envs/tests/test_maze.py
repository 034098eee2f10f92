"""AMaze: step-by-step parity with minigrid 3.2.0, levels, named mazes, bad input, conformance."""

from __future__ import annotations

import collections
import hashlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from minigrid.core.grid import Grid
from minigrid.core.mission import MissionSpace
from minigrid.core.world_object import Goal, Wall, WorldObj
from minigrid.minigrid_env import MiniGridEnv

import lamella.envs as le
from lamella.envs import maze
from lamella.envs.maze import AMaze, AMazeParams, MazeError, MazeLevel
from lamella.envs.testing import assert_parity_coverage, check_env

LEFT, RIGHT, FORWARD = 0, 1, 2


# Reference -----------------------------------------------------------------------------------


class InjectedMiniGrid(MiniGridEnv):
    """A MiniGrid env whose grid is a lamella level: the interior offset by the border wall."""

    def __init__(self, params: AMazeParams):
        self.level: MazeLevel | None = None
        super().__init__(
            mission_space=MissionSpace(mission_func=lambda: "reach the goal"),
            width=params.width + 2,
            height=params.height + 2,
            max_steps=int(params.max_episode_steps),
            see_through_walls=params.see_through_walls,
            agent_view_size=params.agent_view_size,
        )

    def _gen_grid(self, width: int, height: int) -> None:
        level = self.level
        self.grid = Grid(width, height)
        self.grid.wall_rect(0, 0, width, height)
        for y, x in np.argwhere(np.asarray(level.wall_map)):
            self.grid.set(int(x) + 1, int(y) + 1, Wall())
        gx, gy = (int(v) for v in np.asarray(level.goal_pos))
        self.put_obj(Goal(), gx + 1, gy + 1)
        ax, ay = (int(v) for v in np.asarray(level.agent_pos))
        self.agent_pos = (ax + 1, ay + 1)
        self.agent_dir = int(level.agent_dir)
        self.mission = "reach the goal"

    def reset_to(self, level: MazeLevel) -> dict:
        self.level = level
        obs, _ = self.reset(seed=0)
        return obs


class Marker(WorldObj):
    """Memory's clue and distractor: a solid cell that looks like a goal of its colour."""

    def __init__(self, color: str, distractor: bool):
        super().__init__("goal", color)
        self.distractor = distractor

    def can_overlap(self) -> bool:
        return False


class InjectedMemory(InjectedMiniGrid):
    """MiniGrid with minimax's Memory rules on top (its own code, not minigrid's MemoryEnv): the
    goal is red at the top cell or green at the bottom one, the other cell a solid distractor of
    its colour that ends the episode with reward 0, the solid clue shows the goal's colour."""

    def _gen_grid(self, width: int, height: int) -> None:
        super()._gen_grid(width, height)
        gx, gy = (int(v) for v in np.asarray(self.level.goal_pos))
        top = (gx, gy) == maze.MEMORY_TOP
        self.grid.get(gx + 1, gy + 1).color = "red" if top else "green"
        other = maze.MEMORY_BOTTOM if top else maze.MEMORY_TOP
        self.grid.set(other[0] + 1, other[1] + 1, Marker("green" if top else "red", distractor=True))
        clue = maze.MEMORY_CLUE
        self.grid.set(clue[0] + 1, clue[1] + 1, Marker("red" if top else "green", distractor=False))

    def step(self, action):
        cell = self.grid.get(*self.front_pos)
        obs, reward, terminated, truncated, info = super().step(action)
        if action == self.actions.forward and isinstance(cell, Marker):
            reward, terminated = 0.0, cell.distractor
        return obs, reward, terminated, truncated, info


def take(tree, *index):
    return jax.tree.map(lambda x: x[index], tree)


# Parity --------------------------------------------------------------------------------------

PARITY_CASES = {
    # id: (params, envs, steps, probability of a random action); short horizons, so that episodes
    # end on the time limit too.
    "13x13-view5": (AMazeParams(n_walls=25, max_episode_steps=60), 8, 150, 0.6),
    "7x9-view7-occluded": (
        AMazeParams(
            height=7,
            width=9,
            n_walls=20,
            agent_view_size=7,
            see_through_walls=False,
            replace_wall_pos=False,
            max_episode_steps=40,
        ),
        6,
        150,
        0.5,
    ),
}


def seek_goal(state, params, target=None):
    """Forward when that brings the agent closer to the goal (or ``target``) and is not blocked,
    else turn right."""
    dx = (state.agent_dir == 0).astype(jnp.int32) - (state.agent_dir == 2)
    dy = (state.agent_dir == 1).astype(jnp.int32) - (state.agent_dir == 3)
    x, y = state.agent_pos[0] + dx, state.agent_pos[1] + dy
    gx, gy = state.level.goal_pos if target is None else target
    closer = jnp.abs(gx - x) + jnp.abs(gy - y) < jnp.abs(gx - state.agent_pos[0]) + jnp.abs(
        gy - state.agent_pos[1]
    )
    inside = (x >= 0) & (x < params.width) & (y >= 0) & (y < params.height)
    free = inside & ~state.level.wall_map[jnp.clip(y, 0, params.height - 1), jnp.clip(x, 0, params.width - 1)]
    return jnp.where(closer & free, FORWARD, RIGHT).astype(jnp.int32)


def rollout(params: AMazeParams, num_envs: int, steps: int, explore: float, seed: int, env=None, target=None):
    """lamella's auto-reset rollout on random levels (or ``env``'s), inputs and outputs of every step.

    The policy takes a uniform random action (all 7) with probability ``explore``, else
    :func:`seek_goal`'s (toward ``target(state, env_index)`` if given), so that episodes both
    reach the goal and run out of time.
    """
    env = le.wrappers.AutoReset(AMaze() if env is None else env)
    seek = (
        (lambda s, i: seek_goal(s, params))
        if target is None
        else (lambda s, i: seek_goal(s, params, target(s, i)))
    )

    @jax.jit
    def run(key):
        keys = jax.random.split(key, (steps + 1, num_envs))
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys[0], params)

        def step(carry, key):
            obs, state = carry
            k_explore, k_action = jax.random.split(key[0])
            random = jax.random.randint(k_action, (num_envs,), 0, 7)
            greedy = jax.vmap(seek)(state, jnp.arange(num_envs))
            action = jnp.where(jax.random.uniform(k_explore, (num_envs,)) < explore, random, greedy)
            out = jax.vmap(env.step, in_axes=(0, 0, 0, None))(key, state, action, params)
            return (out[0], out[1]), (out, state, action)

        _, (outs, states_before, actions) = jax.lax.scan(step, (obs, state), keys[1:])
        return obs, state, outs, states_before, actions

    obs0, state0, outs, before, actions = jax.device_get(run(jax.random.key(seed)))
    return actions, (obs0, state0, outs, before)


def check_parity(case, params, num_envs, steps, actions, data, reference_class=InjectedMiniGrid):
    """Replay lamella's rollout in MiniGrid env by env, every observation, reward and flag equal;
    returns what was compared (for the coverage check)."""
    obs0, state0, outs, before = data
    obs, states, rewards, terminated, truncated, info = outs
    compared = collections.defaultdict(list)
    for e in range(num_envs):
        reference = reference_class(params)
        ref_obs = reference.reset_to(take(state0.level, e))
        np.testing.assert_array_equal(obs0["image"][e], ref_obs["image"])
        for t in range(steps):
            state = take(before, t, e)
            assert (np.asarray(reference.agent_pos) == np.asarray(state.agent_pos) + 1).all(), (case, e, t)
            assert reference.agent_dir == int(state.agent_dir)
            ref_obs, ref_reward, ref_term, ref_trunc, _ = reference.step(int(actions[t, e]))
            done = bool(terminated[t, e] or truncated[t, e])
            final = take(info["final_observation"], t, e)
            where = f"{case}: env {e}, step {t}, action {actions[t, e]}"
            np.testing.assert_array_equal(final["image"], ref_obs["image"], err_msg=where)
            assert int(final["agent_dir"]) == ref_obs["direction"], where
            np.testing.assert_allclose(rewards[t, e], ref_reward, atol=1e-6, err_msg=where)
            assert bool(terminated[t, e]) == ref_term, where
            # MiniGrid also reports truncated on a goal reached at the last step; lamella reports
            # the terminal state only.
            assert bool(truncated[t, e]) == (ref_trunc and not ref_term), where
            assert done == (ref_term or ref_trunc), where
            auto_reset = False
            if done:
                # lamella reset to a new random level: MiniGrid on that level gives the same start.
                ref_obs = reference.reset_to(take(states.level, t, e))
                np.testing.assert_array_equal(take(obs, t, e)["image"], ref_obs["image"], err_msg=where)
                assert int(obs["agent_dir"][t, e]) == ref_obs["direction"], where
                auto_reset = True
            else:
                np.testing.assert_array_equal(take(obs, t, e)["image"], ref_obs["image"], err_msg=where)
            for name, value in (
                ("terminated", ref_term),
                ("truncated", ref_trunc),
                ("reward", ref_reward),
                ("auto_reset", auto_reset),
            ):
                compared[name].append(value)
    return compared


def coverage(case, compared):
    return assert_parity_coverage(
        case,
        terminated=np.array(compared["terminated"]),
        truncated=np.array(compared["truncated"]),
        reward=np.array(compared["reward"]),
        auto_reset=np.array(compared["auto_reset"]),
    )


@pytest.mark.parametrize("case", list(PARITY_CASES))
def test_parity_with_minigrid(case):
    params, num_envs, steps, explore = PARITY_CASES[case]
    actions, data = rollout(params, num_envs, steps, explore, seed=len(case))
    counts = coverage(f"AMaze {case}", check_parity(case, params, num_envs, steps, actions, data))
    assert counts.terminations >= 3 and counts.truncations >= 2, counts


def test_memory_parity_with_minigrid():
    """minimax's Memory maze: MiniGrid's dynamics and view, the clue's and goals' colours, the
    distractor ending the episode with reward 0; odd envs walk to the distractor."""
    env, params = maze.named_env("Memory", max_episode_steps=40)
    top, bottom = jnp.asarray(maze.MEMORY_TOP), jnp.asarray(maze.MEMORY_BOTTOM)

    def target(state, index):
        is_top = jnp.all(state.level.goal_pos == top)
        return jnp.where(index % 2 == 1, jnp.where(is_top, bottom, top), state.level.goal_pos)

    num_envs, steps = 8, 120
    actions, data = rollout(params, num_envs, steps, 0.3, seed=5, env=env, target=target)
    compared = check_parity("Memory", params, num_envs, steps, actions, data, InjectedMemory)
    counts = coverage("AMaze Memory", compared)
    rewards, terminated = np.array(compared["reward"]), np.array(compared["terminated"])
    reached, misled = int((terminated & (rewards > 0)).sum()), int((terminated & (rewards == 0)).sum())
    assert reached >= 3 and misled >= 3 and counts.truncations >= 2, (reached, misled, counts)
    goals = {tuple(g) for g in np.asarray(data[2][1].level.goal_pos).reshape(-1, 2).tolist()}
    assert goals == {maze.MEMORY_TOP, maze.MEMORY_BOTTOM}, goals  # both clue colours were played


# Conformance ---------------------------------------------------------------------------------


def test_check_env():
    # The default settings are checked by the gymnasium adapter's checker (test_adapters.py) and
    # the parity test; this covers the others.
    env, params = le.make(
        "AMaze-15x15-v0", see_through_walls=False, replace_wall_pos=False, sample_n_walls=True
    )
    check_env(env, params, num_steps=16)


def test_registered_ids():
    ids = le.registered()
    assert {"AMaze-13x13-v0", "AMaze-15x15-v0"} <= set(ids)
    _, params = le.make("AMaze-13x13-v0")
    assert (params.height, params.width, params.n_walls, params.max_episode_steps) == (13, 13, 60, 250)
    _, params = le.make("AMaze-15x15-v0")
    assert (params.height, params.width, params.n_walls) == (15, 15, 80)
    env, params = maze.named_env("LargeCorridor", see_through_walls=False)
    assert (params.height, params.width, params.max_episode_steps) == (19, 19, 882)
    assert not params.see_through_walls
    _, state = env.reset(jax.random.key(0), params)
    assert int(state.level.wall_map.sum()) == 161
    assert le.registry.env_family("AMaze-13x13-v0") == "maze"


def test_step_never_computes_a_reset():
    calls = []

    def sampler(key):
        calls.append(1)
        return maze.named_maze("Labyrinth")[0]

    env = AMaze(level_sampler=sampler, max_episode_steps=450)
    params = env.default_params
    obs, state = env.reset(jax.random.key(0), params)
    assert len(calls) == 1
    jax.jit(lambda s: env.step(jax.random.key(1), s, 2, params)).lower(state)
    assert len(calls) == 1, "the bare step traced the level sampler"


class EveryEnvReset(AMaze):
    """AMaze without ``reset_where``: ``AutoReset`` draws a level for every env and selects."""

    reset_where = None


def test_auto_reset_draws_levels_only_for_done_envs_same_states():
    """Under vmap ``AutoReset(AMaze)`` draws levels for the done envs only (``AMaze.reset_where``'s
    batching rule, in chunks of 4 for 24 envs): every output equals the select over a level drawn
    for every env, bit for bit, with no env, some, more than a chunk and all envs ending."""
    num_envs, params = 24, AMazeParams(height=7, width=7, n_walls=12, max_episode_steps=20)
    new, every = le.wrappers.AutoReset(AMaze()), le.wrappers.AutoReset(EveryEnvReset())
    keys = jax.random.split(jax.random.key(0), (2, num_envs))
    _, state = jax.vmap(new.reset, in_axes=(0, None))(keys[0], params)
    actions = jnp.arange(num_envs, dtype=jnp.int32) % 7

    def stepper(env):
        return jax.jit(lambda s: jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys[1], s, actions, params))

    step_new, step_every = stepper(new), stepper(every)
    ending = {"none": [], "some": [1, 5, 22], "chunks": list(range(2, 24, 2)), "all": list(range(num_envs))}
    for case, envs in ending.items():
        time = jnp.zeros(num_envs, jnp.int32).at[jnp.asarray(envs, jnp.int32)].set(19)
        got, want = step_new(state.replace(time=time)), step_every(state.replace(time=time))
        assert int(jnp.sum(got[4])) == len(envs), case  # truncated
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_array_equal(a, b, err_msg=case)
    # The rule is what runs (its chunk loop), and a vmap of a vmap gives the same states too.
    batched_step = jax.vmap(new.step, in_axes=(0, 0, 0, None))
    assert "while" in str(jax.make_jaxpr(lambda s: batched_step(keys[1], s, actions, params))(state))
    done = jnp.arange(num_envs) % 3 == 0
    grid = lambda x: x.reshape(2, num_envs // 2, *x.shape[1:])  # noqa: E731

    def select(key, done, state):
        fresh = AMaze().reset(key, params)[1]
        return jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, state)

    nested = jax.jit(jax.vmap(jax.vmap(lambda k, d, s: AMaze().reset_where(k, d, s, params))))
    got = nested(grid(keys[1]), grid(done), jax.tree.map(grid, state))
    want = jax.vmap(select)(keys[1], done, state)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(a.reshape(b.shape), b)


def test_auto_replay_restarts_the_same_level():
    level, params = maze.named_maze("SixteenRooms")
    params = params.replace(max_episode_steps=3)
    env = maze.AutoReplay(AMaze())
    obs, state = env.reset_to_level(jax.random.key(0), level, params)
    step = jax.jit(lambda s, a: env.step(jax.random.key(0), s, a, params))
    for action in (FORWARD, RIGHT):
        obs, state, *_ = step(state, action)
    assert int(state.time) == 2 and not (np.asarray(state.agent_pos) == np.asarray(level.agent_pos)).all()
    obs, state, reward, terminated, truncated, info = step(state, FORWARD)
    assert bool(truncated) and int(state.time) == 0
    np.testing.assert_array_equal(state.agent_pos, level.agent_pos)
    assert bool(maze.levels_equal(state.level, level))
    first, _ = AMaze().reset_to_level(jax.random.key(0), level, params)
    np.testing.assert_array_equal(obs["image"], first["image"])
    with pytest.raises(TypeError, match="bare AMaze"):
        maze.AutoReplay(le.wrappers.AutoReset(AMaze()))


def test_goal_reward_and_agent_moves_onto_goal():
    level = maze.parse_maze(
        """
        >.G
        ...
        """
    )
    params = AMazeParams(height=2, width=3, n_walls=0, max_episode_steps=10)
    env = AMaze()
    _, state = env.reset_to_level(jax.random.key(0), level, params)
    for action in (FORWARD, 3, FORWARD):
        assert not bool(state.agent_pos[0] == 2)
        obs, state, reward, terminated, truncated, _ = env.step(jax.random.key(0), state, action, params)
    assert bool(terminated) and not bool(truncated)
    np.testing.assert_allclose(reward, 1 - 0.9 * 3 / 10, rtol=1e-6)
    np.testing.assert_array_equal(state.agent_pos, [2, 0])


# Levels --------------------------------------------------------------------------------------


def test_sample_dr_level_distribution():
    keys = jax.random.split(jax.random.key(0), 400)
    exact = AMazeParams(height=7, width=9, n_walls=20, replace_wall_pos=False)
    levels = jax.jit(jax.vmap(lambda k: maze.sample_dr_level(k, exact)))(keys)
    walls = np.asarray(levels.wall_map)
    assert (walls.sum((1, 2)) == 20).all()
    sampled = jax.jit(jax.vmap(lambda k: maze.sample_dr_level(k, exact.replace(sample_n_walls=True))))(keys)
    counts = np.asarray(sampled.wall_map).sum((1, 2))
    assert counts.min() == 0 and counts.max() == 20 and len(np.unique(counts)) == 21
    replaced = jax.jit(jax.vmap(lambda k: maze.sample_dr_level(k, AMazeParams())))(keys)
    counts = np.asarray(replaced.wall_map).sum((1, 2))
    assert 40 < counts.mean() < 58 and counts.max() <= 60  # minimax: 43-58, mean 50.65
    for lv in (levels, sampled, replaced):
        w = np.asarray(lv.wall_map)
        ax, ay = np.asarray(lv.agent_pos).T
        gx, gy = np.asarray(lv.goal_pos).T
        rows = np.arange(len(w))
        assert not w[rows, ay, ax].any() and not w[rows, gy, gx].any()
        assert ((ax != gx) | (ay != gy)).all()
        assert set(np.unique(np.asarray(lv.agent_dir))) == {0, 1, 2, 3}
    # Agent cells cover the grid (uniform placement reaches the corners).
    assert len({(int(x), int(y)) for x, y in np.asarray(levels.agent_pos)}) > 50


def test_sample_dr_level_packed_path_matches_scatter():
    # The DR sampler's packed-bits path (levels._walls_and_placements_packed) against the plain
    # scatter of the draws and the gather placement (levels._place), on the same random words,
    # 13x13: random draws with a random wall count, and (every other key) draws that fill all
    # but 3 cells, so that the placements mostly fall back to the first free cell.
    from lamella.envs.maze import levels as maze_levels

    cells, n, k = 169, 166, 20

    def both(key, dense):
        draws = jnp.floor(jax.random.uniform(key, (n,)) * cells).astype(jnp.int32)
        draws = jnp.where(dense, (jnp.arange(n) + 3) % cells, draws)
        count = jnp.where(dense, n, jax.random.randint(jax.random.fold_in(key, 1), (), 0, n + 1))
        words = jax.random.bits(jax.random.fold_in(key, 2), (2 * k,), jnp.uint32)
        packed = maze_levels._walls_and_placements_packed(draws, count, words, n, cells, k, k)
        kept = jnp.where(jnp.arange(n) < count, draws, cells)
        walls = jnp.zeros((cells,), jnp.bool_).at[kept].set(True, mode="drop")
        agent = maze_levels._place(words[:k], ~walls, k, 0.0)
        goal = maze_levels._place(words[k:], (~walls).at[agent].set(False), k, 0.0)
        return packed, (walls, agent, goal)

    dense = jnp.arange(512) % 2 == 0
    packed, reference = jax.jit(jax.vmap(both))(jax.random.split(jax.random.key(5), 512), dense)
    for got, want in zip(packed, reference):
        np.testing.assert_array_equal(got, want)
    agents = np.asarray(packed[1])
    assert (agents[::2] < 3).all() and (agents[1::2] >= 3).any()  # both kinds of placement ran
    assert (np.asarray(packed[0]).sum(1)[1::2] < 100).any()  # sparse walls too
    # End to end, minimax's 13x13 DR setting: the sampler and its scatter version give the same levels.
    keys = jax.random.split(jax.random.key(6), 256)
    got = jax.jit(jax.vmap(maze_levels._sample_dr_level, in_axes=(0, None)))(keys, AMazeParams())
    want = jax.jit(jax.vmap(maze_levels._sample_dr_level_scatter, in_axes=(0, None)))(keys, AMazeParams())
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_array_equal(a, b)


def test_mutate_level():
    params = AMazeParams(height=9, width=9, n_walls=20)
    keys = jax.random.split(jax.random.key(1), 200)
    base = jax.vmap(lambda k: maze.sample_dr_level(k, params))(keys)
    mutate = jax.jit(jax.vmap(lambda k, lv, n: maze.mutate_level(k, lv, params, n), in_axes=(0, 0, None)))
    same = mutate(keys, base, 0)
    assert bool(maze.levels_equal(same, base).all())
    edited = mutate(jax.random.split(jax.random.key(2), 200), base, 4)
    changed_cells = np.asarray(edited.wall_map != base.wall_map).sum((1, 2))
    moved_goal = (np.asarray(edited.goal_pos) != np.asarray(base.goal_pos)).any(1)
    moved_agent = (np.asarray(edited.agent_pos) != np.asarray(base.agent_pos)).any(1)
    assert (changed_cells + moved_goal + moved_agent <= 4).all()
    assert changed_cells.max() >= 2 and moved_goal.any() and moved_agent.any()
    assert not bool(maze.levels_equal(edited, base).all())
    np.testing.assert_array_equal(edited.agent_dir, base.agent_dir)
    w = np.asarray(edited.wall_map)
    rows = np.arange(200)
    ax, ay = np.asarray(edited.agent_pos).T
    gx, gy = np.asarray(edited.goal_pos).T
    assert not w[rows, ay, ax].any() and not w[rows, gy, gx].any() and ((ax != gx) | (ay != gy)).all()
    with pytest.raises(MazeError, match="13x13"):
        maze.mutate_level(jax.random.key(0), take(base, 0), AMazeParams(), 1)
    # A count that is not a whole number >= 0: the loop would fail inside (float bounds) or cut it.
    for count in (2.5, True, np.float32(2.5), jnp.float32(2.0), -1, jnp.int32(-1)):
        with pytest.raises(MazeError, match="mutate_level: num_edits must be an integer >= 0"):
            maze.mutate_level(jax.random.key(0), take(base, 0), params, count)


def test_levels_equal_broadcasts_and_counts_direction():
    level, _ = maze.named_maze("Labyrinth")
    other, _ = maze.named_maze("LabyrinthFlipped")
    batch = jax.tree.map(lambda a, b: jnp.stack([a, b, a]), level, other)
    np.testing.assert_array_equal(maze.levels_equal(batch, level), [True, False, True])
    assert not bool(maze.levels_equal(level, level.replace(agent_dir=jnp.int32(1))))


def test_parse_format_round_trip():
    text = "#.G\n>..\n.#."
    level = maze.parse_maze(text)
    assert maze.format_maze(level) == text
    assert level.wall_map.shape == (3, 3) and level.wall_map.dtype == jnp.bool_
    np.testing.assert_array_equal(level.goal_pos, [2, 0])
    np.testing.assert_array_equal(level.agent_pos, [0, 1])


@pytest.mark.parametrize(
    "text, message",
    [
        ("..G\n>.", "row 1 has 2 cells but row 0 has 3"),
        ("...\n>..", "exactly one goal 'G', found 0"),
        ("G.G\n>..", r"found 2 \(at x=0, y=0, x=2, y=0\)"),
        ("G..\n...", "exactly one agent .*found 0"),
        ("G>.\n..<", r"found 2 \(at x=1, y=0, x=2, y=1\)"),
        ("G>.\n.x.", "unknown character 'x' at row 1, column 1"),
        ("\n\n", "empty"),
    ],
)
def test_parse_errors(text, message):
    with pytest.raises(MazeError, match=message):
        maze.parse_maze(text)


def test_level_that_does_not_fit_errors():
    level, _ = maze.named_maze("LargeCorridor", jax.random.key(0))
    env, params = le.make("AMaze-13x13-v0")
    with pytest.raises(MazeError, match=r"shape \(19, 19\).*13x13 maze.*AMazeParams\(height=19, width=19\)"):
        env.reset_to_level(jax.random.key(0), level, params)
    with pytest.raises(MazeError, match="agent_view_size must be an odd int"):
        AMaze(agent_view_size=4)
    with pytest.raises(MazeError, match=r"n_walls must be an int in \[0, 23\]"):
        AMaze(height=5, width=5, n_walls=24)
    with pytest.raises(TypeError, match="unknown setting"):
        AMaze(heigth=5)


# Named mazes ---------------------------------------------------------------------------------

# From ../shared reference (minimax's layouts): size, walls, agent, dir, goal, horizon, minimum
# actions from the start pose, and the SHA-256 prefix of the row-major 0/1 wall digits.
FIXED = {
    "SixteenRooms": (13, 46, (1, 1), 0, (11, 11), 450, 26, "c1fc81240baa5190"),
    "SixteenRooms2": (13, 53, (1, 1), 0, (11, 11), 450, 28, "d301ee48880de310"),
    "Labyrinth": (13, 72, (0, 12), 0, (6, 6), 450, 113, "a23aa3b1ad4c1080"),
    "LabyrinthFlipped": (13, 72, (12, 12), 2, (6, 6), 450, 113, "f6ea2ad32cc9aa8e"),
    "Labyrinth2": (13, 72, (0, 0), 0, (6, 6), 450, 113, "570d68a5c6ae23fc"),
    "StandardMaze": (13, 73, (6, 0), 0, (6, 12), 450, 54, "e78692239ef616d8"),
    "StandardMaze2": (13, 72, (0, 6), 0, (12, 4), 450, 73, "92d4ae9be074cc23"),
    "StandardMaze3": (13, 71, (3, 0), 0, (12, 6), 450, 54, "d957ff984b6ae854"),
}


def min_actions(level: MazeLevel) -> int:
    """Fewest left/right/forward actions from the start pose to the goal (BFS); -1 if unreachable."""
    walls = np.asarray(level.wall_map)
    height, width = walls.shape
    goal = tuple(int(v) for v in np.asarray(level.goal_pos))
    start = (*(int(v) for v in np.asarray(level.agent_pos)), int(level.agent_dir))
    vectors = [(1, 0), (0, 1), (-1, 0), (0, -1)]
    seen, frontier = {start: 0}, collections.deque([start])
    while frontier:
        x, y, d = frontier.popleft()
        if (x, y) == goal:
            return seen[(x, y, d)]
        nx, ny = x + vectors[d][0], y + vectors[d][1]
        moves = [(x, y, (d + 1) % 4), (x, y, (d + 3) % 4)]
        if 0 <= nx < width and 0 <= ny < height and not walls[ny, nx]:
            moves.append((nx, ny, d))
        for move in moves:
            if move not in seen:
                seen[move] = seen[(x, y, d)] + 1
                frontier.append(move)
    return -1


def fingerprint(level: MazeLevel) -> str:
    digits = "".join("1" if w else "0" for w in np.asarray(level.wall_map).reshape(-1))
    return hashlib.sha256(digits.encode()).hexdigest()[:16]


@pytest.mark.parametrize("name", list(FIXED))
def test_fixed_named_mazes(name):
    size, walls, agent, direction, goal, horizon, actions, digest = FIXED[name]
    level, params = maze.named_maze(name)
    assert level.wall_map.shape == (size, size) and (params.height, params.width) == (size, size)
    assert int(level.wall_map.sum()) == walls and fingerprint(level) == digest
    assert tuple(np.asarray(level.agent_pos)) == agent and int(level.agent_dir) == direction
    assert tuple(np.asarray(level.goal_pos)) == goal and params.max_episode_steps == horizon
    assert min_actions(level) == actions  # optimal return 1 - 0.9 * actions / horizon


@pytest.mark.parametrize(
    "name, size, walls, digest, goals, horizon",
    [
        ("SmallCorridor", 13, 71, "7eb893d01c649962", {(2 * k, y) for k in range(1, 6) for y in (5, 7)}, 450),
        (
            "LargeCorridor",
            19,
            161,
            "91ec6e86284c0393",
            {(2 * k, y) for k in range(1, 9) for y in (8, 10)},
            882,
        ),
    ],
)
def test_corridors(name, size, walls, digest, goals, horizon):
    sample, params = maze.named_maze_sampler(name)
    levels = jax.jit(jax.vmap(sample))(jax.random.split(jax.random.key(0), 200))
    assert (params.height, params.width, params.max_episode_steps) == (size, size, horizon)
    first = take(levels, 0)
    assert int(first.wall_map.sum()) == walls and fingerprint(first) == digest
    assert {tuple(int(v) for v in g) for g in np.asarray(levels.goal_pos)} == goals
    assert (np.asarray(levels.agent_pos) == [0, size // 2]).all() and (
        np.asarray(levels.agent_dir) == 0
    ).all()
    with pytest.raises(MazeError, match="pass a key"):
        maze.named_maze(name)


def connected(walls: np.ndarray) -> bool:
    free = np.argwhere(~walls)
    start = tuple(free[0])
    seen, frontier = {start}, [start]
    while frontier:
        y, x = frontier.pop()
        for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
            inside = 0 <= ny < walls.shape[0] and 0 <= nx < walls.shape[1]
            if inside and not walls[ny, nx] and (ny, nx) not in seen:
                seen.add((ny, nx))
                frontier.append((ny, nx))
    return len(seen) == len(free)


@pytest.mark.parametrize(
    "name, size, horizon",
    [("PerfectMaze", 13, 450), ("PerfectMazeXL", 101, 21218)],
)
def test_perfect_mazes(name, size, horizon):
    sample, params = maze.named_maze_sampler(name)
    count = 2 if size > 50 else 20
    levels = jax.jit(jax.vmap(sample))(jax.random.split(jax.random.key(3), count))
    assert (params.height, params.width, params.max_episode_steps) == (size, size, horizon)
    rooms = (size // 2 + 1) ** 2
    for i in range(count):
        walls = np.asarray(levels.wall_map[i])
        # A spanning tree of the rooms: rooms + (rooms - 1) free cells, all connected.
        assert (~walls).sum() == 2 * rooms - 1 and connected(walls), (name, i)
        assert min_actions(take(levels, i)) > 0
    assert not bool(maze.levels_equal(take(levels, 0), take(levels, 1)))


def test_four_rooms_and_crossing():
    sample, params = maze.named_maze_sampler("FourRooms")
    levels = jax.jit(jax.vmap(sample))(jax.random.split(jax.random.key(4), 100))
    assert (params.height, params.max_episode_steps) == (17, 250)
    assert (np.asarray(levels.wall_map).sum((1, 2)) == 29).all()
    assert all(connected(np.asarray(w)) for w in levels.wall_map[:10])
    assert ((np.asarray(levels.agent_pos) != np.asarray(levels.goal_pos)).any(1)).all()
    sample, params = maze.named_maze_sampler("Crossing")
    levels = jax.jit(jax.vmap(sample))(jax.random.split(jax.random.key(5), 50))
    assert (params.height, params.max_episode_steps) == (9, 484)
    assert all(min_actions(take(levels, i)) > 0 for i in range(50))
    assert len({fingerprint(take(levels, i)) for i in range(50)}) > 10


def test_memory_maze_level():
    sample, params = maze.named_maze_sampler("Memory")
    assert (params.height, params.width, params.max_episode_steps, params.agent_view_size) == (15, 15, 250, 5)
    assert params.memory
    level = maze.named_maze("Memory", jax.random.key(0))[0]
    # minimax's 47 walls (its clue and goal cells are placed by the rules, not walls here).
    assert int(level.wall_map.sum()) == 47 and fingerprint(level) == "045e4455ef7c0ff7"
    assert tuple(np.asarray(level.agent_pos)) == (0, 7) and int(level.agent_dir) == 0
    # The start view shows the clue on the agent's left, in the goal's colour.
    for goal, colour in ((maze.MEMORY_TOP, 0), (maze.MEMORY_BOTTOM, 1)):
        obs, _ = maze.named_env("Memory")[0].reset_to_level(
            jax.random.key(0), level.replace(goal_pos=jnp.asarray(goal, jnp.int32)), params
        )
        assert tuple(np.asarray(obs["image"])[1, 4]) == (8, colour, 0), goal
        frame = np.asarray(maze.render_level(level.replace(goal_pos=jnp.asarray(goal, jnp.int32)), params))
        clue = tuple(frame[(6 + 1) * 8 + 1, (0 + 1) * 8 + 1])
        assert clue == ((255, 0, 0) if colour == 0 else (0, 255, 0)), (goal, clue)


def test_named_maze_errors():
    with pytest.raises(MazeError, match=r"unknown named maze 'Labyrinth3'.*SixteenRooms"):
        maze.named_maze("Labyrinth3")
    with pytest.raises(MazeError, match="pass a key"):
        maze.named_maze("Memory")
    with pytest.raises(MazeError, match="fixed on a 15x15 grid"):
        AMaze(memory=True)
    assert len(maze.NAMED_MAZES) == 16
    # PerfectMazeMedium is the generator of the test above at 19x19 (its params only, no compile).
    params = maze.named_maze_sampler("PerfectMazeMedium")[1]
    assert (params.height, params.width, params.max_episode_steps) == (19, 19, 882)


# Rendering -----------------------------------------------------------------------------------


def test_render_level_and_env_render():
    level, params = maze.named_maze("Labyrinth")
    frame = np.asarray(jax.jit(lambda lv: maze.render_level(lv, params, tile_size=4))(level))
    assert frame.shape == (60, 60, 3) and frame.dtype == np.uint8
    cell = lambda x, y: frame[(y + 1) * 4 + 2, (x + 1) * 4 + 1]  # noqa: E731
    assert tuple(frame[0, 0]) == (100, 100, 100)  # border wall
    assert tuple(cell(6, 6)) == (0, 255, 0)  # goal
    assert tuple(cell(1, 1)) == (100, 100, 100) and tuple(cell(0, 0)) == (0, 0, 0)
    assert tuple(cell(0, 12)) == (255, 0, 0)  # the agent's triangle
    env = AMaze()
    _, state = env.reset_to_level(jax.random.key(0), level, params)
    shown = np.asarray(env.render(state, params))
    assert shown.shape == (120, 120, 3)
    # The view (5 cells ahead, 2 to each side) is highlighted: the floor ahead of the agent is lighter.
    assert tuple(shown[(12 + 1) * 8 + 4, (2 + 1) * 8 + 4]) == (60, 60, 60)


# Teacher ---------------------------------------------------------------------------------------


def test_teacher_builds_the_level_it_was_told():
    params = AMazeParams(height=5, width=6, n_walls=4)
    teacher = maze.AMazeTeacher(noise_dim=3)
    check_env(teacher, params, num_steps=12)
    assert teacher.num_steps(params) == 6 and teacher.action_space(params).n == 30
    step = jax.jit(lambda s, a, k: teacher.step(k, s, a, params))
    obs, state = teacher.reset(jax.random.key(0), params)
    cell = lambda x, y: y * 6 + x  # noqa: E731
    # Walls at (1, 0), (1, 0) again (no change), (2, 3), (4, 4); goal on the wall at (4, 4); agent at (0, 0).
    actions = [cell(1, 0), cell(1, 0), cell(2, 3), cell(4, 4), cell(4, 4), cell(0, 0)]
    for t, action in enumerate(actions):
        obs, state, reward, terminated, truncated, _ = step(state, action, jax.random.key(t))
        assert float(reward) == 0.0 and not bool(truncated)
        assert bool(terminated) == (t == 5)
        assert obs["noise"].shape == (3,) and int(obs["time"]) == t + 1
    level = teacher.level_of(state)
    expected = maze.parse_maze(
        f"""
        {">v<^"[int(state.agent_dir)]}#....
        ......
        ......
        ..#...
        ....G.
        """
    )
    assert bool(maze.levels_equal(level, expected)), maze.format_maze(level)
    image = np.asarray(obs["image"])
    assert image.shape == (7, 8, 3)
    assert tuple(image[1, 1]) == (10, 0, int(state.agent_dir)) and tuple(image[5, 5]) == (8, 1, 0)
    assert tuple(image[1, 2]) == (2, 5, 0) and tuple(image[0, 0]) == (2, 5, 0)
    # The student plays it.
    AMaze().reset_to_level(jax.random.key(0), level, params)


def test_teacher_agent_on_goal_moves_elsewhere():
    params = AMazeParams(height=3, width=3, n_walls=1)
    teacher = maze.AMazeTeacher()
    _, state = teacher.reset(jax.random.key(1), params)
    for t, action in enumerate([0, 4, 4]):  # wall (0, 0), goal (1, 1), agent asked on the goal
        _, state, *_ = teacher.step(jax.random.key(t), state, action, params)
    level = teacher.level_of(state)
    assert tuple(np.asarray(level.goal_pos)) == (1, 1)
    assert tuple(np.asarray(level.agent_pos)) not in {(1, 1), (0, 0)}
    frame = teacher.render(state, params)
    assert frame.shape == (40, 40, 3)
