"""Multi-Robot Warehouse: step-by-step parity with rware 2.0.0, rules on hand-built states, conformance."""

from __future__ import annotations

import collections
import warnings

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gymnasium_check_env
from rware.warehouse import Direction, RewardType, Warehouse

import lamella.envs as le
from lamella.envs.adapters.gymnasium import GymnasiumEnv
from lamella.envs.multi_agent import rware as lamella_rware
from lamella.envs.multi_agent.rware import RobotWarehouse, RobotWarehouseState
from lamella.envs.testing import assert_parity_coverage, check_env

NOOP, FORWARD, LEFT, RIGHT, TOGGLE = range(5)
UP, DOWN, WEST, EAST = range(4)  # headings (rware's Direction values)
_STEP = {UP: (-1, 0), DOWN: (1, 0), WEST: (0, -1), EAST: (0, 1)}


# Reading and writing rware's state ------------------------------------------------------------


def snapshot(reference: Warehouse) -> dict[str, np.ndarray]:
    """lamella's state fields for rware's current state (row = rware's y, column = its x)."""
    carried = {a.carrying_shelf.id for a in reference.agents if a.carrying_shelf is not None}
    grid = np.zeros(reference.grid_size, np.int32)
    for shelf in reference.shelfs:
        if shelf.id not in carried:
            grid[shelf.y, shelf.x] = shelf.id
    messages = (
        {"messages": np.array([a.message for a in reference.agents], np.int32)} if reference.msg_bits else {}
    )
    return messages | {
        "agent_positions": np.array([[a.y, a.x] for a in reference.agents], np.int32),
        "agent_directions": np.array([a.dir.value for a in reference.agents], np.int32),
        "carried_shelves": np.array(
            [a.carrying_shelf.id if a.carrying_shelf is not None else 0 for a in reference.agents], np.int32
        ),
        "has_delivered": np.array([a.has_delivered for a in reference.agents], bool),
        "shelf_grid": grid,
        "request_queue": np.array([s.id for s in reference.request_queue], np.int32).reshape(-1),
        "inactive_steps": np.array(reference._cur_inactive_steps, np.int32),
        "time": np.array(reference._cur_steps, np.int32),
    }


def inject(reference: Warehouse, state: dict[str, np.ndarray]) -> None:
    """Put a lamella state (fields as NumPy) into rware (MARL.md §2.6: reuse the agent objects)."""
    for agent, (row, col), heading, carried, delivered in zip(
        reference.agents,
        state["agent_positions"],
        state["agent_directions"],
        state["carried_shelves"],
        state["has_delivered"],
    ):
        agent.y, agent.x, agent.dir = int(row), int(col), Direction(int(heading))
        agent.carrying_shelf = reference.shelfs[carried - 1] if carried else None
        agent.has_delivered = bool(delivered)
        if carried:
            agent.carrying_shelf.y, agent.carrying_shelf.x = int(row), int(col)
    for agent, message in zip(reference.agents, state.get("messages", [])):
        agent.message[:] = message
    for row, col in zip(*np.nonzero(state["shelf_grid"])):
        shelf = reference.shelfs[state["shelf_grid"][row, col] - 1]
        shelf.y, shelf.x = int(row), int(col)
    reference.request_queue = [reference.shelfs[i - 1] for i in state["request_queue"]]
    reference._cur_inactive_steps = int(state["inactive_steps"])
    reference._cur_steps = int(state["time"])
    reference._recalc_grid()


def as_state(fields: dict[str, np.ndarray]) -> RobotWarehouseState:
    return RobotWarehouseState(**{name: jnp.asarray(value) for name, value in fields.items()})


class RecordingRandom:
    """rware's generator, recording each request replacement: (index among the candidates, count)."""

    def __init__(self, generator: np.random.Generator):
        self.generator = generator
        self.picks: list[tuple[int, int, int]] = []

    def choice(self, options, *args, **kwargs):
        picked = self.generator.choice(options, *args, **kwargs)
        if isinstance(options, list) and not args and not kwargs:  # the step's replacement draw
            self.picks.append((options.index(picked), len(options), picked.id))
        return picked

    def __getattr__(self, name):
        return getattr(self.generator, name)


# A scripted policy that delivers ----------------------------------------------------------


def _distances(passable: np.ndarray, sources: list[tuple[int, int]]) -> np.ndarray:
    """Breadth-first distance (4-neighbour moves through passable cells) to the nearest source."""
    rows, cols = passable.shape
    distance = np.full((rows, cols), -1)
    queue = collections.deque()
    for source in sources:
        distance[source] = 0
        queue.append(source)
    while queue:
        row, col = queue.popleft()
        for d_row, d_col in _STEP.values():
            r, c = row + d_row, col + d_col
            if 0 <= r < rows and 0 <= c < cols and distance[r, c] < 0 and passable[r, c]:
                distance[r, c] = distance[row, col] + 1
                queue.append((r, c))
    return distance


def _toward(agent, distance: np.ndarray) -> int:
    """The action that turns the agent toward, or moves it onto, a neighbour closer to the sources."""
    here = distance[agent.y, agent.x]
    rows, cols = distance.shape
    options = []
    for heading, (d_row, d_col) in _STEP.items():
        r, c = agent.y + d_row, agent.x + d_col
        if 0 <= r < rows and 0 <= c < cols and 0 <= distance[r, c] < here:
            options.append(heading)
    if here < 0 or not options:
        return NOOP
    if agent.dir.value in options:
        return FORWARD
    clockwise = [UP, EAST, DOWN, WEST]
    turn = (clockwise.index(options[0]) - clockwise.index(agent.dir.value)) % 4
    return RIGHT if turn in (1, 2) else LEFT


def scripted_actions(reference: Warehouse, rng: np.random.Generator, explore: float) -> list[int]:
    """Fetch a requested shelf, carry it to a goal, put it back on a free slot; random with p=explore."""
    state = snapshot(reference)
    standing, highway = state["shelf_grid"] > 0, reference.highways.astype(bool)
    requested = set(state["request_queue"].tolist())
    goals = [(y, x) for x, y in reference.goals]
    fetch = [tuple(c) for c in np.argwhere(np.isin(state["shelf_grid"], list(requested)))]
    free_slots = [tuple(c) for c in np.argwhere(~highway & ~standing)]
    maps = {}
    actions = []
    for agent, carried in zip(reference.agents, state["carried_shelves"]):
        if rng.random() < explore:
            actions.append(int(rng.integers(0, 5)))
            continue
        if not carried:
            kind, sources, passable = "fetch", fetch, np.ones_like(standing)
        elif carried in requested:
            kind, sources, passable = "deliver", goals, ~standing
        else:
            kind, sources, passable = "return", free_slots, ~standing
        if kind != "deliver" and (agent.y, agent.x) in sources:
            actions.append(TOGGLE)
            continue
        if kind not in maps:
            maps[kind] = _distances(passable, sources) if sources else np.full(standing.shape, -1)
        actions.append(_toward(agent, maps[kind]))
    return actions


# Which steps rware resolves arbitrarily -------------------------------------------------------


def chain_tie(state: dict[str, np.ndarray], actions, shape: tuple[int, int]) -> bool:
    """Whether two equally long chains of agents compete for one free cell (rware: arbitrary)."""
    rows, cols = shape
    positions = [tuple(p) for p in state["agent_positions"]]
    grid = state["shelf_grid"]
    targets = []
    for (row, col), heading, carried, action in zip(
        positions, state["agent_directions"], state["carried_shelves"], actions
    ):
        target = (row, col)
        if action == FORWARD:
            d_row, d_col = _STEP[int(heading)]
            target = (min(max(row + d_row, 0), rows - 1), min(max(col + d_col, 0), cols - 1))
            if carried and target != (row, col) and grid[target]:
                target = (row, col)
        targets.append(target)
    occupant = {p: i for i, p in enumerate(positions)}
    depth: dict[int, int] = {}

    def chain_end(i: int):
        seen = []
        while True:
            if targets[i] == positions[i] or i in seen:
                return None  # ends in a cycle (a standing agent is a cycle of one)
            seen.append(i)
            if targets[i] not in occupant:
                return targets[i]
            i = occupant[targets[i]]

    ends = {i: chain_end(i) for i in range(len(positions))}
    for i in (i for i, end in ends.items() if end is not None):  # agents from i to the free cell
        j, length = i, 1
        while targets[j] in occupant:
            j, length = occupant[targets[j]], length + 1
        depth[i] = length
    trees = collections.defaultdict(list)
    for i, end in ends.items():
        if end is not None:
            trees[end].append(depth[i])
    return any(sorted(d)[-2:] == [max(d)] * 2 for d in trees.values() if len(d) > 1)


def replacement_draws(reference: Warehouse, before: dict, after: dict, picks: list) -> np.ndarray:
    """lamella's ``draws`` that reproduce rware's request replacements of one step.

    rware picks each replacement uniformly from the shelves not in the queue (in id order);
    ``picks`` holds (index, number of candidates, id) per pick. Replaying the deliveries in goal
    order tells which goal each pick served; the draw is the middle of that index's interval.
    """
    draws, queue, picks = (
        np.full(len(reference.goals), 0.5, np.float32),
        list(before["request_queue"]),
        list(picks),
    )
    carried_on = {tuple(p): c for p, c in zip(after["agent_positions"], after["carried_shelves"])}
    for g, (x, y) in enumerate(reference.goals):
        shelf = carried_on.get((y, x), 0)
        if shelf and shelf in queue:
            index, count, new_id = picks.pop(0)
            assert count == len(reference.shelfs) - len(queue)
            draws[g] = (index + 0.5) / count
            queue[queue.index(shelf)] = new_id
    assert not picks and queue == list(after["request_queue"])
    return draws


# Parity ----------------------------------------------------------------------------------------

# (name, rware constructor kwargs, episodes, exploration of the scripted policy): the registered
# tiny-2ag id with its 500-step limit; small-4ag with two-stage rewards and a shorter limit; a dense
# custom warehouse (8 agents on a 6x10 grid, global reward, sensor range 2, an inactivity limit,
# normalised coordinates), where conflicts between agents are frequent.
PARITY_CASES = [
    ("rware-tiny-2ag-v2", {}, 2, 0.15),
    ("rware-small-4ag-v2", {"max_steps": 150, "reward_type": RewardType.TWO_STAGE}, 2, 0.2),
    (
        "dense",
        dict(
            shelf_columns=3,
            column_height=3,
            shelf_rows=1,
            n_agents=8,
            msg_bits=0,
            sensor_range=2,
            request_queue_size=4,
            max_inactivity_steps=25,
            max_steps=120,
            reward_type=RewardType.GLOBAL,
            normalised_coordinates=True,
        ),
        3,
        0.3,
    ),
    # rware's communication: 2 message bits per agent, random, seen in each other's sensor window.
    (
        "messages",
        dict(
            shelf_columns=3,
            column_height=4,
            shelf_rows=1,
            n_agents=4,
            msg_bits=2,
            sensor_range=1,
            request_queue_size=3,
            max_inactivity_steps=None,
            max_steps=80,
            reward_type=RewardType.INDIVIDUAL,
        ),
        2,
        0.2,
    ),
    # rware's custom layout string: three goals (two in one row), a shelf block against the grid's
    # edge and a lone shelf; upper-case letters and spaces as rware accepts them.
    (
        "layout",
        dict(
            layout="""
            x.xx..XX
            x.xx....
            g......x
            ..xx..xg
            ...G. x..
            """,
            shelf_columns=3,  # required by rware's constructor, ignored with a layout
            column_height=8,
            shelf_rows=1,
            n_agents=4,
            msg_bits=0,
            sensor_range=1,
            request_queue_size=3,
            max_inactivity_steps=None,
            max_steps=100,
            reward_type=RewardType.INDIVIDUAL,
        ),
        3,
        0.25,
    ),
]
_REWARD_NAMES = {
    RewardType.INDIVIDUAL: "individual",
    RewardType.GLOBAL: "global",
    RewardType.TWO_STAGE: "two_stage",
}


def _lamella_env(name: str, kwargs: dict) -> tuple[RobotWarehouse, object]:
    if name.startswith("rware-"):
        overrides = {"max_steps": kwargs["max_steps"]} if "max_steps" in kwargs else {}
        if "reward_type" in kwargs:
            overrides["reward_type"] = _REWARD_NAMES[kwargs["reward_type"]]
        return le.make(name, autoreset=False, **overrides)
    if "layout" in kwargs:  # rware ignores its (required) shelf arguments then; lamella refuses them
        env = RobotWarehouse(
            n_agents=kwargs["n_agents"],
            sensor_range=kwargs["sensor_range"],
            request_queue_size=kwargs["request_queue_size"],
            reward_type=_REWARD_NAMES[kwargs["reward_type"]],
            max_steps=kwargs["max_steps"],
            layout=kwargs["layout"],
        )
        return env, env.default_params
    env = RobotWarehouse(
        n_agents=kwargs["n_agents"],
        column_height=kwargs["column_height"],
        sensor_range=kwargs["sensor_range"],
        request_queue_size=kwargs["request_queue_size"],
        shelf_rows=kwargs["shelf_rows"],
        shelf_columns=kwargs["shelf_columns"],
        reward_type=_REWARD_NAMES[kwargs["reward_type"]],
        normalised_coordinates=kwargs.get("normalised_coordinates", False),
        max_steps=kwargs["max_steps"],
        max_inactivity_steps=kwargs["max_inactivity_steps"] or 0,
        msg_bits=kwargs["msg_bits"],
    )
    return env, env.default_params


def _reference(name: str, kwargs: dict) -> Warehouse:
    if name.startswith("rware-"):
        return gymnasium.make(name, **kwargs).unwrapped
    return Warehouse(**kwargs)


def reference_transitions(name: str, kwargs: dict, episodes: int, explore: float, seed: int) -> dict:
    """Play rware with the scripted policy; record every transition (before, action, draws, after)."""
    reference = _reference(name, kwargs)
    rng = np.random.default_rng(seed)
    record = collections.defaultdict(list)
    for episode in range(episodes):
        obs, _ = reference.reset(seed=seed * 100 + episode)
        recorder = reference.np_random = RecordingRandom(reference.np_random)
        record["reset_obs"].append(np.stack(obs))
        record["reset_state"].append(snapshot(reference))
        done = False
        while not done:
            before = snapshot(reference)
            moves = actions = scripted_actions(reference, rng, explore)
            if reference.msg_bits:  # random message bits after each move
                actions = [[move, *rng.integers(0, 2, reference.msg_bits).tolist()] for move in moves]
            recorder.picks.clear()
            obs, reward, done, truncated, _ = reference.step(actions)
            assert truncated is False  # rware reports its limits as done, never as truncated
            after = snapshot(reference)
            record["before"].append(before)
            record["action"].append(np.asarray(actions, np.int32))
            record["draws"].append(replacement_draws(reference, before, after, recorder.picks))
            record["after"].append(after)
            record["obs"].append(np.stack(obs))
            record["reward"].append(np.asarray(reward, np.float32))
            record["done"].append(bool(done))
            record["tie"].append(chain_tie(before, moves, reference.grid_size))
    return record


def _stack(states: list[dict]) -> dict[str, np.ndarray]:
    return {name: np.stack([s[name] for s in states]) for name in states[0]}


@pytest.fixture(scope="module")
def parity():
    """Every parity case's reference transitions and lamella's outputs on them (one batched call)."""
    results = []
    for case_index, (name, kwargs, episodes, explore) in enumerate(PARITY_CASES):
        ref = reference_transitions(name, kwargs, episodes, explore, seed=case_index + 1)
        env, params = _lamella_env(name, kwargs)
        before = as_state(_stack(ref["before"]))
        actions = jnp.asarray(np.stack(ref["action"]))
        draws = jnp.asarray(np.stack(ref["draws"]))
        reset_states = as_state(_stack(ref["reset_state"]))

        def compare(before, actions, draws, reset_states, env=env, params=params):
            out = jax.vmap(env.step_with_draws, in_axes=(0, 0, None, 0))(before, actions, params, draws)
            return out, jax.vmap(env.observation_of, in_axes=(0, None))(reset_states, params)

        out, reset_obs = jax.jit(compare)(before, actions, draws, reset_states)
        auto = None
        if case_index == 0:
            # The same transitions through AutoReset (make's default), with keys; the wrapper is
            # the same code for every env, so one case checks it.
            keys = jax.random.split(jax.random.key(case_index), len(ref["action"]))
            wrapped = le.wrappers.AutoReset(env)

            def auto_step(keys, before, actions, env=env, params=params):
                out = jax.vmap(wrapped.step, in_axes=(0, 0, 0, None))(keys, before, actions, params)
                return out, jax.vmap(env.reset, in_axes=(0, None))(keys, params)[0]

            auto = jax.device_get(jax.jit(auto_step)(keys, before, actions))
        results.append((name, env, ref, jax.device_get(out), np.asarray(reset_obs), auto))
    return results


def test_parity_with_rware_step_by_step(parity):
    """About 2000 rware transitions under a scripted policy, each compared from rware's own state.

    Each transition starts from rware's state before the step (injected into lamella), takes the
    same actions and the draws that reproduce rware's request replacements, and must give rware's
    observation, reward and next state exactly (positions, headings, carried and standing shelves,
    queue, has_delivered, counters). rware's ``done`` must be lamella's ``truncated`` for every
    agent (both its limits are time limits), and nothing terminates. Steps where two equally long
    chains of agents compete for one free cell (rware picks arbitrarily, lamella by index) are
    left out of the comparison and counted; lamella's outcome there must still be legal.
    """
    totals = collections.Counter()
    for name, env, ref, out, reset_obs, auto in parity:
        obs, state, reward, terminated, truncated, info = out
        assert info == {}
        np.testing.assert_array_equal(reset_obs, np.stack(ref["reset_obs"]), err_msg=name)
        tie, done = np.asarray(ref["tie"]), np.asarray(ref["done"])
        ref_obs, ref_reward = np.stack(ref["obs"]), np.stack(ref["reward"])
        keep = ~tie
        np.testing.assert_array_equal(np.asarray(obs)[keep], ref_obs[keep], err_msg=name)
        np.testing.assert_array_equal(np.asarray(reward)[keep], ref_reward[keep], err_msg=name)
        for field, value in _stack(ref["after"]).items():
            np.testing.assert_array_equal(
                np.asarray(getattr(state, field))[keep], value[keep], err_msg=f"{name}: {field}"
            )
        assert not np.any(terminated)
        np.testing.assert_array_equal(np.asarray(truncated).all(-1), done, err_msg=name)
        np.testing.assert_array_equal(np.asarray(truncated).any(-1), done, err_msg=name)
        for positions in np.asarray(state.agent_positions)[tie]:  # legal: no two agents on a cell
            assert len({tuple(p) for p in positions}) == len(positions)
        delivered = np.any(ref_reward != 0, -1)
        auto_compared = np.zeros_like(done)
        if auto is not None:
            # Final observation = rware's where no request was drawn (the draw then comes from the
            # key); returned observation = a fresh reset's (same key) where the episode ended.
            (auto_obs, _, _, _, _, auto_info), fresh_obs = auto
            auto_compared = done & keep & ~delivered
            final = np.asarray(auto_info["final_observation"])
            np.testing.assert_array_equal(final[keep & ~delivered], ref_obs[keep & ~delivered])
            np.testing.assert_array_equal(np.asarray(auto_obs)[done], np.asarray(fresh_obs)[done])
            np.testing.assert_array_equal(np.asarray(auto_obs)[~done], final[~done])
        n = env.num_agents
        assert_parity_coverage(
            name,
            terminated=np.zeros((int(keep.sum()), n), bool),
            truncated=np.repeat(done[keep, None], n, 1),
            reward=ref_reward[keep],
            auto_reset=auto_compared,
            never_terminates="rware has no terminal state: both of its limits are truncations in lamella",
            no_auto_reset=None if auto is not None else f"AutoReset is compared on {PARITY_CASES[0][0]}",
        )
        if name == "layout":  # every goal of the custom layout sees a delivery
            after_positions = _stack(ref["after"])["agent_positions"]
            served = {
                tuple(p)
                for p, r in zip(after_positions[keep].reshape(-1, 2), ref_reward[keep].reshape(-1))
                if r > 0
            }
            assert served == {tuple(g) for g in env.goals}, served
        totals["steps"] += len(done)
        totals["ties"] += int(tie.sum())
        totals["deliveries"] += int(delivered[keep].sum())
        moves = np.stack(ref["action"])
        moves = moves[..., 0] if moves.ndim == 3 else moves  # (steps, n, 1 + msg_bits) with messages
        totals["drops"] += int(np.sum((moves == TOGGLE)[keep]))
        if name == "messages":  # the messages reached the observations, not only zeros
            assert np.any(np.asarray(state.messages)[keep]) and not np.all(np.asarray(state.messages)[keep])
    # Ties are rare (MARL.md §2.6: 0.15-0.45 % of random steps; the dense case has more).
    assert totals["ties"] <= 0.02 * totals["steps"], totals
    assert totals["steps"] >= 1500 and totals["deliveries"] >= 30, totals


# Rules on hand-built states, against rware -------------------------------------------------------
#
# The tiny layout (11 rows x 10 columns): highway columns 0, 3, 6, 9 and rows 0, 9, 10; the queue
# columns 4 and 5; shelves on rows 1-8 of columns 1, 2, 7, 8 (ids row-major, 1..32); goals (10, 4)
# and (10, 5).


@pytest.fixture(scope="module")
def tiny4():
    """rware's tiny warehouse with 4 agents and 2 requests, lamella's, and lamella's jitted step."""
    reference = Warehouse(3, 8, 1, 4, 0, 1, 2, None, 500, RewardType.INDIVIDUAL)
    reference.reset(seed=0)
    env = RobotWarehouse("tiny", 4, request_queue_size=2)
    return reference, env, env.default_params, jax.jit(env.step_with_draws)


def hand_state(env: RobotWarehouse, agents, headings, carried=(0, 0, 0, 0), queue=(1, 2), time=0) -> dict:
    grid = env.initial_shelf_grid.copy()
    grid[np.isin(grid, [c for c in carried if c])] = 0
    return {
        "agent_positions": np.asarray(agents, np.int32),
        "agent_directions": np.asarray(headings, np.int32),
        "carried_shelves": np.asarray(carried, np.int32),
        "has_delivered": np.zeros(len(agents), bool),
        "shelf_grid": grid,
        "request_queue": np.asarray(queue, np.int32),
        "inactive_steps": np.array(0, np.int32),
        "time": np.array(time, np.int32),
    }


def step_both(tiny4, fields: dict, actions) -> tuple:
    """Step rware (injected with ``fields``) and lamella from the same state; assert they agree."""
    reference, env, params, step = tiny4
    inject(reference, fields)
    recorder = reference.np_random = RecordingRandom(np.random.default_rng(0))
    obs, reward, done, _, _ = reference.step(list(actions))
    after = snapshot(reference)
    draws = replacement_draws(reference, fields, after, recorder.picks)
    out = step(as_state(fields), jnp.asarray(actions, jnp.int32), params, jnp.asarray(draws))
    np.testing.assert_array_equal(np.asarray(out[0]), np.stack(obs))
    np.testing.assert_array_equal(np.asarray(out[2]), np.asarray(reward, np.float32))
    for field, value in after.items():
        np.testing.assert_array_equal(np.asarray(getattr(out[1], field)), value, err_msg=field)
    return out


FAR = [[0, 9], [2, 0], [4, 9], [6, 0]]  # idle agents out of the way


def test_rotation_of_four_agents_moves_everyone(tiny4):
    # Around the 2x2 block (9, 3), (9, 4), (10, 4), (10, 3): each faces the next one's cell.
    out = step_both(
        tiny4, hand_state(tiny4[1], [[9, 3], [9, 4], [10, 4], [10, 3]], [EAST, DOWN, WEST, UP]), [1] * 4
    )
    np.testing.assert_array_equal(np.asarray(out[1].agent_positions), [[9, 4], [10, 4], [10, 3], [9, 3]])


def test_head_on_swap_blocks_its_whole_chain(tiny4):
    # Agents 0 and 1 face each other; agent 2 follows agent 1: nobody moves.
    fields = hand_state(tiny4[1], [[9, 0], [9, 1], [9, 2], FAR[3]], [EAST, WEST, WEST, UP])
    out = step_both(tiny4, fields, [FORWARD, FORWARD, FORWARD, NOOP])
    np.testing.assert_array_equal(np.asarray(out[1].agent_positions), fields["agent_positions"])


def test_longest_chain_wins_a_free_cell(tiny4):
    # Agent 0 alone and the chain agent 2 -> agent 1 both aim at (9, 4): the chain moves.
    fields = hand_state(tiny4[1], [[9, 5], [8, 4], [7, 4], FAR[0]], [WEST, DOWN, DOWN, UP])
    out = step_both(tiny4, fields, [FORWARD, FORWARD, FORWARD, NOOP])
    np.testing.assert_array_equal(np.asarray(out[1].agent_positions), [[9, 5], [9, 4], [8, 4], FAR[0]])
    # Following into a vacated cell, and stopping behind a standing agent.
    fields = hand_state(tiny4[1], [[9, 0], [9, 1], [9, 7], [9, 8]], [EAST, EAST, EAST, UP])
    out = step_both(tiny4, fields, [FORWARD, FORWARD, FORWARD, NOOP])
    np.testing.assert_array_equal(np.asarray(out[1].agent_positions), [[9, 1], [9, 2], [9, 7], [9, 8]])


def test_carried_shelves_cannot_pass_standing_ones(tiny4):
    env = tiny4[1]
    # Agent 0 carries shelf 1 (home (1, 1)) on row 0 and faces the standing shelf 2 at (1, 2): cancelled.
    # Agent 1 carries shelf 3 toward agent 2, who carries shelf 4 away: both move.
    # Agent 3 (empty) drives under the shelves.
    fields = hand_state(env, [[0, 2], [9, 6], [9, 7], [1, 7]], [DOWN, EAST, EAST, DOWN], carried=(1, 3, 4, 0))
    out = step_both(tiny4, fields, [FORWARD, FORWARD, FORWARD, FORWARD])
    np.testing.assert_array_equal(np.asarray(out[1].agent_positions), [[0, 2], [9, 7], [9, 8], [2, 7]])
    # A carrying agent into an empty agent standing under a shelf: cancelled too.
    fields = hand_state(env, [[5, 0], [5, 1], FAR[2], FAR[3]], [EAST, UP, UP, UP], carried=(9, 0, 0, 0))
    out = step_both(tiny4, fields, [FORWARD, NOOP, NOOP, NOOP])
    np.testing.assert_array_equal(np.asarray(out[1].agent_positions)[:2], [[5, 0], [5, 1]])


def test_loading_unloading_and_turning(tiny4):
    env = tiny4[1]
    home = {
        int(s): tuple(c)
        for c, s in zip(
            np.argwhere(env.initial_shelf_grid), env.initial_shelf_grid[env.initial_shelf_grid > 0]
        )
    }
    # Agent 0 under shelf 5 picks it up; agent 1 carrying shelf 6 on a highway cannot drop it;
    # agent 2 carrying shelf 7 on its empty home slot drops it; agent 3 turns left then right.
    fields = hand_state(env, [home[5], [9, 6], home[7], [4, 9]], [UP, UP, DOWN, UP], carried=(0, 6, 7, 0))
    out = step_both(tiny4, fields, [TOGGLE, TOGGLE, TOGGLE, LEFT])
    np.testing.assert_array_equal(np.asarray(out[1].carried_shelves), [5, 6, 0, 0])
    assert int(out[1].agent_directions[3]) == WEST
    out = step_both(
        tiny4,
        hand_state(env, [home[5], [9, 6], home[7], [4, 9]], [UP, UP, DOWN, EAST]),
        [NOOP, RIGHT, LEFT, RIGHT],
    )
    np.testing.assert_array_equal(np.asarray(out[1].agent_directions), [UP, EAST, EAST, DOWN])


def test_deliveries_on_both_goals_refill_the_queue_in_place(tiny4):
    env = tiny4[1]
    # Agents 0 and 1 carry the requested shelves 2 and 1 onto the two goals in one step.
    fields = hand_state(
        env, [[9, 4], [9, 5], FAR[2], FAR[3]], [DOWN, DOWN, UP, UP], carried=(2, 1, 0, 0), queue=(1, 2)
    )
    out = step_both(tiny4, fields, [FORWARD, FORWARD, NOOP, NOOP])
    np.testing.assert_array_equal(np.asarray(out[2]), [1, 1, 0, 0])
    queue = np.asarray(out[1].request_queue)
    assert len(set(queue.tolist())) == 2 and not set(queue.tolist()) & {1, 2}
    assert int(out[1].inactive_steps) == 0
    # Staying on the goal with the (no longer requested) shelf pays nothing more.
    after = {k: np.asarray(getattr(out[1], k)) for k in fields}
    out = step_both(tiny4, after, [NOOP] * 4)
    np.testing.assert_array_equal(np.asarray(out[2]), [0, 0, 0, 0])
    assert int(out[1].inactive_steps) == 1


def test_ties_go_to_the_chain_whose_farthest_agent_has_the_lowest_index(tiny4):
    reference, env, params, step = tiny4
    # Agents 0 and 1 aim at the free cell (9, 4) from both sides: lamella moves agent 0.
    fields = hand_state(env, [[9, 3], [9, 5], FAR[2], FAR[3]], [EAST, WEST, UP, UP])
    actions = jnp.array([FORWARD, FORWARD, NOOP, NOOP])
    out = step(as_state(fields), actions, params, jnp.full(2, 0.5))
    np.testing.assert_array_equal(np.asarray(out[1].agent_positions)[:2], [[9, 4], [9, 5]])
    swapped = dict(
        fields,
        agent_positions=fields["agent_positions"][[1, 0, 2, 3]],
        agent_directions=fields["agent_directions"][[1, 0, 2, 3]],
    )
    out = step(as_state(swapped), actions, params, jnp.full(2, 0.5))
    np.testing.assert_array_equal(np.asarray(out[1].agent_positions)[:2], [[9, 4], [9, 3]])
    # Two chains of two: agent 3 -> agent 0 and agent 2 -> agent 1 into (9, 4); the chain whose
    # farthest agent has the lower index (agent 2) wins.
    fields = hand_state(env, [[9, 3], [9, 5], [9, 6], [9, 2]], [EAST, WEST, WEST, EAST])
    out = step(as_state(fields), jnp.array([FORWARD] * 4), params, jnp.full(2, 0.5))
    np.testing.assert_array_equal(np.asarray(out[1].agent_positions), [[9, 3], [9, 4], [9, 5], [9, 2]])
    # rware resolves the same tie one way or the other; both are legal outcomes.
    inject(reference, fields)
    reference.step([FORWARD] * 4)
    moved = sorted(snapshot(reference)["agent_positions"].tolist())
    assert moved in (sorted([[9, 4], [9, 3], [9, 5], [9, 6]]), sorted([[9, 3], [9, 4], [9, 5], [9, 2]]))
    assert chain_tie(fields, [FORWARD] * 4, reference.grid_size)


def test_out_of_range_actions_are_noop(tiny4):
    _, env, params, step = tiny4
    fields = hand_state(env, [[9, 3], [9, 5], [2, 1], [4, 9]], [EAST, WEST, UP, DOWN], carried=(0, 0, 0, 3))
    state = as_state(fields)
    noop = step(state, jnp.zeros(4, jnp.int32), params, jnp.full(2, 0.5))
    for bad in ([5, -1, 7, 100], [-5, 5, 9, 2**20]):
        out = step(state, jnp.asarray(bad, jnp.int32), params, jnp.full(2, 0.5))
        jax.tree.map(np.testing.assert_array_equal, out[:5], noop[:5])


# Jumanji's collision rule ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def jumanji_rule():
    env = RobotWarehouse("tiny", 2, collisions="terminate")
    return env, jax.jit(jax.vmap(env.step_with_draws, in_axes=(0, 0, None, None)))


def test_terminate_variant_ends_the_episode_on_collisions(jumanji_rule):
    env, step = jumanji_rule
    cases = [  # (positions, headings, actions, collides)
        ([[9, 3], [9, 5]], [EAST, WEST], [FORWARD, FORWARD], True),  # both onto (9, 4)
        ([[9, 3], [9, 4]], [EAST, WEST], [FORWARD, FORWARD], True),  # head-on swap
        ([[9, 3], [9, 4]], [EAST, EAST], [FORWARD, NOOP], True),  # into a standing agent
        ([[9, 4], [9, 3]], [EAST, EAST], [FORWARD, FORWARD], False),  # leader moves first: no clash
        ([[9, 3], [9, 4]], [EAST, EAST], [FORWARD, FORWARD], True),  # follower first: Jumanji's clash
        ([[9, 3], [9, 6]], [EAST, WEST], [FORWARD, FORWARD], False),
        ([[0, 0], [5, 5]], [UP, WEST], [FORWARD, LEFT], False),  # into the wall, turning
    ]
    states = [hand_state(env, a, h, carried=(0, 0)) for a, h, _, _ in cases]
    # Jumanji's mask: a carrying agent cannot follow another carrying agent (rware would move both).
    cases.append(([[9, 3], [9, 4]], [EAST, EAST], [FORWARD, FORWARD], False))
    states.append(hand_state(env, [[9, 3], [9, 4]], [EAST, EAST], carried=(1, 2)))
    states = as_state(_stack(states))
    actions = jnp.asarray([a for _, _, a, _ in cases])
    out = step(states, actions, env.default_params, jnp.full(2, 0.5))
    expected = np.array([c for *_, c in cases])
    np.testing.assert_array_equal(np.asarray(out[3]), np.stack([expected, expected], -1))
    assert not np.any(np.asarray(out[4]))
    # Without a collision the moves are rware's; the carrying follower stays.
    np.testing.assert_array_equal(np.asarray(out[1].agent_positions)[3], [[9, 5], [9, 4]])
    np.testing.assert_array_equal(np.asarray(out[1].agent_positions)[-1], [[9, 3], [9, 5]])


# Reset, draws, spaces, global state, render ------------------------------------------------------


def test_reset_is_uniform_and_valid():
    env, params = le.make("rware-tiny-4ag-v2", autoreset=False)
    batch = 2048
    obs, states = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(
        jax.random.split(jax.random.key(1), batch), params
    )
    positions, queue = np.asarray(states.agent_positions), np.asarray(states.request_queue)
    assert all(len({tuple(p) for p in positions[b]}) == 4 for b in range(batch))
    assert all(len(set(queue[b])) == 4 for b in range(batch)) and queue.min() >= 1 and queue.max() <= 32
    np.testing.assert_array_equal(
        np.asarray(states.shelf_grid), np.broadcast_to(env.initial_shelf_grid, (batch, 11, 10))
    )
    assert not np.any(np.asarray(states.carried_shelves)) and not np.any(np.asarray(states.time))
    # Cells, headings and requests uniform: chi-square below its 1e-4 quantile (dof 109, 3, 31).
    for values, bins, limit in (
        (positions[..., 0] * 10 + positions[..., 1], 110, 170.0),
        (np.asarray(states.agent_directions), 4, 21.1),
        (queue - 1, 32, 66.6),
    ):
        counts = np.bincount(values.reshape(-1), minlength=bins)
        expected = values.size / bins
        assert ((counts - expected) ** 2 / expected).sum() < limit, counts
    assert bool(jax.vmap(env.observation_space(params).contains)(obs).all())


def test_request_replacement_is_uniform_over_unrequested_shelves():
    env, params = le.make("rware-tiny-2ag-v2", autoreset=False)
    fields = hand_state(env, [[9, 4], [2, 0]], [DOWN, UP], carried=(5, 0), queue=(5, 17))
    keys = jax.random.split(jax.random.key(2), 6000)
    out = jax.jit(jax.vmap(env.step, in_axes=(0, None, None, None)))(
        keys, as_state(fields), jnp.array([FORWARD, NOOP]), params
    )
    new = np.asarray(out[1].request_queue)
    np.testing.assert_array_equal(new[:, 1], 17)  # only the delivered slot changes
    assert not np.isin(new[:, 0], [5, 17]).any()
    counts = np.bincount(new[:, 0], minlength=33)[np.setdiff1d(np.arange(1, 33), [5, 17])]
    expected = 6000 / 30
    assert ((counts - expected) ** 2 / expected).sum() < 63.9  # chi-square 1e-4 quantile, dof 29
    np.testing.assert_array_equal(np.asarray(out[2]), np.broadcast_to([1.0, 0.0], (6000, 2)))


def test_draws_pick_the_kth_unrequested_shelf():
    env = RobotWarehouse("tiny", 4, request_queue_size=5)
    queue = jnp.array([30, 2, 17, 1, 9])
    free = [s for s in range(1, 33) if s not in {30, 2, 17, 1, 9}]
    draws = (np.arange(len(free), dtype=np.float32) + 0.5) / len(free)
    picked = jax.jit(jax.vmap(env._draw_request, in_axes=(None, 0)))(queue, jnp.asarray(draws))
    np.testing.assert_array_equal(np.asarray(picked), free)


def test_global_state_and_spaces(tiny4):
    _, env, params, _ = tiny4
    fields = hand_state(
        env, [[9, 4], [1, 1], FAR[2], FAR[3]], [DOWN, EAST, UP, UP], carried=(2, 0, 0, 0), queue=(2, 1)
    )
    state = as_state(fields)
    global_state = jax.jit(env.global_state)(state, params)
    grid = np.asarray(global_state).reshape(11, 10, 8)
    np.testing.assert_array_equal(
        grid[9, 4], [1, 0, 1, 0, 0, 1, 1, 1]
    )  # agent heading down, carrying requested shelf 2
    np.testing.assert_array_equal(grid[1, 1], [1, 0, 0, 0, 1, 0, 1, 1])  # agent under requested shelf 1
    np.testing.assert_array_equal(grid[1, 2], [0, 0, 0, 0, 0, 0, 0, 0])  # shelf 2's empty home
    np.testing.assert_array_equal(grid[2, 1], [0, 0, 0, 0, 0, 0, 1, 0])  # an unrequested shelf
    assert grid[..., 0].sum() == 4 and grid[..., 6].sum() == 32 and grid[..., 7].sum() == 2
    assert bool(env.global_state_space(params).contains(global_state))
    assert env.action_space(params).shape == (4,) and list(env.action_space(params).nvec) == [5] * 4
    assert env.observation_space(params).shape == (4, 71)
    single, single_params = le.make("rware-tiny-1ag-v2", autoreset=False)
    assert single.num_agents == 1 and single.action_space(single_params).n == 5
    assert single.observation_space(single_params).shape == (71,)


def test_render_shows_floor_shelves_and_agents(tiny4):
    _, env, params, _ = tiny4
    fields = hand_state(
        env, [[9, 4], [5, 0], FAR[2], FAR[3]], [DOWN, EAST, UP, UP], carried=(2, 0, 0, 0), queue=(2, 1)
    )
    frame = np.asarray(jax.jit(env.render)(as_state(fields), params))
    assert frame.shape == (11 * 32, 10 * 32, 3) and frame.dtype == np.uint8
    cell = lambda row, col: frame[row * 32 + 5 : row * 32 + 9, col * 32 + 5 : col * 32 + 9].reshape(-1, 3)  # noqa: E731
    np.testing.assert_array_equal(cell(10, 5)[0], [70, 70, 70])  # goal
    np.testing.assert_array_equal(cell(1, 1)[0], [0, 150, 136])  # requested shelf 1
    np.testing.assert_array_equal(cell(2, 1)[0], [72, 61, 139])  # another shelf
    np.testing.assert_array_equal(cell(1, 2)[0], cell(3, 4)[0] * 0 + [214, 212, 204])  # empty slot
    np.testing.assert_array_equal(frame[9 * 32 + 16, 4 * 32 + 10], [210, 40, 40])  # loaded agent
    np.testing.assert_array_equal(frame[5 * 32 + 16, 0 * 32 + 10], [240, 140, 20])  # empty agent


# Ids, conformance, bad input ---------------------------------------------------------------------


def test_ids_are_rwares_less_the_four_broken_ones():
    ours = set(lamella_rware.env_ids())
    theirs = {env_id for env_id in gymnasium.registry if env_id.startswith("rware-")}
    broken = {f"rware-tiny-{n}ag-easy-v2" for n in range(16, 20)}
    assert ours == theirs - broken and len(ours) == 224
    assert ours <= set(le.registered())
    assert set(lamella_rware.MAIN_IDS) <= set(le.registered(variants=False))
    for env_id in (
        "rware-tiny-2ag-v2",
        "rware-large-19ag-easy-v2",
        "rware-medium-5ag-hard-v2",
        "rware-tiny-1ag-hard-v2",
    ):
        spec = gymnasium.spec(env_id).kwargs
        env, params = le.make(env_id, autoreset=False)
        assert (env.shelf_rows, env.shelf_columns, env.column_height, env.num_agents) == (
            spec["shelf_rows"],
            spec["shelf_columns"],
            spec["column_height"],
            spec["n_agents"],
        )
        assert (env.request_queue_size, env.sensor_range, int(params.max_steps)) == (
            spec["request_queue_size"],
            spec["sensor_range"],
            spec["max_steps"],
        )
        assert env.reward_type == "individual" and int(params.max_inactivity_steps) == 0
        reference = gymnasium.make(env_id).unwrapped
        assert (env.rows, env.cols) == reference.grid_size
        np.testing.assert_array_equal(env.highway, reference.highways.astype(bool))
        assert [tuple(g) for g in env.goals[:, ::-1]] == reference.goals


@pytest.mark.parametrize("env_id", ["rware-tiny-2ag-v2", "rware-tiny-1ag-v2"])
def test_check_env(env_id):
    # A 30-step limit, so check_env's 40 steps see an auto-reset; one agent: no agent axis.
    env, params = le.make(env_id, max_steps=30)
    check_env(env, params, num_steps=40, num_envs=2)


def test_layout_string_and_messages_pass_check_env_and_match_rwares_grid():
    layout = PARITY_CASES[-1][1]["layout"]
    env, params = le.make("rware-tiny-2ag-v2", layout=layout, msg_bits=2, max_steps=30)
    check_env(env, params, num_steps=40, num_envs=2)
    assert env.action_space(params).shape == (2, 3) and env.observation_space(params).shape == (2, 8 + 9 * 9)
    reference = Warehouse(3, 8, 1, 2, 0, 1, 2, None, 30, RewardType.INDIVIDUAL, layout=layout)
    bare = env.unwrapped
    reference.reset(seed=0)
    assert (
        (bare.rows, bare.cols, bare.num_shelves)
        == (*reference.grid_size, len(reference.shelfs))
        == (5, 8, 13)
    )
    np.testing.assert_array_equal(bare.highway, reference.highways.astype(bool))
    # Goals in rware's order, as (x, y) (the parity case delivers on all three).
    assert [tuple(g) for g in bare.goals[:, ::-1]] == reference.goals == [(0, 2), (7, 3), (3, 4)]
    assert "layout=" in repr(bare) and "msg_bits=2" in repr(bare)


def test_bad_layouts_and_message_bits_are_rejected_clearly():
    with pytest.raises(ValueError, match="msg_bits must be an integer >= 0, got -1"):
        RobotWarehouse(msg_bits=-1)
    with pytest.raises(ValueError, match="msg_bits must be an integer >= 0, got True"):
        RobotWarehouse(msg_bits=True)
    with pytest.raises(ValueError, match="rectangular"):
        RobotWarehouse(layout="x.g\nx.")
    with pytest.raises(
        ValueError, match=r"only hold 'x' \(shelf\), '.' \(highway\) and 'g' \(goal\), got \['o'\]"
    ):
        RobotWarehouse(layout="x.g\nx.o")
    with pytest.raises(ValueError, match="at least one goal"):
        RobotWarehouse(layout="x..\nx..")
    with pytest.raises(ValueError, match="no shelf"):
        RobotWarehouse(layout="g..\n...")
    with pytest.raises(ValueError, match="must be a string"):
        RobotWarehouse(layout=["x.g"])
    with pytest.raises(ValueError, match="drop shelf_rows / shelf_columns"):
        RobotWarehouse(layout="x.g", shelf_rows=2)
    with pytest.raises(ValueError, match="cannot hold 4 agents"):
        RobotWarehouse(n_agents=4, layout="xg.")
    with pytest.raises(
        ValueError, match=r"request_queue_size \(2\) must be below the number of shelves \(1\)"
    ):
        RobotWarehouse(n_agents=2, layout="xg.\n...")


def test_single_agent_ids_pass_gymnasiums_checker():
    env = GymnasiumEnv("rware-tiny-1ag-v2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gymnasium_check_env(env, skip_render_check=True)
    assert env.observation_space.shape == (71,) and env.action_space.n == 5


def test_bad_input_is_rejected_clearly(tiny4):
    _, env, params, _ = tiny4
    _, state = env.reset(jax.random.key(0), params)
    with pytest.raises(le.EnvInputError, match=r"shape \(4,\)"):
        env.step(jax.random.key(0), state, jnp.zeros((2,), jnp.int32), params)
    with pytest.raises(le.EnvInputError, match="float32"):
        env.step(jax.random.key(0), state, jnp.zeros((4,), jnp.float32), params)
    with pytest.raises(
        ValueError, match=r"unknown size 'huge'; choose one of \['large', 'medium', 'small', 'tiny'\]"
    ):
        RobotWarehouse("huge")
    with pytest.raises(ValueError, match="cannot hold 111 agents"):
        RobotWarehouse("tiny", 111)
    with pytest.raises(ValueError, match="n_agents must be an integer >= 1"):
        RobotWarehouse("tiny", 0)
    with pytest.raises(
        ValueError, match=r"request_queue_size \(32\) must be below the number of shelves \(32\)"
    ):
        RobotWarehouse("tiny", 16, "easy")
    with pytest.raises(ValueError, match="unknown difficulty"):
        RobotWarehouse("tiny", 2, "medium")
    with pytest.raises(ValueError, match="shelf_columns must be odd"):
        RobotWarehouse(shelf_columns=4)
    with pytest.raises(ValueError, match="unknown reward_type"):
        RobotWarehouse(reward_type="team")
    # "false" was truthy: normalised coordinates, silently.
    with pytest.raises(ValueError, match="normalised_coordinates must be True or False, got 'false'"):
        le.make("rware-tiny-2ag-v2", normalised_coordinates="false")
    with pytest.raises(KeyError, match="rware-tiny-2ag-v2"):
        le.make("rware-tiny-2ag-v1")
