"""Level-Based Foraging with ``rules="jumanji"``: step-by-step parity with Jumanji 1.1.2, rules by hand."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jumanji.environments import LevelBasedForaging as JumanjiLBF
from jumanji.environments.routing.lbf.generator import RandomGenerator
from jumanji.environments.routing.lbf.types import Agent, Food, State

from lamella.envs.multi_agent.lbf import LevelBasedForaging, LevelBasedForagingState
from lamella.envs.testing import check_env

NONE, NORTH, SOUTH, WEST, EAST, LOAD = range(6)
_DELTAS = np.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1], [0, 0]])


def inject(state) -> LevelBasedForagingState:
    """lamella's state for a (batch of) Jumanji state(s): Jumanji's ``position`` is (row, column)."""
    food = state.food_items
    return LevelBasedForagingState(
        agent_positions=state.agents.position.astype(jnp.int32),
        agent_levels=state.agents.level.astype(jnp.int32),
        food_positions=food.position.astype(jnp.int32),
        food_levels=jnp.where(food.eaten, 0, food.level).astype(jnp.int32),
        food_spawned=jnp.sum(food.level, -1).astype(jnp.float32),  # Jumanji's total_food_level
        time=state.step_count.astype(jnp.int32),
    )


def to_jumanji(state: LevelBasedForagingState, key: jax.Array) -> State:
    """Jumanji's state for a lamella reset state (one env; every food uneaten)."""
    n, num_food = state.agent_levels.shape[0], state.food_levels.shape[0]
    agents = Agent(
        id=jnp.arange(n), position=state.agent_positions, level=state.agent_levels, loading=jnp.zeros(n, bool)
    )
    food = Food(
        id=jnp.arange(num_food),
        position=state.food_positions,
        level=state.food_levels,
        eaten=state.food_levels == 0,
    )
    return State(agents=agents, food_items=food, step_count=state.time, key=key)


def seek_food(key, agents, foods, live, explore):
    """A food-seeking policy with random (often illegal) actions mixed in, for one env."""
    distance = jnp.abs(agents[:, None, :] - foods[None, :, :]).sum(-1)  # (n, F)
    distance = jnp.where(live[None, :], distance, 10_000)
    nearest = foods[jnp.argmin(distance, -1)]  # (n, 2)
    d_row, d_col = nearest[:, 0] - agents[:, 0], nearest[:, 1] - agents[:, 1]
    vertical = (d_row != 0) & (jnp.abs(d_row) > (d_col == 0))
    move = jnp.where(vertical, jnp.where(d_row < 0, NORTH, SOUTH), jnp.where(d_col < 0, WEST, EAST))
    action = jnp.where(distance.min(-1) == 1, LOAD, move)
    explore_key, action_key = jax.random.split(key)
    random = jax.random.randint(action_key, action.shape, 0, 6)
    return jnp.where(jax.random.uniform(explore_key, action.shape) < explore, random, action).astype(
        jnp.int32
    )


# (Jumanji generator kwargs, time limit, penalty, normalised, exploration rate). One case, since
# compiling Jumanji's step is most of the cost: partial sight, a crowded grid (agents block each
# other), levels 1..3 with foods up to 9, foods at distance 2 (one loader touching two), a
# penalty; the unnormalised reward is a param of the same rule (checked by hand below).
PARITY_CASES = [
    (
        dict(grid_size=7, fov=2, num_agents=4, num_food=3, max_agent_level=3, force_coop=False),
        20,
        0.4,
        True,
        0.35,
    ),
]
BATCH, STEPS = 64, 60


def rollout(reference, env, params, key, explore):
    """Jumanji plays BATCH episodes from lamella's reset states; lamella steps every Jumanji state too.

    Jumanji's own reset is not used (its generator keeps agents off whole rows, see the class
    docs), so episodes start from lamella's resets, converted. Returns, per step, both sides'
    outputs (stacked over steps and envs) for the comparisons.
    """
    batch_step = jax.vmap(reference.step)
    observe = jax.vmap(reference._observer.state_to_observation)

    def reset(key):
        keys = jax.random.split(key, BATCH)
        _, states = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
        return jax.vmap(to_jumanji)(states, keys)

    def ours(state, action):
        injected = inject(state)
        obs_now, mask_now = env.get_obs(injected), env.action_mask(injected)
        return obs_now, mask_now, env.step_env(jax.random.key(0), injected, action, params)

    def body(carry, key):
        policy_key, reset_key = jax.random.split(key)
        state, ended = carry  # episodes that ended start again from a (converted) lamella reset
        state = jax.tree.map(
            lambda new, old: jnp.where(ended.reshape((-1,) + (1,) * (old.ndim - 1)), new, old),
            reset(reset_key),
            state,
        )
        action = jax.vmap(seek_food, (0, 0, 0, 0, None))(
            jax.random.split(policy_key, BATCH),
            state.agents.position,
            state.food_items.position,
            ~state.food_items.eaten,
            explore,
        )
        observation = observe(state)
        obs_now, mask_now, (_, after, reward, terminated, truncated, info) = jax.vmap(ours)(state, action)
        next_state, next_timestep = batch_step(state, action)
        record = dict(
            obs=obs_now,
            reference_obs=observation.agents_view,
            mask=mask_now,
            reference_mask=observation.action_mask,
            action=action,
            agents=state.agents.position,
            foods=state.food_items.position,
            live=~state.food_items.eaten,
            positions=after.agent_positions,
            food_levels=after.food_levels,
            time=after.time,
            reward=reward,
            terminated=terminated[:, 0],
            truncated=truncated[:, 0],
            next_mask=info["action_mask"],
            reference_next=inject(next_state),
            reference_reward=next_timestep.reward,
            reference_last=next_timestep.last(),
            reference_discount=next_timestep.discount[:, 0],
            reference_next_mask=next_timestep.observation.action_mask,
        )
        return (next_state, next_timestep.last()), record

    # The first step resets every env (one reset in the compiled program, not two).
    blank = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), jax.eval_shape(reset, key))
    start = (blank, jnp.ones(BATCH, bool))
    _, records = jax.lax.scan(body, start, jax.random.split(key, STEPS))
    return records


@pytest.fixture(scope="module")
def parity_counts():
    counts = dict.fromkeys(
        [
            "steps",
            "eaten",
            "penalty",
            "terminated",
            "truncated",
            "illegal",
            "into_agent",
            "same_target",
            "two_foods",
        ],
        0,
    )
    for case, (generator, time_limit, penalty, normalize, explore) in enumerate(PARITY_CASES):
        reference = JumanjiLBF(
            RandomGenerator(**generator), time_limit=time_limit, penalty=penalty, normalize_reward=normalize
        )
        env = LevelBasedForaging(
            players=generator["num_agents"],
            field_size=generator["grid_size"],
            max_num_food=generator["num_food"],
            sight=generator["fov"],
            force_coop=generator["force_coop"],
            max_player_level=generator.get("max_agent_level", 2),
            max_episode_steps=time_limit,
            penalty=penalty,
            normalize_reward=normalize,
            rules="jumanji",
        )
        records = jax.jit(rollout, static_argnums=(0, 1))(
            reference, env, env.default_params, jax.random.key(case), explore
        )
        r = jax.tree.map(np.asarray, records)
        where = f"case {case}"
        # Observation and action mask of every state (reset states included), then the step.
        np.testing.assert_array_equal(r["obs"], r["reference_obs"], err_msg=where)
        np.testing.assert_array_equal(r["mask"], r["reference_mask"], err_msg=where)
        expected = r["reference_next"]
        np.testing.assert_array_equal(r["positions"], expected.agent_positions, err_msg=where)
        np.testing.assert_array_equal(r["food_levels"], expected.food_levels, err_msg=where)
        np.testing.assert_array_equal(r["time"], expected.time, err_msg=where)
        np.testing.assert_allclose(r["reward"], r["reference_reward"], atol=1e-6, err_msg=where)
        last, terminal = r["reference_last"], r["reference_last"] & (r["reference_discount"] == 0)
        np.testing.assert_array_equal(r["terminated"], terminal, err_msg=where)
        np.testing.assert_array_equal(r["terminated"] | r["truncated"], last, err_msg=where)
        np.testing.assert_array_equal(r["next_mask"], r["reference_next_mask"], err_msg=where)

        # What the steps exercised.
        action, agents, foods, live = r["action"], r["agents"], r["foods"], r["live"]
        legal = np.take_along_axis(r["mask"], action[..., None], -1)[..., 0]
        target = agents + _DELTAS[action]
        occupied = np.all(target[..., :, None, :] == agents[..., None, :, :], -1)
        occupied &= ~np.eye(agents.shape[-2], dtype=bool)
        is_move = (action >= NORTH) & (action <= EAST)
        adjacent = np.abs(agents[..., :, None, :] - foods[..., None, :, :]).sum(-1) == 1
        free_target = np.where(
            (is_move & legal)[..., None], target, -1 - np.arange(agents.shape[-2])[:, None]
        )
        counts["steps"] += action.shape[0] * action.shape[1]
        counts["eaten"] += int((r["reward"] > 0).any(-1).sum())
        counts["penalty"] += int((r["reward"] < 0).any(-1).sum())
        counts["terminated"] += int(terminal.sum())
        counts["truncated"] += int((last & ~terminal).sum())
        counts["illegal"] += int((~legal).sum())
        counts["into_agent"] += int((is_move & np.any(occupied, -1)).sum())
        counts["same_target"] += int(
            (np.all(free_target[..., :, None, :] == free_target[..., None, :, :], -1).sum(-1) > 1).sum()
        )
        counts["two_foods"] += int(((action == LOAD) & ((adjacent & live[..., None, :]).sum(-1) >= 2)).sum())
    return counts


def test_parity_with_jumanji_step_by_step(parity_counts):
    counts = parity_counts
    assert counts["steps"] == BATCH * STEPS * len(PARITY_CASES), counts
    # Every rule was exercised, not only compared on quiet steps.
    for outcome in (
        "eaten",
        "penalty",
        "terminated",
        "truncated",
        "illegal",
        "into_agent",
        "same_target",
        "two_foods",
    ):
        assert counts[outcome] >= 20, (outcome, counts)


# Rules on hand-built states ------------------------------------------------------------------


@pytest.fixture(scope="module")
def small():
    env = LevelBasedForaging(players=3, field_size=6, max_num_food=2, sight=1, rules="jumanji")
    return env, env.default_params, jax.jit(env.step_env)


def make_state(agents, levels, foods, food_levels, spawned=None):
    return LevelBasedForagingState(
        agent_positions=jnp.asarray(agents, jnp.int32),
        agent_levels=jnp.asarray(levels, jnp.int32),
        food_positions=jnp.asarray(foods, jnp.int32),
        food_levels=jnp.asarray(food_levels, jnp.int32),
        food_spawned=jnp.asarray(float(spawned if spawned is not None else sum(food_levels)), jnp.float32),
        time=jnp.zeros((), jnp.int32),
    )


def test_agents_block_moves_no_swaps_no_following_no_stacking(small):
    env, params, step = small
    key = jax.random.key(0)
    food = ([[5, 0], [0, 5]], [0, 0])
    # Swap and following are blocked (lbforaging allows both).
    state = make_state([[2, 2], [2, 3], [4, 4]], [1, 1, 1], *food)
    np.testing.assert_array_equal(np.asarray(env.action_mask(state))[:2, EAST], [False, True])
    np.testing.assert_array_equal(np.asarray(env.action_mask(state))[:2, WEST], [True, False])
    for action in ([EAST, WEST, NONE], [EAST, EAST, NONE]):
        out = step(key, state, jnp.asarray(action), params)
        expected = [[2, 2], [2, 3], [4, 4]] if action[1] == WEST else [[2, 2], [2, 4], [4, 4]]
        np.testing.assert_array_equal(np.asarray(out[1].agent_positions), expected)
    # Two agents aiming at one free cell both stay.
    out = step(
        key, make_state([[2, 2], [2, 4], [4, 4]], [1, 1, 1], *food), jnp.array([EAST, WEST, NORTH]), params
    )
    np.testing.assert_array_equal(np.asarray(out[1].agent_positions), [[2, 2], [2, 4], [3, 4]])
    # lbforaging's stacking case: A's move onto B's cell is blocked here.
    out = step(
        key, make_state([[3, 0], [3, 1], [3, 3]], [1, 1, 1], *food), jnp.array([EAST, EAST, WEST]), params
    )
    np.testing.assert_array_equal(np.asarray(out[1].agent_positions), [[3, 0], [3, 1], [3, 3]])


def test_penalty_goes_to_every_agent_and_two_foods_count_twice(small):
    env, params, step = small
    key = jax.random.key(0)
    # Foods of level 2 at (2, 2) and (2, 4); agent 0 (level 1) at (2, 3) touches both.
    state = make_state([[2, 3], [1, 2], [5, 5]], [1, 1, 2], [[2, 2], [2, 4]], [2, 2])
    raw = params.replace(normalize_reward=False, penalty=0.5)
    # Agent 0 alone: both foods fall short, every agent loses 0.5 per food.
    _, after, reward, *_ = step(key, state, jnp.array([LOAD, NONE, NONE]), raw)
    np.testing.assert_allclose(np.asarray(reward), [-1.0, -1.0, -1.0])
    # Agents 0 and 1 load: (2, 2) is eaten (1 + 1 >= 2), (2, 4) falls short (only agent 0).
    _, after, reward, *_ = step(key, state, jnp.array([LOAD, LOAD, NONE]), raw)
    np.testing.assert_allclose(np.asarray(reward), [1 * 2 - 0.5, 1 * 2 - 0.5, -0.5])
    np.testing.assert_array_equal(np.asarray(after.food_levels), [0, 2])
    # Normalised: the gain and the penalty are both divided by group level * food spawned (4).
    normed = params.replace(penalty=0.5)
    _, _, reward, *_ = step(key, state, jnp.array([LOAD, LOAD, NONE]), normed)
    np.testing.assert_allclose(np.asarray(reward), [2 / 8 - 0.5 / 4, 2 / 8 - 0.5 / 4, -0.5 / 4], rtol=1e-6)


def test_observation_slots_are_fixed(small):
    env, params, step = small  # sight 1
    # Food 0 eaten, food 1 at (3, 3); agent 0 at (2, 2) sees food 1 and agent 2 but not agent 1.
    state = make_state([[2, 2], [5, 5], [3, 2]], [1, 2, 1], [[1, 1], [3, 3]], [0, 2], spawned=4)
    obs = np.asarray(step(jax.random.key(0), state, jnp.array([NONE, NONE, NONE]), params)[0])
    # View origin (1, 1) for agent 0: food slot 0 empty (eaten), slot 1 the food; self, agent 1 unseen, agent 2.
    np.testing.assert_array_equal(obs[0], [-1, -1, 0, 2, 2, 2, 1, 1, 1, -1, -1, 0, 2, 1, 1])
    # Agent 1 (origin (4, 4)) sees nothing else; its own slot first, then agents 0 and 2 (unseen).
    np.testing.assert_array_equal(obs[1], [-1, -1, 0, -1, -1, 0, 1, 1, 2, -1, -1, 0, -1, -1, 0])
    # Agent 2 at (3, 2), origin (2, 1): food 1 at distance (0, 1); agents 0 (slot 1) and 1 (slot 2, unseen).
    np.testing.assert_array_equal(obs[2], [-1, -1, 0, 1, 2, 2, 1, 1, 1, 0, 1, 1, -1, -1, 0])
    assert params.max_episode_steps == 100 and env.rules == "jumanji"


def test_reset_places_food_first_apart_and_agents_off_food():
    # A 3x3 interior leaves no room for rejection sampling of three foods: the exact pass.
    env = LevelBasedForaging(players=2, field_size=5, max_num_food=3, force_coop=True, rules="jumanji")
    large = LevelBasedForaging(players=3, field_size=15, max_num_food=4, rules="jumanji")
    assert env._food_candidates == 0 and large._food_candidates > 0  # both spawn paths
    near_pairs = 0
    for lbf_env in (env, large):
        _, states = jax.jit(jax.vmap(lbf_env.reset, in_axes=(0, None)))(
            jax.random.split(jax.random.key(1), 256), lbf_env.default_params
        )
        agents, foods = np.asarray(states.agent_positions), np.asarray(states.food_positions)
        levels = np.asarray(states.food_levels)
        for b in range(256):
            assert np.all(levels[b] > 0)  # every food fits
            assert np.all((foods[b] >= 1) & (foods[b] <= lbf_env.rows - 2))
            cells = {tuple(p) for p in agents[b]}
            assert len(cells) == lbf_env.num_agents and not cells & {tuple(f) for f in foods[b]}
            gaps = np.abs(foods[b][:, None] - foods[b][None]).sum(-1)[np.triu_indices(len(foods[b]), 1)]
            assert gaps.min() >= 2
            near_pairs += int((gaps == 2).sum())
    assert near_pairs > 20  # foods at distance 2 (an agent can touch both) do occur


def test_check_env_and_bad_rules():
    env = LevelBasedForaging(
        players=3, field_size=6, max_num_food=2, sight=2, rules="jumanji", max_episode_steps=4
    )
    check_env(env, env.default_params, num_steps=6, num_envs=2)  # crosses the time limit: an auto-reset
    with pytest.raises(ValueError, match=r"rules must be 'lbforaging' \(lbforaging 2.0\) or 'jumanji'"):
        LevelBasedForaging(rules="mava")
