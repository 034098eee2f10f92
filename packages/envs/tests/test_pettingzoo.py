"""lamella -> PettingZoo ParallelEnv adapter, checked with PettingZoo's own API and seed tests."""

import subprocess
import sys
import warnings

import gymnasium
import jax
import numpy as np
import pytest
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test
from pettingzoo.utils.conversions import parallel_to_aec

import lamella.envs as le
from lamella.envs import spaces, struct
from lamella.envs.adapters.pettingzoo import PettingZooParallelEnv
from lamella.envs.environment import Environment

LBF_IDS = ["Foraging-8x8-2p-2f-v3", "Foraging-2s-8x8-2p-2f-coop-v3"]
# One RWARE id for its family, with a 100-step limit (see `adapters`) so an episode ends in the test.
RWARE_IDS = ["rware-tiny-2ag-v2"]
# Every MPE scenario with more than one agent: each is its own module, with its own mix of agents
# (speaker and listener, predators and prey, a leader that talks, immovable talkers) padded to
# one shape. MPE-simple-v3 has one agent, so it is a single-agent env the adapter refuses.
# simple_spread first: the transitions test below takes MPE_IDS[0].
MPE_IDS = sorted(
    (
        env_id
        for env_id in le.registered()
        if env_id.startswith("MPE-") and le.make(env_id, autoreset=False)[0].num_agents > 1
    ),
    key=lambda env_id: env_id != "MPE-simple_spread-v3",
)
# One SMAX id for its family (every scenario is the same env class, test_smax.py): allies die
# one by one, so agents leave `agents` before the episode ends.
SMAX_IDS = ["SMAX-3m-v0"]
# Every other multi-agent main id: the matrix games, Pax's games (IPD and IMP in the Matrix, the
# tensor games, Cournot, Fishery) and CoinGame. LBF's, RWARE's and SMAX's other ids are the same
# env class with other sizes (their own test files cover those).
MATRIX_IDS = [
    env_id
    for env_id in le.registered(variants=False)
    if not env_id.startswith(("Foraging-", "rware-", "MPE-", "SMAX-"))
    and le.make(env_id, autoreset=False)[0].num_agents > 1
]
IDS = MATRIX_IDS + LBF_IDS + RWARE_IDS + MPE_IDS + SMAX_IDS
# Enough cycles to play a whole episode (matrix games: 100 rounds, LBF: 50 steps), so the checks
# see `agents` empty out at the end.
NUM_CYCLES = 110

# With action_mask_in="obs" each observation is {"observation": Box, "action_mask": Box}, PettingZoo's
# own convention for masks (parallel_api_test samples from it), but api_test recommends plain Box or
# Discrete observations and arrays; these two warnings, and only these, are deliberate there.
OBS_DICT_WARNINGS = (
    "Observation space for each agent probably should be gymnasium.spaces.box or gymnasium.spaces.discrete",
    "Observation is not a NumPy array",
)


@pytest.fixture(scope="module")
def adapters():
    """One adapter per (id, mask place), built once: their jitted programs are shared by the tests."""
    cache = {}

    def get(env_id, action_mask_in="info"):
        if (env_id, action_mask_in) not in cache:
            source, params = (env_id, None)
            if env_id in RWARE_IDS:
                source, params = le.make(env_id, autoreset=False, max_steps=100)
            cache[env_id, action_mask_in] = PettingZooParallelEnv(
                source, params, render_mode="rgb_array", action_mask_in=action_mask_in
            )
        return cache[env_id, action_mask_in]

    return get


def test_ids_cover_every_multi_agent_family():
    assert "IteratedPrisonersDilemma-v0" in MATRIX_IDS and "InfiniteMatrixGame-v0" in MATRIX_IDS
    assert {"IPDInTheMatrix-v0", "IMPInTheMatrix-v0", "CoinGame-v0"} <= set(MATRIX_IDS)
    assert {"IteratedTensorGame-v0", "Cournot-v0", "Fishery-v0"} <= set(MATRIX_IDS)
    assert len(MATRIX_IDS) >= 12
    assert len(MPE_IDS) == 11
    assert {"MPE-simple_world_comm-v3", "MPE-simple_line-v1", "MPE-collect_treasure-v1"} <= set(MPE_IDS)
    for env_id in LBF_IDS + RWARE_IDS + MPE_IDS + SMAX_IDS:
        assert env_id in le.registered(variants=False)
    with pytest.raises(ValueError, match="single-agent"):
        PettingZooParallelEnv("MPE-simple-v3")


def _fresh_adapters(env_id, adapters):
    """parallel_seed_test's factory: each call builds a new adapter (its own key, state, agents and
    seeded spaces) that runs the module's compiled reset and step for ``env_id``, so the seed test
    costs no compile of its own. Adapters compiled from scratch are seed-tested with masks in the
    observations (below)."""
    shared = adapters(env_id)

    def build():
        env = PettingZooParallelEnv(shared.lamella_env, shared.params)
        env._reset_fn, env._step_fn = shared._reset_fn, shared._step_fn
        return env

    return build


# MPE observations are unbounded, as mpe2's own spaces (Box(-inf, inf)) are; api_test warns about
# that and only that.
UNBOUNDED_WARNINGS = (
    "Agent's minimum observation space value is -infinity. This is probably too low.",
    "Agent's maximum observation space value is infinity. This is probably too high",
)


# A dead SMAX ally observes all zeros (JaxMARL's observation), and so does simple_crypto's Eve
# before Alice first speaks (she observes only Alice's utterance, silent at reset, as in mpe2);
# api_test warns when it sees one.
ZERO_OBS_WARNING = "Observation numpy array is all zeros."
ZERO_OBS_IDS = (*SMAX_IDS, "MPE-simple_crypto-v3")


@pytest.mark.parametrize("env_id", IDS)
def test_pettingzoo_api_tests_pass_without_warnings(env_id, adapters):
    env = adapters(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parallel_api_test(env, num_cycles=NUM_CYCLES)
        parallel_seed_test(_fresh_adapters(env_id, adapters), num_cycles=NUM_CYCLES)
    # MPE observations are unbounded and IPD/IMP in the Matrix observe a dict (view and inventory,
    # as in Pax): api_test warns about exactly that there, and nothing else anywhere.
    dict_obs = isinstance(env.observation_space(env.possible_agents[0]), gymnasium.spaces.Dict)
    expected = set(UNBOUNDED_WARNINGS) if env_id in MPE_IDS else set()
    allowed = expected | (set(OBS_DICT_WARNINGS) if dict_obs else set())
    if env_id in ZERO_OBS_IDS:
        allowed.add(ZERO_OBS_WARNING)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        api_test(parallel_to_aec(env), num_cycles=NUM_CYCLES)
    messages = {str(w.message) for w in caught}
    assert expected <= messages <= allowed, f"unexpected warnings: {messages - allowed}"


@pytest.mark.parametrize("env_id", LBF_IDS)
def test_pettingzoo_api_tests_with_masks_in_observations(env_id, adapters):
    env = adapters(env_id, "obs")
    assert set(env.observation_space("agent_0")) == {"observation", "action_mask"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parallel_api_test(env, num_cycles=NUM_CYCLES)
        parallel_seed_test(lambda: PettingZooParallelEnv(env_id, action_mask_in="obs"), num_cycles=NUM_CYCLES)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        api_test(parallel_to_aec(env), num_cycles=NUM_CYCLES)
    messages = {str(w.message) for w in caught}
    assert messages <= set(OBS_DICT_WARNINGS), f"unexpected warnings: {messages - set(OBS_DICT_WARNINGS)}"
    assert messages, "api_test no longer warns about dict observations; drop OBS_DICT_WARNINGS"


@pytest.mark.parametrize("env_id", LBF_IDS)
def test_masks_state_and_render_on_lbf(env_id, adapters):
    env = adapters(env_id)
    lamella_env = env.lamella_env
    obs, infos = env.reset(seed=1)
    assert env.agents == env.possible_agents == [f"agent_{i}" for i in range(lamella_env.num_agents)]
    for agent in env.agents:
        mask = infos[agent]["action_mask"]
        assert mask.shape == (env.action_space(agent).n,) and mask.dtype == np.int8
        assert mask[0] == 1  # NONE is always legal
        assert env.observation_space(agent).contains(obs[agent])
        assert env.observation_space(agent) is env.observation_space(agent)
        assert env.action_space(agent) is env.action_space(agent)
    state = env.state()
    assert env.state_space.contains(state)
    np.testing.assert_array_equal(state, np.asarray(lamella_env.global_state(env._state, env.params)))
    frame = env.render()
    assert (
        isinstance(frame, np.ndarray) and frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    )
    masked = env.reset(seed=1)[0]
    obs_env = adapters(env_id, "obs")
    obs_masked, _ = obs_env.reset(seed=1)
    for agent in env.agents:
        np.testing.assert_array_equal(obs_masked[agent]["observation"], masked[agent])
        np.testing.assert_array_equal(obs_masked[agent]["action_mask"], infos[agent]["action_mask"])


def test_matrix_games_have_no_state_or_mask(adapters):
    env = adapters("IteratedPrisonersDilemma-v0")
    _, infos = env.reset(seed=0)
    assert infos == {"agent_0": {}, "agent_1": {}}
    assert not hasattr(env, "state_space")
    with pytest.raises(NotImplementedError, match="global_state"):
        env.state()


@pytest.mark.parametrize(
    "env_id", ["IteratedPrisonersDilemma-v0", "InfiniteMatrixGame-v0", LBF_IDS[0], MPE_IDS[0]]
)
def test_transitions_equal_the_lamella_env_for_the_same_key(env_id, adapters):
    env = adapters(env_id)
    lamella_env, params = env.lamella_env, env.params
    seed, steps = 7, 12
    obs, _ = env.reset(seed=seed)
    key = jax.random.key(seed)
    key, key_reset = jax.random.split(key)
    # Compiled like the adapter's (eager and compiled float math may differ in the last bits).
    reset, step = jax.jit(lamella_env.reset), jax.jit(lamella_env.step)
    ref_obs, ref_state = reset(key_reset, params)
    rng = np.random.default_rng(0)
    for agent in env.possible_agents:
        env.action_space(agent).seed(int(rng.integers(2**31)))
    for t in range(steps):
        for i, agent in enumerate(env.possible_agents):
            np.testing.assert_allclose(obs[agent], np.asarray(ref_obs[i]), rtol=1e-6, err_msg=f"step {t}")
        actions = {agent: env.action_space(agent).sample() for agent in env.agents}
        joint = np.stack([actions[agent] for agent in env.possible_agents])
        obs, rewards, terminations, truncations, infos = env.step(actions)
        key, key_step = jax.random.split(key)
        ref_obs, ref_state, reward, terminated, truncated, info = step(
            key_step, ref_state, jax.numpy.asarray(joint, lamella_env.action_space(params).dtype), params
        )
        for i, agent in enumerate(env.possible_agents):
            assert rewards[agent] == pytest.approx(float(reward[i]), rel=1e-6)
            assert terminations[agent] == bool(terminated[i]) and truncations[agent] == bool(truncated[i])
            if "action_mask" in info:
                np.testing.assert_array_equal(infos[agent]["action_mask"], np.asarray(info["action_mask"][i]))
    # One compiled program for reset and for step, however many calls.
    assert env._step_fn._cache_size() == 1 and env._reset_fn._cache_size() == 1


def test_agents_empty_at_episode_end_and_step_then_needs_reset(adapters):
    env = adapters("IteratedPrisonersDilemma-v0")
    env.reset(seed=0)
    steps = 0
    while env.agents:
        _, _, terminations, truncations, _ = env.step(dict.fromkeys(env.agents, 1))
        steps += 1
    assert steps == 100 and all(truncations.values()) and not any(terminations.values())
    assert env.agents == []
    with pytest.raises(RuntimeError, match="call reset"):
        env.step({"agent_0": 0, "agent_1": 0})


def test_seeded_resets_repeat_and_unseeded_resets_continue(adapters):
    env = adapters(LBF_IDS[0])
    first, _ = env.reset(seed=3)
    again, _ = env.reset(seed=3)
    following, _ = env.reset()
    for agent in env.possible_agents:
        np.testing.assert_array_equal(first[agent], again[agent])
    assert any(not np.array_equal(first[a], following[a]) for a in env.possible_agents)


def test_actions_outside_the_space_and_seeds_beyond_32_bits(adapters):
    """An action outside Discrete(n) was stepped as some other action, silently; seed 2**32 gave
    seed 0's episode (jax.random.key keeps 32 bits) and 2**64 an OverflowError from inside JAX."""
    env = adapters(LBF_IDS[0])
    first, _ = env.reset(seed=0)
    for action in [99, -1]:
        with pytest.raises(le.EnvInputError, match=rf"agent_0's action {action} is outside the action space"):
            env.step({"agent_0": action, "agent_1": 0})
    beyond, _ = env.reset(seed=2**32)
    assert any(not np.array_equal(first[a], beyond[a]) for a in env.possible_agents)
    env.reset(seed=2**64)


def test_bad_input_gives_clear_errors(adapters):
    env = adapters("IteratedPrisonersDilemma-v0")
    env.reset(seed=0)
    with pytest.raises(KeyError, match=r"unknown agent.*'player_9'"):
        env.step({"agent_0": 0, "agent_1": 0, "player_9": 0})
    with pytest.raises(KeyError, match=r"no action for agent\(s\) \['agent_1'\]"):
        env.step({"agent_0": 0})
    with pytest.raises(KeyError, match="unknown agent 'nobody'"):
        env.action_space("nobody")
    with pytest.raises(KeyError, match="unknown agent"):
        env.observation_space(3)
    with pytest.raises(TypeError, match="takes a dict"):
        env.step([0, 0])
    with pytest.raises(ValueError, match="shape"):
        env.step({"agent_0": [0, 1], "agent_1": 0})
    # The joint action is an int array: 1.7 was stored as 1 and "1" as 1, silently.
    with pytest.raises(
        le.EnvInputError, match=r"agent_0's action in Discrete\(2\).*an integer; got the Python float 1\.7"
    ):
        env.step({"agent_0": 1.7, "agent_1": 0})
    with pytest.raises(le.EnvInputError, match=r"agent_1's action must be an array .*got str '1'"):
        env.step({"agent_0": 0, "agent_1": "1"})
    with pytest.raises(ValueError, match=r"single-agent.*GymnasiumEnv"):
        PettingZooParallelEnv("CartPole-v1")
    with pytest.raises(ValueError, match="autoreset=False"):
        PettingZooParallelEnv(le.make("IteratedPrisonersDilemma-v0")[0])
    with pytest.raises(ValueError, match="action_mask_in"):
        PettingZooParallelEnv("IteratedPrisonersDilemma-v0", action_mask_in="state")
    with pytest.raises(TypeError, match="registered id"):
        PettingZooParallelEnv(42)
    with pytest.raises(RuntimeError, match="reset"):
        PettingZooParallelEnv("IteratedPrisonersDilemma-v0").step({"agent_0": 0, "agent_1": 0})


def test_continuous_actions_have_no_mask_and_reset():
    """MPE with continuous actions defines action_mask only to refuse it (no mask for a Box): the
    adapter asked it for one at reset and failed with that AttributeError."""
    env = PettingZooParallelEnv(
        le.make("MPE-simple_spread-v3", N=2, continuous_actions=True, autoreset=False)[0]
    )
    observations, infos = env.reset(seed=0)
    assert set(observations) == {"agent_0", "agent_1"} and infos == {"agent_0": {}, "agent_1": {}}
    assert isinstance(env.action_space("agent_0"), gymnasium.spaces.Box)


class _StaggeredParams(struct.PyTreeNode):
    pass


class _StaggeredEnds(Environment):
    """Three agents; agent i terminates after i + 1 steps (its flag then stays True, as the
    multi-agent contract says), so `agents` must shrink one by one. Only the adapter's
    bookkeeping is under test: no lamella env ends agents one at a time yet."""

    num_agents = 3
    stochastic_step = False

    @property
    def default_params(self):
        return _StaggeredParams()

    def reset_env(self, key, params):
        time = jax.numpy.zeros((), jax.numpy.int32)
        return self._obs(time), time

    def _obs(self, time):
        agent = jax.numpy.arange(1, 4, dtype=jax.numpy.float32)
        return jax.numpy.stack([jax.numpy.full((3,), time + 1.0), agent], -1)

    def step_env(self, key, time, action, params):
        time = time + 1
        terminated = time >= jax.numpy.arange(1, 4)
        reward = jax.numpy.where(time <= jax.numpy.arange(1, 4), 1.0 + action, 0.0).astype(jax.numpy.float32)
        return self._obs(time), time, reward, terminated, jax.numpy.zeros((3,), bool), {}

    def observation_space(self, params=None):
        return spaces.Box(0.0, 10.0, (3, 2), jax.numpy.float32)

    def action_space(self, params=None):
        return spaces.MultiDiscrete([2, 2, 2])


def test_agents_leave_one_by_one_as_they_finish():
    env = PettingZooParallelEnv(_StaggeredEnds())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parallel_api_test(env, num_cycles=10)
        api_test(parallel_to_aec(env), num_cycles=10)
        parallel_seed_test(lambda: PettingZooParallelEnv(_StaggeredEnds()), num_cycles=10)
    env.reset(seed=0)
    seen = []
    while env.agents:
        acting = list(env.agents)
        _, rewards, terminations, _, _ = env.step(dict.fromkeys(env.agents, 1))
        assert set(rewards) == set(terminations) == set(acting)
        assert rewards == dict.fromkeys(acting, 2.0)
        seen.append(list(env.agents))
    assert seen == [["agent_1", "agent_2"], ["agent_2"], []]
    with pytest.raises(NotImplementedError, match="global_state"):
        env.state()


def test_finished_agents_cannot_act(adapters):
    env = adapters("IteratedPrisonersDilemma-v0")
    env.reset(seed=0)
    env.agents = ["agent_0"]  # as if agent_1 had finished early
    with pytest.raises(KeyError, match=r"agent_1.*already finished"):
        env.step({"agent_0": 0, "agent_1": 0})
    _, rewards, *_ = env.step({"agent_0": 1})
    assert set(rewards) == {"agent_0"}


def test_importing_lamella_envs_does_not_import_pettingzoo():
    code = (
        "import sys, lamella.envs, lamella.envs.adapters; "
        "assert 'pettingzoo' not in sys.modules and 'gymnasium' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_nested_info_is_split_per_agent():
    # MPE's benchmark_data is a dict of per-agent arrays: each agent gets its own entries, as
    # mpe2's infos[agent]["benchmark_data"] holds that agent's.
    env, params = le.make("MPE-simple_spread-v3", autoreset=False, benchmark_data=True)
    adapter = PettingZooParallelEnv(env, params)
    adapter.reset(seed=0)
    *_, infos = adapter.step({agent: 1 for agent in adapter.agents})
    names = ("collisions", "min_dists", "occupied_landmarks", "reward")
    for agent in adapter.agents:
        data = infos[agent]["benchmark_data"]
        assert sorted(data) == list(names) and all(np.ndim(data[name]) == 0 for name in names)
    # min_dists is the same for every agent (the landmarks' nearest agents); reward adds each one's collisions.
    assert len({float(infos[a]["benchmark_data"]["min_dists"]) for a in adapter.agents}) == 1
    for agent in adapter.agents:
        data = infos[agent]["benchmark_data"]
        assert float(data["reward"]) == pytest.approx(-float(data["min_dists"]) - int(data["collisions"]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=".*infinity. This is probably too")
        parallel_api_test(adapter, num_cycles=10)
