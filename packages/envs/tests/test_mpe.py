"""Multi-agent particle envs: step-by-step parity with mpe2 1.1.1, conformance, bad input."""

from __future__ import annotations

import importlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs as le
from lamella.envs.multi_agent import mpe
from lamella.envs.multi_agent.mpe import MultiParticleEnv, MultiParticleState
from lamella.envs.testing import assert_parity_coverage, check_env

# mpe2 module per scenario (the version suffix is lamella's id suffix).
MODULES = {
    "simple": "simple_v3",
    "simple_spread": "simple_spread_v3",
    "simple_speaker_listener": "simple_speaker_listener_v4",
    "simple_tag": "simple_tag_v3",
    "simple_adversary": "simple_adversary_v3",
    "simple_reference": "simple_reference_v3",
    "simple_push": "simple_push_v3",
    "simple_crypto": "simple_crypto_v3",
    "simple_world_comm": "simple_world_comm_v3",
    "simple_formation": "simple_formation_v1",
    "simple_line": "simple_line_v1",
    "collect_treasure": "collect_treasure_v1",
}


def reference_env(scenario: str, continuous: bool, **kwargs):
    module = importlib.import_module(f"mpe2.{MODULES[scenario]}")
    return module.parallel_env(continuous_actions=continuous, **kwargs)


def goal_of(scenario: str, world) -> list[int]:
    """The goal indices of lamella's state for mpe2's world (see each scenario's docs)."""
    landmarks, agents = world.landmarks, world.agents
    index = lambda entity: next(i for i, lm in enumerate(landmarks) if lm is entity)  # noqa: E731
    if scenario == "simple_speaker_listener":
        return [index(agents[0].goal_b)]
    if scenario == "simple_reference":
        return [index(agents[0].goal_b), index(agents[1].goal_b)]
    if scenario in ("simple_adversary", "simple_push"):
        return [index(agents[0].goal_a)]
    if scenario == "simple_crypto":
        return [index(agents[0].goal_a), int(np.argmax(agents[2].key))]
    return []


def inject(scenario: str, raw) -> MultiParticleState:
    """lamella's state for mpe2's current world."""
    world = raw.world
    return MultiParticleState(
        agent_pos=jnp.asarray(np.stack([a.state.p_pos for a in world.agents]), jnp.float32),
        agent_vel=jnp.asarray(np.stack([a.state.p_vel for a in world.agents]), jnp.float32),
        landmark_pos=jnp.asarray(np.stack([lm.state.p_pos for lm in world.landmarks]), jnp.float32),
        comm=jnp.asarray(np.stack([np.asarray(a.state.c, np.float64) for a in world.agents]), jnp.float32),
        goal=jnp.asarray(goal_of(scenario, world), jnp.int32),
        time=jnp.asarray(raw.steps, jnp.int32),
    )


def assert_fields_close(
    got: MultiParticleState, want: MultiParticleState, fields: tuple[str, ...], where: str
) -> None:
    """lamella's next state against mpe2's world (float32 against float64: atol 1e-4)."""
    for field in fields:
        np.testing.assert_allclose(
            np.asarray(getattr(got, field)),
            np.asarray(getattr(want, field)),
            atol=1e-4,
            err_msg=f"{where}: {field}",
        )


def padded(rows: list[np.ndarray], size: int) -> np.ndarray:
    return np.stack([np.pad(np.asarray(r, np.float64), (0, size - len(r))) for r in rows])


# (scenario, continuous, episodes): every scenario with discrete actions; continuous actions for
# an agent that only talks (speaker_listener), one that moves and talks (reference) and the
# all-zero utterance rule (crypto).
# collect_treasure's steps draw respawns: its own parity test below feeds mpe2 lamella's draws.
PARITY_CASES = [(name, False, 3) for name in MODULES if name != "collect_treasure"] + [
    ("simple_speaker_listener", True, 2),
    ("simple_reference", True, 2),
    ("simple_crypto", True, 2),
    # The richest continuous case: the leader moves and talks (9 entries), predators and prey with
    # their own accelerations and speed limits collide, forests hide them.
    ("simple_world_comm", True, 2),
]


@pytest.fixture(scope="module")
def parity_runs():
    """Run every parity case once; the tests below read what was compared."""
    runs = {}
    for case_index, (scenario, continuous, episodes) in enumerate(PARITY_CASES):
        env_id = f"MPE-{scenario}-v{MODULES[scenario][-1]}"
        env, params = le.make(env_id, continuous_actions=continuous)  # AutoReset, as training uses it
        bare = env.unwrapped
        single = bare.num_agents == 1

        # One compiled program per case: the observation and global state of the state acted
        # in, and the auto-resetting step from it.
        @jax.jit
        def observe_and_step(state, action, bare=bare, env=env, params=params):
            return (
                bare.get_obs(state),
                bare.global_state(state),
                env.step(jax.random.key(0), state, action, params),
            )

        reference = reference_env(scenario, continuous)
        raw = reference.unwrapped
        rng = np.random.default_rng(case_index)
        flags, rewards, resets, touching, compared = [], [], [], 0, 0
        for episode in range(episodes):
            obs_ref, _ = reference.reset(seed=100 * case_index + episode)
            while reference.agents:
                state = inject(scenario, raw)  # re-synced from mpe2 (float64) every step
                names = list(reference.agents)
                expected_obs = padded([obs_ref[a] for a in names], bare.observation_size)
                expected_global = raw.state()
                if continuous:
                    joint = rng.uniform(0.0, 1.0, (bare.num_agents, bare.action_size)).astype(np.float32)
                    actions = {a: joint[i, : bare.action_sizes[i]] for i, a in enumerate(names)}
                else:
                    joint = np.asarray([rng.integers(0, k) for k in bare.num_actions_per_agent], np.int32)
                    actions = {a: int(joint[i]) for i, a in enumerate(names)}
                obs_ref, reward_ref, term_ref, trunc_ref, _ = reference.step(actions)
                action = jnp.asarray(joint[0] if single else joint)
                obs_before, global_state, out = observe_and_step(state, action)
                obs, next_state, reward, terminated, truncated, info = out
                where = f"{env_id} continuous={continuous} episode {episode} step {raw.steps}"
                assert bool(bare.observation_space(params).contains(obs)), where
                assert reward.dtype == jnp.float32 and terminated.dtype == truncated.dtype == jnp.bool_
                assert (
                    reward.shape == terminated.shape == truncated.shape == (() if single else (len(names),))
                )
                obs_before = np.asarray(obs_before)[None] if single else np.asarray(obs_before)
                np.testing.assert_allclose(obs_before, expected_obs, atol=1e-5, err_msg=where)
                np.testing.assert_allclose(
                    np.asarray(global_state), expected_global, atol=1e-5, err_msg=where
                )
                final = np.asarray(info["final_observation"])
                final = final[None] if single else final
                expected_obs = padded([obs_ref[a] for a in names], bare.observation_size)
                np.testing.assert_allclose(final, expected_obs, atol=1e-4, err_msg=where)
                reward_np = np.atleast_1d(np.asarray(reward))
                np.testing.assert_allclose(
                    reward_np, [reward_ref[a] for a in names], atol=1e-4, err_msg=where
                )
                np.testing.assert_array_equal(
                    np.atleast_1d(np.asarray(truncated)), [trunc_ref[a] for a in names]
                )
                np.testing.assert_array_equal(
                    np.atleast_1d(np.asarray(terminated)), [term_ref[a] for a in names]
                )
                flags.append(
                    (np.array([term_ref[a] for a in names]), np.array([trunc_ref[a] for a in names]))
                )
                rewards.append(np.array([reward_ref[a] for a in names]))
                compared += 1
                done = bool(np.all(np.asarray(terminated) | np.asarray(truncated)))
                if done:
                    # Auto-reset: the returned state is a fresh episode's, and obs is its observation.
                    assert int(next_state.time) == 0, where
                    np.testing.assert_allclose(
                        np.asarray(obs), np.asarray(bare.get_obs(next_state)), atol=1e-6
                    )
                    resets.append(True)
                else:
                    # The physics: lamella's next state against mpe2's world.
                    expected = inject(scenario, raw)
                    assert_fields_close(next_state, expected, ("agent_pos", "agent_vel", "comm"), where)
                    np.testing.assert_allclose(
                        np.asarray(obs), np.asarray(info["final_observation"]), atol=1e-6
                    )
                    assert int(next_state.time) == raw.steps
                    resets.append(False)
                positions = np.stack([a.state.p_pos for a in raw.world.agents])
                sizes = np.array([a.size for a in raw.world.agents])
                gaps = (
                    np.linalg.norm(positions[:, None] - positions[None], axis=-1)
                    - sizes[:, None]
                    - sizes[None]
                )
                colliders = np.array([a.collide for a in raw.world.agents])
                pair = colliders[:, None] & colliders[None] & ~np.eye(len(sizes), dtype=bool)
                touching += int(np.any((gaps < 0) & pair))
        reference.close()
        runs[scenario, continuous] = dict(
            terminated=np.concatenate([t for t, _ in flags]),
            truncated=np.concatenate([t for _, t in flags]),
            reward=np.concatenate(rewards),
            auto_reset=np.array(resets),
            touching=touching,
            compared=compared,
            env=bare,
        )
    return runs


@pytest.mark.parametrize("scenario, continuous", [(s, c) for s, c, _ in PARITY_CASES])
def test_parity_with_mpe2_step_by_step(parity_runs, scenario, continuous):
    run = parity_runs[scenario, continuous]
    counts = assert_parity_coverage(
        f"MPE {scenario}",
        terminated=run["terminated"],
        truncated=run["truncated"],
        reward=run["reward"],
        auto_reset=run["auto_reset"],
        never_terminates="mpe2's scenarios end only at max_cycles by default",
    )
    assert counts.transitions >= 25 * run["env"].num_agents
    assert run["compared"] % 25 == 0  # whole 25-step episodes, each truncated on its 25th step
    if any(run["env"].scenario.agent_collide):
        # Contacts were compared in the scenarios where agents collide.
        assert run["touching"] > 0, f"{scenario}: no step with two agents in contact"


def test_parity_with_mpe2_sizes_and_local_ratio():
    """Non-default sizes and local_ratio against mpe2's (short: one episode each)."""
    cases = [
        ("simple_spread", dict(N=4, local_ratio=0.2)),
        ("simple_tag", dict(num_good=2, num_adversaries=2, num_obstacles=1)),
        ("simple_adversary", dict(N=3)),
        # mpe2's partial observability: the 2 nearest other agents and 3 nearest of 4 landmarks,
        # and more slots than there are entities (zero-padded).
        ("simple_spread", dict(N=4, num_agent_neighbors=2, num_landmark_neighbors=3)),
        ("simple_spread", dict(N=2, num_agent_neighbors=3, num_landmark_neighbors=4)),
        # simple_tag: the 2 nearest of 3 obstacles and of 3 other agents (an adversary among them
        # shows a zero velocity); more agent slots than agents, obstacles all seen.
        (
            "simple_tag",
            dict(
                num_good=2,
                num_adversaries=2,
                num_obstacles=3,
                num_agent_neighbors=2,
                num_landmark_neighbors=2,
            ),
        ),
        ("simple_tag", dict(num_agent_neighbors=5)),
        # simple_adversary: 2 of 3 landmarks and of 3 other agents; 3 slots for 2 landmarks.
        ("simple_adversary", dict(N=3, num_agent_neighbors=2, num_landmark_neighbors=2)),
        ("simple_adversary", dict(num_landmark_neighbors=3)),
    ]
    rng = np.random.default_rng(7)
    for scenario, kwargs in cases:
        env, params = le.make(f"MPE-{scenario}-v3", autoreset=False, **kwargs)
        reference = reference_env(scenario, False, **kwargs)
        raw = reference.unwrapped
        step = jax.jit(env.step)
        reference.reset(seed=3)
        sizes = tuple(reference.observation_space(a).shape[0] for a in reference.possible_agents)
        assert env.observation_sizes == sizes, (scenario, kwargs)
        nonzero = 0
        while reference.agents:
            state = inject(scenario, raw)
            joint = rng.integers(0, 5, env.num_agents).astype(np.int32)
            names = list(reference.agents)
            obs_ref, reward_ref, _, trunc_ref, _ = reference.step(
                {a: int(joint[i]) for i, a in enumerate(names)}
            )
            obs, _, reward, _, truncated, _ = step(jax.random.key(0), state, jnp.asarray(joint), params)
            np.testing.assert_allclose(
                np.asarray(obs), padded([obs_ref[a] for a in names], env.observation_size), atol=1e-4
            )
            np.testing.assert_allclose(np.asarray(reward), [reward_ref[a] for a in names], atol=1e-4)
            np.testing.assert_array_equal(np.asarray(truncated), [trunc_ref[a] for a in names])
            nonzero += int(np.any(np.asarray(reward) != 0))
        assert nonzero > 0 and bool(np.all(np.asarray(truncated))), scenario


def test_terminate_on_success_matches_mpe2():
    """simple_spread's terminate_on_success against mpe2 on injected states: landmarks covered
    (every agent terminates), one left uncovered, and covered on the step that hits max_cycles
    (truncated, not terminated); then an auto-reset after the termination."""
    kwargs = dict(N=3, terminate_on_success=True)
    env, params = le.make("MPE-simple_spread-v3", autoreset=False, **kwargs)
    reference = reference_env("simple_spread", False, **kwargs)
    raw = reference.unwrapped
    step = jax.jit(env.step)
    landmarks = np.array([[-0.6, 0.0], [0.6, 0.0], [0.0, 0.7]])
    cases = [  # (agent offsets from their landmarks, steps already taken, terminated, truncated)
        (np.full((3, 2), 0.03), 3, True, False),
        (np.array([[0.03, 0.0], [0.0, 0.03], [0.2, 0.0]]), 3, False, False),  # one landmark uncovered
        (np.full((3, 2), 0.03), 24, False, True),  # covered on the 25th step: the time limit wins
    ]
    for offsets, steps, terminated, truncated in cases:
        reference.reset(seed=0)
        for agent, landmark, position, offset in zip(
            raw.world.agents, raw.world.landmarks, landmarks, offsets
        ):
            landmark.state.p_pos = position.copy()
            agent.state.p_pos, agent.state.p_vel = position + offset, np.zeros(2)
        raw.steps = steps
        state = inject("simple_spread", raw)
        names = list(reference.agents)
        obs_ref, reward_ref, term_ref, trunc_ref, _ = reference.step({a: 0 for a in names})
        obs, _, reward, term, trunc, _ = step(jax.random.key(0), state, jnp.zeros(3, jnp.int32), params)
        assert [term_ref[a] for a in names] == [terminated] * 3 and [trunc_ref[a] for a in names] == [
            truncated
        ] * 3
        np.testing.assert_array_equal(np.asarray(term), [terminated] * 3)
        np.testing.assert_array_equal(np.asarray(trunc), [truncated] * 3)
        np.testing.assert_allclose(np.asarray(obs), np.stack([obs_ref[a] for a in names]), atol=1e-4)
        np.testing.assert_allclose(np.asarray(reward), [reward_ref[a] for a in names], atol=1e-4)
        assert np.all(np.asarray(reward) != 0), "the compared rewards include non-zero ones"
    # Auto-reset after a termination: the next observation is a fresh episode's, time 0.
    auto, _ = le.make("MPE-simple_spread-v3", **kwargs)
    reference.reset(seed=0)
    for agent, landmark, position in zip(raw.world.agents, raw.world.landmarks, landmarks):
        landmark.state.p_pos, agent.state.p_pos, agent.state.p_vel = (
            position.copy(),
            position + 0.03,
            np.zeros(2),
        )
    state = inject("simple_spread", raw)
    _, after, _, term, _, info = jax.jit(auto.step)(jax.random.key(1), state, jnp.zeros(3, jnp.int32), params)
    assert bool(np.all(np.asarray(term))) and int(after.time) == 0
    assert np.abs(np.asarray(info["final_observation"]) - np.asarray(auto.get_obs(after))).max() > 0
    # Off by default, and a non-boolean value is refused when the env is built.
    assert le.make("MPE-simple_spread-v3")[0].scenario.terminal is None
    with pytest.raises(ValueError, match="terminate_on_success must be True or False, got 1"):
        le.make("MPE-simple_spread-v3", terminate_on_success=1)
    with pytest.raises(TypeError, match=r"unknown override\(s\) \['terminate_on_success'\]"):
        le.make("MPE-simple_tag-v3", terminate_on_success=True)


def test_curriculum_stages_match_mpe2():
    """simple_spread with ``curriculum=True``: stage 0 (no collision penalty) against mpe2's
    curriculum env, stages 1 and 5 (clipped to 1, as mpe2's ``set_curriculum_stage`` clamps)
    against mpe2's stage-1 rule, the collision penalty on, which is mpe2's env without the
    curriculum: mpe2 1.1.1 cannot leave stage 0 (its ``BaseScenario.curriculum_stage`` property
    drops every assignment; asserted below, so a fixed mpe2 shows up here). Every step of one
    episode each from the same injected states; the stage is a traced param: one compiled step."""
    env, params = le.make("MPE-simple_spread-v3", autoreset=False, curriculum=True, N=4)
    _, plain_params = le.make("MPE-simple_spread-v3", autoreset=False, N=4)
    assert isinstance(params, mpe.MultiParticleCurriculumParams) and int(params.curriculum_stage) == 0
    assert type(plain_params) is mpe.MultiParticleSharedParams  # no new field without the option
    step = jax.jit(env.step)
    rng = np.random.default_rng(5)
    touching = {}
    for stage in (0, 1, 5):
        reference = reference_env("simple_spread", False, N=4, curriculum=stage == 0)
        raw = reference.unwrapped
        reference.reset(seed=9)
        raw.set_curriculum_stage(stage)
        assert raw.curriculum_stage == 0  # mpe2 1.1.1's stage never moves
        staged = params.replace(curriculum_stage=stage)
        touching[stage] = 0
        while reference.agents:
            state = inject("simple_spread", raw)
            names = list(reference.agents)
            joint = rng.integers(0, 5, 4).astype(np.int32)
            _, reward_ref, _, _, _ = reference.step({a: int(joint[i]) for i, a in enumerate(names)})
            _, _, reward, _, _, _ = step(jax.random.key(0), state, jnp.asarray(joint), staged)
            np.testing.assert_allclose(np.asarray(reward), [reward_ref[a] for a in names], atol=1e-4)
            positions = np.stack([a.state.p_pos for a in raw.world.agents])
            gaps = np.linalg.norm(positions[:, None] - positions[None], axis=-1) + 10 * np.eye(4)
            touching[stage] += int(np.any(gaps < 0.3))  # steps the penalty's presence shows in
        reference.close()
    assert min(touching.values()) > 0, touching
    assert step._cache_size() == 1  # one compile for every stage
    env, params = le.make("MPE-simple_spread-v3", curriculum=True)
    check_env(env, params.replace(curriculum_stage=1), num_steps=30, num_envs=2)


def test_formation_terminates_on_success_as_mpe2():
    """simple_formation's terminate_on_success against mpe2 on injected states: the agents on the
    circle's places (terminated), one of them 0.1 off (not)."""
    kwargs = dict(N=4, terminate_on_success=True)
    env, params = le.make("MPE-simple_formation-v1", autoreset=False, **kwargs)
    reference = reference_env("simple_formation", False, **kwargs)
    raw = reference.unwrapped
    step = jax.jit(env.step)
    landmark = np.array([0.1, -0.1])
    angles = 0.3 + np.pi / 2 * np.arange(4)
    places = landmark + 0.5 * np.stack([np.cos(angles), np.sin(angles)], -1)
    for off, terminated in [(0.02, True), (0.1, False)]:
        reference.reset(seed=0)
        raw.world.landmarks[0].state.p_pos = landmark.copy()
        for i, agent in enumerate(raw.world.agents):
            # Every agent 0.02 along the circle from its place; agent 3 `off` outward instead.
            outward = np.array([np.cos(angles[i]), np.sin(angles[i])])
            tangent = np.array([-np.sin(angles[i]), np.cos(angles[i])])
            agent.state.p_pos = places[i] + (off * outward if i == 3 else 0.02 * tangent)
            agent.state.p_vel = np.zeros(2)
        raw.steps = 3
        state = inject("simple_formation", raw)
        names = list(reference.agents)
        obs_ref, reward_ref, term_ref, trunc_ref, _ = reference.step({a: 0 for a in names})
        obs, _, reward, term, trunc, _ = step(jax.random.key(0), state, jnp.zeros(4, jnp.int32), params)
        assert [term_ref[a] for a in names] == [terminated] * 4 and not any(trunc_ref.values())
        np.testing.assert_array_equal(np.asarray(term), [terminated] * 4)
        assert not np.asarray(trunc).any()
        np.testing.assert_allclose(np.asarray(obs), np.stack([obs_ref[a] for a in names]), atol=1e-4)
        np.testing.assert_allclose(np.asarray(reward), [reward_ref[a] for a in names], atol=1e-4)
        assert np.all(np.asarray(reward) != 0), "the compared rewards include non-zero ones"
    with pytest.raises(ValueError, match="simple_formation N must be at most 8"):
        le.make("MPE-simple_formation-v1", N=9)


def test_line_terminates_on_success_and_resets_as_mpe2():
    """simple_line: terminate_on_success against mpe2 on injected states (agents on their places
    of the segment, then one 0.1 off), and the reset's landmarks drawn as mpe2 draws them."""
    kwargs = dict(N=3, terminate_on_success=True)
    env, params = le.make("MPE-simple_line-v1", autoreset=False, **kwargs)
    reference = reference_env("simple_line", False, **kwargs)
    raw = reference.unwrapped
    step = jax.jit(env.step)
    for off, terminated in [(0.02, True), (0.1, False)]:
        reference.reset(seed=5)
        start, end = (lm.state.p_pos for lm in raw.world.landmarks)
        for i, agent in enumerate(raw.world.agents):
            place = start + i / 2 * (end - start)
            agent.state.p_pos = place + np.array([0.0, off if i == 2 else 0.02])
            agent.state.p_vel = np.zeros(2)
        state = inject("simple_line", raw)
        names = list(reference.agents)
        obs_ref, reward_ref, term_ref, _, _ = reference.step({a: 0 for a in names})
        obs, _, reward, term, _, _ = step(jax.random.key(0), state, jnp.zeros(3, jnp.int32), params)
        assert [term_ref[a] for a in names] == [terminated] * 3
        np.testing.assert_array_equal(np.asarray(term), [terminated] * 3)
        np.testing.assert_allclose(np.asarray(obs), np.stack([obs_ref[a] for a in names]), atol=1e-4)
        np.testing.assert_allclose(np.asarray(reward), [reward_ref[a] for a in names], atol=1e-4)
        assert np.all(np.asarray(reward) != 0), "the compared rewards include non-zero ones"
    # Resets: landmark 0 in [-0.25, 0.25]^2, landmark 1 at 1.25 from it inside (-1, 1)^2, in
    # directions distributed as mpe2's (its turn-until-inside rule favours some): the shares of
    # 8 direction sectors agree within 0.04 (4000 lamella resets, 2000 of mpe2's).
    _, states = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(
        jax.random.split(jax.random.key(0), 4000), params
    )
    ours = np.asarray(states.landmark_pos, np.float64)
    theirs = []
    for seed in range(2000):
        reference.reset(seed=seed)
        theirs.append([lm.state.p_pos for lm in raw.world.landmarks])
    theirs = np.asarray(theirs)
    for landmarks in (ours, theirs):
        assert np.abs(landmarks[:, 0]).max() <= 0.25 and np.abs(landmarks[:, 1]).max() < 1.0
        np.testing.assert_allclose(
            np.linalg.norm(landmarks[:, 1] - landmarks[:, 0], axis=-1), 1.25, atol=1e-5
        )

    def sectors(landmarks):
        delta = landmarks[:, 1] - landmarks[:, 0]
        # Sectors of 45 degrees centred on the axes and the diagonals.
        angle = (np.arctan2(delta[:, 1], delta[:, 0]) + np.pi / 8) % (2 * np.pi)
        return np.histogram(angle, bins=8, range=(0, 2 * np.pi))[0] / len(landmarks)

    np.testing.assert_allclose(sectors(ours), sectors(theirs), atol=0.04)
    # The rule's bias is there to match: 1.25 along an axis leaves the arena from near the centre,
    # so the axis sectors get the fewest directions.
    assert sectors(theirs)[0::2].max() + 0.1 < sectors(theirs)[1::2].min(), sectors(theirs)


def inject_treasure(raw) -> MultiParticleState:
    """lamella's state for mpe2's collect_treasure world, its items included."""
    world = raw.world
    holding = [-1 if a.holding is None else int(a.holding) for a in world.agents if a.collector]
    kinds = [int(lm.type) for lm in world.landmarks]
    alive = [int(lm.alive) for lm in world.landmarks]
    return inject("collect_treasure", raw).replace(
        items=jnp.asarray(holding + kinds + alive + [0], jnp.int32)
    )


class RespawnDraws:
    """mpe2's ``world.np_random`` for one collect_treasure step: it hands out the respawns lamella
    draws from the step's key (``respawn_draws``), in mpe2's order of calls per picked-up
    treasure: the respawn check ``uniform()`` (against probability 1), the place
    ``uniform(-0.95, 0.95, 2)``, the type ``integers(0, D)``."""

    def __init__(self, draws: np.ndarray, parked: list[int], num_types: int):
        self.draws, self.parked, self.num_types, self.current = draws, list(parked), num_types, -1

    def uniform(self, low=0.0, high=1.0, size=None):
        if size is None:
            self.current = self.parked.pop(0)
            return 0.0
        assert (low, high, size) == (-0.95, 0.95, 2)
        return ((2.0 * self.draws[self.current, :2] - 1.0) * np.float32(0.95)).astype(np.float64)

    def integers(self, low, high):
        assert (low, high) == (0, self.num_types)
        return min(int(np.floor(self.draws[self.current, 2] * np.float32(high))), high - 1)


def heading_to_targets(raw, rng) -> dict[str, int]:
    """Discrete actions that head for what each agent's reward points it to (a collector to the
    nearest treasure or its deposit, a deposit to a collector holding its type), 20% at random:
    episodes with pickups and deliveries to compare."""
    world = raw.world
    collectors = [a for a in world.agents if a.collector]
    actions = {}
    for agent in world.agents:
        if agent.collector and agent.holding is None:
            targets = [lm.state.p_pos for lm in world.landmarks if lm.alive]
        elif agent.collector:
            targets = [d.state.p_pos for d in world.agents if not d.collector and d.d_i == agent.holding]
        else:
            targets = [c.state.p_pos for c in collectors if c.holding == agent.d_i]
            targets = targets or [np.mean([c.state.p_pos for c in collectors], 0)]
        delta = min((t - agent.state.p_pos for t in targets), key=np.linalg.norm)
        if abs(delta[0]) > abs(delta[1]):
            move = 2 if delta[0] > 0 else 1
        else:
            move = 4 if delta[1] > 0 else 3
        actions[agent.name] = int(rng.integers(0, 5)) if rng.random() < 0.2 else move
    return actions


def test_collect_treasure_parity_with_mpe2_step_by_step():
    """Every step of 4 episodes against mpe2's collect_treasure, mpe2 fed lamella's respawn
    draws, lamella under AutoReset as training runs it: observations, global state, rewards,
    flags, benchmark data, the physics (deposits' mass 2.25), what each collector holds, each
    treasure's type, place and presence after the step, and on each episode's 25th step the final
    observation and the auto-reset."""
    from lamella.envs import random as fast_random
    from lamella.envs.multi_agent.mpe.scenarios.collect_treasure import respawn_draws

    env, params = le.make("MPE-collect_treasure-v1", benchmark_data=True)
    bare = env.unwrapped
    c, t, d = 6, 6, 2
    reference = reference_env("collect_treasure", False, benchmark_data=True)
    raw = reference.unwrapped

    @jax.jit
    def observe_and_step(key, state, action):
        return bare.get_obs(state), bare.global_state(state), env.step(key, state, action, params)

    rng = np.random.default_rng(11)
    pickups = deliveries = respawns = 0
    flags, rewards, resets = [], [], []
    for episode in range(4):
        obs_ref, _ = reference.reset(seed=40 + episode)
        while reference.agents:
            state = inject_treasure(raw)
            names = list(reference.agents)
            step_key = jax.random.key(1000 * episode + raw.steps)
            # The bare step draws from AutoReset's step key, a hashed fork of the key it is given.
            draws = np.asarray(respawn_draws(fast_random.fork(step_key), t))
            parked = [j for j, lm in enumerate(raw.world.landmarks) if not lm.alive]
            raw.world._np_random = RespawnDraws(draws, parked, d)
            expected_obs = padded([obs_ref[a] for a in names], bare.observation_size)
            expected_global = raw.state()
            actions = heading_to_targets(raw, rng)
            obs_ref, reward_ref, term_ref, trunc_ref, infos = reference.step(actions)
            assert raw.world._np_random.parked == []  # every parked treasure respawned
            joint = jnp.asarray([actions[a] for a in names], jnp.int32)
            obs_before, global_state, out = observe_and_step(step_key, state, joint)
            obs, next_state, reward, terminated, truncated, info = out
            where = f"collect_treasure episode {episode} step {raw.steps}"
            np.testing.assert_allclose(np.asarray(obs_before), expected_obs, atol=1e-5, err_msg=where)
            np.testing.assert_allclose(np.asarray(global_state), expected_global, atol=1e-5, err_msg=where)
            final = padded([obs_ref[a] for a in names], bare.observation_size)
            np.testing.assert_allclose(np.asarray(info["final_observation"]), final, atol=1e-4, err_msg=where)
            np.testing.assert_allclose(
                np.asarray(reward), [reward_ref[a] for a in names], atol=1e-4, err_msg=where
            )
            np.testing.assert_array_equal(np.asarray(terminated), [term_ref[a] for a in names])
            np.testing.assert_array_equal(np.asarray(truncated), [trunc_ref[a] for a in names])
            for name, value in mpe2_benchmark("collect_treasure", infos, names, t).items():
                np.testing.assert_array_equal(np.asarray(info["benchmark_data"][name]), value, err_msg=name)
            expected = inject_treasure(raw)
            if bool(np.all(np.asarray(truncated))):
                # Auto-reset: a fresh episode, its observation returned.
                assert int(next_state.time) == 0, where
                items = np.asarray(next_state.items)
                assert np.all(items[:c] == -1) and np.all(items[c + t : c + 2 * t] == 1), where
                np.testing.assert_allclose(np.asarray(obs), np.asarray(bare.get_obs(next_state)), atol=1e-6)
                resets.append(True)
            else:
                assert_fields_close(next_state, expected, ("agent_pos", "agent_vel", "landmark_pos"), where)
                np.testing.assert_array_equal(
                    np.asarray(next_state.items)[:-1], np.asarray(expected.items)[:-1]
                )
                np.testing.assert_allclose(np.asarray(obs), final, atol=1e-4, err_msg=where)
                resets.append(False)
            before, after = np.asarray(state.items), np.asarray(expected.items)
            picked = int(np.sum((before[c + t : c + 2 * t] == 1) & (after[c + t : c + 2 * t] == 0)))
            pickups += picked
            deliveries += int(np.sum((before[:c] >= 0) & (after[:c] < 0)))  # held, then empty-handed
            respawns += len(parked)
            flags.append((np.array([term_ref[a] for a in names]), np.array([trunc_ref[a] for a in names])))
            rewards.append(np.array([reward_ref[a] for a in names]))
    reference.close()
    counts = assert_parity_coverage(
        "MPE collect_treasure",
        terminated=np.concatenate([f for f, _ in flags]),
        truncated=np.concatenate([f for _, f in flags]),
        reward=np.concatenate(rewards),
        auto_reset=np.array(resets),
        never_terminates="mpe2's collect_treasure ends only at max_cycles",
    )
    assert counts.transitions == 100 * 8 and resets.count(True) == 4 and not any(resets[:24])
    # The rules were exercised, not only the physics.
    assert pickups >= 5 and deliveries >= 2 and respawns >= 5, (pickups, deliveries, respawns)


def test_collect_treasure_reset_and_rules_on_hand_built_states():
    env, params = le.make("MPE-collect_treasure-v1", autoreset=False)
    c, t = 6, 6
    _, states = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(jax.random.key(0), 512), params)
    items = np.asarray(states.items)
    assert (
        np.all(items[:, :c] == -1) and np.all(items[:, c + t : c + 2 * t] == 1) and np.all(items[:, -1] == 0)
    )
    assert set(np.unique(items[:, c : c + t])) == {0, 1}  # both types drawn
    landmarks = np.asarray(states.landmark_pos)
    assert np.all(np.abs(landmarks) <= 0.95) and np.max(np.abs(landmarks)) > 0.9
    assert np.max(np.abs(np.asarray(states.agent_pos))) > 0.95
    # Two empty-handed collectors on one treasure: the first takes it. The one holding type 1 on
    # deposit 1 delivers; the treasure parked since the last step respawns in the field.
    _, state = env.reset(jax.random.key(1), params)
    pos = np.asarray(state.agent_pos).copy()
    landmarks = np.asarray(state.landmark_pos).copy()
    pos[:c] = [[0.0, 0.0], [0.01, 0.0], [0.5, 0.5], [-0.5, -0.5], [0.9, -0.9], [-0.9, 0.9]]
    pos[c + 1] = [0.5, 0.5]  # deposit 1 under collector 2
    landmarks[0] = [0.0, 0.0]
    landmarks[3] = [-999.0, -999.0]
    holding = [-1, -1, 1, -1, -1, -1]
    kinds = [0, 1, 1, 0, 1, 0]
    alive = [1, 1, 1, 0, 1, 1]
    state = state.replace(
        agent_pos=jnp.asarray(pos),
        agent_vel=jnp.zeros_like(state.agent_vel),
        landmark_pos=jnp.asarray(landmarks, jnp.float32),
        items=jnp.asarray(holding + kinds + alive + [0], jnp.int32),
    )
    _, nxt, reward, _, _, _ = jax.jit(env.step)(jax.random.key(2), state, jnp.zeros((8,), jnp.int32), params)
    items = np.asarray(nxt.items)
    assert list(items[:c]) == [0, -1, -1, -1, -1, -1]  # collector 0 took treasure 0; 2 delivered
    assert items[c + t] == 0 and items[c + t + 3] == 1 and items[-1] == 2
    assert np.all(np.asarray(nxt.landmark_pos)[0] == -999.0)
    assert np.all(np.abs(np.asarray(nxt.landmark_pos)[3]) <= 0.95)
    # Collectors 0 and 1 overlap (0.01 apart): -5 each; every agent shares 2 x 5.
    assert np.asarray(reward)[1] < -5.0 + 10.0 and np.asarray(reward)[6] > 10.0 - 0.2
    frame = np.asarray(jax.jit(env.render)(nxt, params))  # the parked treasure does not zoom out
    assert frame.shape == (256, 256, 3) and frame[128, 128].tolist() != [255, 255, 255]


def mpe2_benchmark(scenario: str, infos: dict, names: list[str], num_landmarks: int) -> dict[str, np.ndarray]:
    """mpe2's per-agent ``benchmark_data`` (``infos[name]["benchmark_data"]``) in lamella's
    fields (see each scenario's ``benchmark``)."""
    data = [infos[name]["benchmark_data"] for name in names]
    if scenario == "simple_spread":
        return {k: np.array([d[i] for d in data]) for i, k in enumerate(SPREAD_BENCHMARK)}
    if scenario in ("simple_tag", "simple_world_comm"):
        return {"collisions": np.array(data)}
    if scenario == "simple_adversary":
        rows = [np.zeros(num_landmarks)] + [np.array(d[:-1]) for d in data[1:]]
        goal = [data[0]] + [d[-1] for d in data[1:]]
        return {"goal_sq_dist": np.array(goal), "landmark_sq_dists": np.stack(rows)}
    if scenario == "simple_crypto":
        return {"comm": np.stack([d[0] for d in data]), "goal_color": np.stack([d[1] for d in data])}
    if scenario == "simple_speaker_listener":
        return {"reward": np.array(data)}
    if scenario == "collect_treasure":
        collector = [name.startswith("collector") for name in names]
        return {
            "holding": np.array(
                [(-1 if d[0] is None else d[0]) if k else -1 for d, k in zip(data, collector)]
            ),
            "carriers": np.array([0 if k else d[0] for d, k in zip(data, collector)]),
            "treasures_on_field": np.array([d[1] for d in data]),
        }
    assert all(d == {} for d in data), data
    return {}


SPREAD_BENCHMARK = ("reward", "collisions", "min_dists", "occupied_landmarks")


@pytest.mark.parametrize(
    "scenario, seed",
    [
        ("simple_spread", 1),
        ("simple_tag", 2),
        ("simple_world_comm", 3),
        ("simple_adversary", 4),
        ("simple_crypto", 5),
        ("simple_speaker_listener", 6),
        ("simple_push", 7),
    ],
)
def test_benchmark_data_matches_mpe2(scenario, seed):
    """``benchmark_data=True``: every step of two episodes, from injected states, against mpe2's
    ``infos[agent]["benchmark_data"]``; the counts must be non-zero somewhere (contacts happened)."""
    module = MODULES[scenario]
    env, params = le.make(f"MPE-{scenario}-v{module[-1]}", autoreset=False, benchmark_data=True)
    step = jax.jit(env.step)
    reference = reference_env(scenario, False, benchmark_data=True)
    raw = reference.unwrapped
    rng = np.random.default_rng(seed)
    seen: dict[str, float] = {}
    steps = 0
    for episode in range(2):
        reference.reset(seed=10 * seed + episode)
        while reference.agents:
            state = inject(scenario, raw)
            names = list(reference.agents)
            joint = np.asarray([rng.integers(0, k) for k in env.num_actions_per_agent], np.int32)
            _, _, _, _, infos = reference.step({a: int(joint[i]) for i, a in enumerate(names)})
            info = step(jax.random.key(0), state, jnp.asarray(joint), params)[5]
            expected = mpe2_benchmark(scenario, infos, names, len(raw.world.landmarks))
            got = info["benchmark_data"]
            assert sorted(got) == sorted(expected), (sorted(got), sorted(expected))
            for key, value in expected.items():
                np.testing.assert_allclose(
                    np.asarray(got[key]), value, atol=1e-4, err_msg=f"{scenario} {key}"
                )
                seen[key] = seen.get(key, 0.0) + float(np.sum(np.abs(value)))
            steps += 1
    reference.close()
    assert steps == 2 * 25  # two whole episodes, each truncated on its 25th step
    assert all(total > 0 for total in seen.values()), seen
    if scenario == "simple_spread":  # the info's structure holds through auto-resets
        check_env(*le.make("MPE-simple_spread-v3", benchmark_data=True), num_steps=30, num_envs=2)


def test_stable_order_is_a_stable_argsort():
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 4, (64, 7)).astype(np.float32)  # many ties
    keys[:8] = rng.uniform(size=(8, 7))
    keys[8, :] = 1e6  # all tied
    got = np.asarray(jax.jit(mpe.core.stable_order)(jnp.asarray(keys)))
    np.testing.assert_array_equal(got, np.argsort(keys, axis=-1, kind="stable"))
    batched = np.asarray(jax.jit(jax.vmap(mpe.core.stable_order))(jnp.asarray(keys.reshape(8, 8, 7))))
    np.testing.assert_array_equal(batched.reshape(64, 7), got)


def test_spaces_match_mpe2():
    for scenario in MODULES:
        for continuous in (False, True):
            env, params = le.make(
                f"MPE-{scenario}-v{MODULES[scenario][-1]}", autoreset=False, continuous_actions=continuous
            )
            reference = reference_env(scenario, continuous)
            names = reference.possible_agents
            assert tuple(names) == env.agent_names
            assert env.observation_sizes == tuple(reference.observation_space(a).shape[0] for a in names)
            if continuous:
                assert env.action_sizes == tuple(reference.action_space(a).shape[0] for a in names)
            else:
                assert env.num_actions_per_agent == tuple(int(reference.action_space(a).n) for a in names)
            assert env.global_state_space(params).shape == reference.state_space.shape
            reference.close()


# Rules on hand-built states ---------------------------------------------------------------


def test_integration_order_and_padded_actions():
    env, params = le.make("MPE-simple_speaker_listener-v4", autoreset=False)
    _, state = env.reset(jax.random.key(0), params)
    state = state.replace(agent_vel=jnp.zeros((2, 2)))
    step = jax.jit(env.step)
    # The listener pushes right: position first, so it moves only from the second step.
    _, s1, *_ = step(jax.random.key(0), state, jnp.array([1, 2]), params)
    np.testing.assert_allclose(np.asarray(s1.agent_pos), np.asarray(state.agent_pos), atol=1e-7)
    np.testing.assert_allclose(np.asarray(s1.agent_vel[1]), [0.5, 0.0], atol=1e-6)
    np.testing.assert_allclose(np.asarray(s1.comm[0]), [0, 1, 0])  # the speaker said word 1
    _, s2, *_, info = step(jax.random.key(0), s1, jnp.array([0, 0]), params)
    np.testing.assert_allclose(np.asarray(s2.agent_pos[1] - s1.agent_pos[1]), [0.05, 0.0], atol=1e-6)
    # Padded ids (3, 4 for the speaker) and out-of-range ids act as action 0.
    np.testing.assert_array_equal(np.asarray(info["action_mask"]), [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    _, padded_state, *_ = step(jax.random.key(0), state, jnp.array([4, 7]), params)
    _, zero_state, *_ = step(jax.random.key(0), state, jnp.array([0, 0]), params)
    jax.tree.map(np.testing.assert_array_equal, padded_state, zero_state)
    np.testing.assert_array_equal(np.asarray(env.action_mask(state, params)), np.asarray(info["action_mask"]))


def test_speed_limit_and_contact_force():
    env, params = le.make("MPE-simple_tag-v3", autoreset=False)
    _, state = env.reset(jax.random.key(1), params)
    # Prey (agent 3) already at 1.3 pushing on: its speed stays at max_speed 1.3.
    far = jnp.array([[-0.8, -0.8], [0.8, -0.8], [-0.8, 0.8], [0.0, 0.0]])
    state = state.replace(
        agent_pos=far,
        agent_vel=jnp.array([[0, 0], [0, 0], [0, 0], [1.3, 0.0]]),
        landmark_pos=jnp.array([[0.5, 0.5], [-0.5, 0.5]]),
    )
    step = jax.jit(env.step)
    _, after, *_ = step(jax.random.key(0), state, jnp.array([0, 0, 0, 2]), params)
    np.testing.assert_allclose(float(jnp.linalg.norm(after.agent_vel[3])), 1.3, rtol=1e-6)
    # Two overlapping agents push each other apart, equally and oppositely.
    touching = far.at[1].set(jnp.array([-0.75, -0.8]))
    resting = state.replace(agent_pos=touching, agent_vel=jnp.zeros((4, 2)))
    _, after, *_ = step(jax.random.key(0), resting, jnp.zeros(4, jnp.int32), params)
    np.testing.assert_allclose(np.asarray(after.agent_vel[0] + after.agent_vel[1]), [0, 0], atol=1e-5)
    assert float(after.agent_vel[0, 0]) < -0.5 and float(after.agent_vel[1, 0]) > 0.5


# Conformance, ids, bad input ----------------------------------------------------------------

# check_env compiles about ten programs per env (about 9 s of CPU each here), so it runs once per
# scenario: continuous actions on speaker_listener (heterogeneous Box rows), discrete elsewhere
# (padded ids with a mask on world_comm). Every scenario's observations, rewards, flags and
# auto-reset are also compared with mpe2 by the parity test above.
CHECK_CASES = [
    ("simple", False),
    ("simple_spread", False),
    ("simple_speaker_listener", True),
    ("simple_tag", False),
    ("simple_world_comm", False),
    ("simple_adversary", False),
    ("simple_reference", False),
    ("simple_push", False),
    ("simple_crypto", False),
    ("simple_formation", False),
    ("simple_line", False),
    ("collect_treasure", True),
]


def test_check_cases_cover_every_scenario():
    assert {scenario for scenario, _ in CHECK_CASES} == set(MODULES)


@pytest.mark.parametrize("scenario, continuous", CHECK_CASES)
def test_check_env(scenario, continuous):
    # 30 steps cross the 25-step limit, so check_env sees an auto-reset.
    env, params = le.make(f"MPE-{scenario}-v{MODULES[scenario][-1]}", continuous_actions=continuous)
    check_env(env, params, num_steps=30, num_envs=2)


@pytest.mark.parametrize(
    ("env_id", "shape"),
    [
        ("MPE-simple_spread-v3", (3, 4 + 2 * 2 + 4 * 1)),
        ("MPE-simple_tag-v3", (4, 4 + 2 * 2 + 4 * 1)),  # every agent the same width
        ("MPE-simple_adversary-v3", (3, 2 + 2 * 2 + 2 * 1)),  # the adversary's 6 padded to 8
    ],
)
def test_partial_observability_passes_check_env(env_id, shape):
    env, params = le.make(env_id, num_agent_neighbors=1, num_landmark_neighbors=2)
    assert env.observation_space(params).shape == shape
    check_env(env, params, num_steps=30, num_envs=2)


def test_ids():
    assert mpe.env_ids() == [f"MPE-{name}-v{module[-1]}" for name, module in MODULES.items()]
    assert set(mpe.env_ids()) <= set(le.registered(variants=False))
    env, params = le.make(
        "MPE-simple_spread-v3", N=5, local_ratio=0.25, max_cycles=40, continuous_actions=True
    )
    assert env.num_agents == 5 and env.action_space(params).shape == (5, 5)
    assert (int(params.max_cycles), float(params.local_ratio)) == (40, 0.25)
    assert le.registry.env_family("MPE-simple_tag-v3") == "multi_agent"


def test_bad_input_is_rejected_clearly():
    with pytest.raises(ValueError, match=r"unknown scenario 'simple_spred'.*simple_spread"):
        MultiParticleEnv("simple_spred")
    with pytest.raises(TypeError, match=r"simple_push takes no \['N'\]"):
        MultiParticleEnv("simple_push", N=3)
    with pytest.raises(ValueError, match="N must be an integer >= 1"):
        le.make("MPE-simple_spread-v3", N=0)
    # A whole float passed the check and then failed inside the scenario ('float' object cannot be
    # interpreted as an integer); it is taken as the integer, as every other size setting is.
    assert le.make("MPE-simple_spread-v3", N=4.0)[0].num_agents == 4
    assert le.make("MPE-simple_tag-v3", num_good=2.0, num_obstacles=0.0)[0].num_agents == 5
    # A negative stiffness pulled touching entities together, silently.
    with pytest.raises(le.EnvInputError, match=r"contact_force must be >= 0\.0, got -1\.0"):
        le.make("MPE-simple_spread-v3", contact_force=-1.0)
    with pytest.raises(ValueError, match="num_agent_neighbors must be an integer >= 1, got 0"):
        le.make("MPE-simple_spread-v3", num_agent_neighbors=0)
    with pytest.raises(ValueError, match=r"num_landmark_neighbors must be an integer >= 1, got 1\.5"):
        le.make("MPE-simple_spread-v3", num_landmark_neighbors=1.5)
    with pytest.raises(ValueError, match="num_landmark_neighbors must be an integer >= 1, got 0"):
        le.make("MPE-simple_tag-v3", num_landmark_neighbors=0)
    with pytest.raises(TypeError, match=r"simple_push takes no \['num_agent_neighbors'\]"):
        MultiParticleEnv("simple_push", num_agent_neighbors=2)
    with pytest.raises(ValueError, match="benchmark_data must be True or False, got 1"):
        le.make("MPE-simple_tag-v3", benchmark_data=1)
    with pytest.raises(ValueError, match="curriculum must be True or False, got 'yes'"):
        le.make("MPE-simple_spread-v3", curriculum="yes")
    # "no" is truthy: it built the continuous-action env, silently.
    with pytest.raises(ValueError, match="continuous_actions must be True or False, got 'no'"):
        le.make("MPE-simple_spread-v3", continuous_actions="no")
    with pytest.raises(TypeError, match=r"simple_tag takes no \['curriculum'\]"):
        MultiParticleEnv("simple_tag", curriculum=True)
    with pytest.raises(ValueError, match="takes no local_ratio"):
        MultiParticleEnv("simple_tag", local_ratio=0.5)
    with pytest.raises(TypeError, match="unknown override"):
        le.make("MPE-simple_tag-v3", local_ratio=0.5)
    with pytest.raises(ValueError, match=r"local_ratio must be in \[0, 1\]"):
        le.make("MPE-simple_spread-v3", local_ratio=1.5)
    env, params = le.make("MPE-simple_spread-v3", autoreset=False)
    _, state = env.reset(jax.random.key(0), params)
    with pytest.raises(le.EnvInputError, match=r"shape \(3,\)"):
        env.step(jax.random.key(0), state, jnp.zeros((2,), jnp.int32), params)  # two agents' actions
    with pytest.raises(le.EnvInputError, match="an integer"):
        env.step(jax.random.key(0), state, jnp.zeros((3,), jnp.float32), params)
    env, params = le.make("MPE-simple_spread-v3", autoreset=False, continuous_actions=True)
    with pytest.raises(le.EnvInputError, match=r"shape \(3, 5\)"):
        env.step(jax.random.key(0), state, jnp.zeros((3,), jnp.float32), params)
    with pytest.raises(AttributeError, match="no action mask"):
        env.action_mask(state, params)
    # A batch of 3 states outside vmap: simple_formation returned one (72,) vector (three envs'
    # observations end to end) where one env's is (24,), silently; the others failed inside.
    env, params = le.make("MPE-simple_formation-v1", autoreset=False)
    states = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(jax.random.key(0), 3), params)[1]
    with pytest.raises(
        le.EnvInputError, match=r"global_state: `state` is a batch of 3 .*jax\.vmap\(env\.global_state"
    ):
        env.global_state(states, params)
    assert jax.vmap(env.global_state, in_axes=(0, None))(states, params).shape == (3, 24)


def test_render_shows_agents_and_landmarks():
    env, params = le.make("MPE-simple_spread-v3", autoreset=False)
    _, state = env.reset(jax.random.key(0), params)
    state = state.replace(agent_pos=jnp.array([[0.0, 0.0], [0.5, 0.5], [-0.5, -0.5]]))
    frame = np.asarray(jax.jit(env.render)(state, params))
    assert frame.shape == (256, 256, 3) and frame.dtype == np.uint8
    center = frame[128, 128]  # agent 0 at the origin, blue
    assert center[2] > 150 and center[0] < 120, center
    assert np.all(frame[2, 2] == 255)  # background
    frames = jax.jit(jax.vmap(env.render, in_axes=(0, None)))(
        jax.tree.map(lambda x: jnp.stack([x, x]), state), params
    )
    assert frames.shape == (2, 256, 256, 3)


def test_single_agent_simple_has_no_agent_axis():
    env, params = le.make("MPE-simple-v3", autoreset=False)
    obs, state = env.reset(jax.random.key(0), params)
    assert env.num_agents == 1 and obs.shape == (4,)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, _, reward, terminated, truncated, _ = jax.jit(env.step)(
            jax.random.key(0), state, jnp.int32(2), params
        )
    assert reward.shape == terminated.shape == truncated.shape == ()
