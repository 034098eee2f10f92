"""The JaxMARL adapter (``lamella.envs.adapters.jaxmarl``) against ``jaxmarl==0.2.0`` itself.

Adapted envs pass ``check_env`` and equal JaxMARL's own public ``step`` (with its auto-reset)
step by step, driven with the same keys and the same random legal actions; the compared steps
must include episode ends and non-zero rewards.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs
from lamella.envs.adapters.jaxmarl import JaxMARLError, from_jaxmarl
from lamella.envs.errors import is_user_error
from lamella.envs.testing import assert_parity_coverage, check_env, fast_compile_options

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Overcooked's DeprecationWarning (use OvercookedV2)
    import jaxmarl

# name -> (jaxmarl id, settings, envs x steps compared, coverage reasons).
# Short time limits so the compared steps reach time-limit ends as well as game ends.
CASES = {
    "smax": ("HeuristicEnemySMAX", {"scenario": "3m", "max_steps": 20}, (8, 48), {}),
    # Overcooked rewards only a delivered soup; random_reset starts some agents next to one.
    "overcooked": (
        "overcooked",
        {"layout": "cramped_room", "random_reset": True, "max_steps": 50},
        (16, 100),
        {"never_terminates": "Overcooked ends only at max_steps"},
    ),
    "hanabi": ("hanabi", {}, (8, 48), {"never_truncates": "Hanabi has no step limit"}),
    # Heterogeneous agents (a speaker and a listener): padded observations and action ids.
    "speaker_listener": ("MPE_simple_speaker_listener_v4", {}, None, {}),
}
# Compiling JaxMARL's steps dominates this file's time: conformance on three envs (SMAX,
# Overcooked and the padded MPE one), step-by-step parity on three (SMAX, Overcooked, Hanabi).
CHECK_ENV = ["smax", "overcooked", "speaker_listener"]
PARITY = ["smax", "overcooked", "hanabi"]


def _build(name: str):
    jaxmarl_id, settings, _, _ = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return from_jaxmarl(jaxmarl_id, **settings)


@pytest.mark.parametrize("name", CHECK_ENV)
def test_check_env(name):
    check_env(_build(name), num_steps=8, num_envs=2)


def _rollout(env, name: str, num_steps: int):
    """One episode stream of JaxMARL's ``step`` and the adapter's bare ``step`` + ``reset_done``
    on the same keys and actions (random legal actions, drawn from the adapter's mask)."""
    jm = env.jaxmarl_env
    agents = env.agent_names

    def stack(values):
        return jnp.stack([jnp.asarray(values[a]) for a in agents])

    def run(key):
        key, reset_key = jax.random.split(key)
        jm_obs, jm_state = jm.reset(reset_key)
        obs, state = env.reset(reset_key)
        start = (
            jnp.array_equal(stack(jm_obs).reshape(obs.shape).astype(obs.dtype), obs),
            jnp.all(jnp.array(jax.tree.leaves(jax.tree.map(jnp.array_equal, jm_state, state.env_state)))),
        )

        def body(carry, step_key):
            jm_state, state = carry
            action_key, step_key = jax.random.split(step_key)
            mask = env.action_mask(state)
            action = jax.random.categorical(action_key, jnp.where(mask, 0.0, -jnp.inf)).astype(jnp.int32)
            jm_out = jm.step(step_key, jm_state, {a: action[i] for i, a in enumerate(agents)})
            jm_obs, jm_next, jm_reward, jm_dones, jm_info = jm_out
            # JaxMARL's step: key, key_reset = split(key); step_env(key); reset(key_reset) where done.
            inner_key, reset_key = jax.random.split(step_key)
            obs, after, reward, terminated, truncated, info = env.step(inner_key, state, action)
            done = lamella.envs.episode_done(terminated, truncated)
            next_obs, next_state = env.reset_done(reset_key, done, after, obs)
            same_state = jnp.all(
                jnp.array(jax.tree.leaves(jax.tree.map(jnp.array_equal, jm_next, next_state.env_state)))
            )
            out = {
                "jm_obs": stack(jm_obs).reshape(obs.shape).astype(obs.dtype),
                "obs": next_obs,
                "jm_reward": stack(jm_reward),
                "reward": reward,
                "jm_agent_dones": stack(jm_dones),
                "jm_done": jm_dones["__all__"],
                "terminated": terminated,
                "truncated": truncated,
                "same_state": same_state,
                "mask": mask,
                "action": action,
                "after_state": after.env_state,
            }
            if hasattr(env, "global_state"):
                out["jm_world_state"] = jm_obs["world_state"]
                out["world_state"] = env.global_state(next_state)
            if name in ("smax", "hanabi"):  # JaxMARL's masks, padded by none here
                legal = jm.get_avail_actions if name == "smax" else jm.get_legal_moves
                out["jm_avail"] = stack(legal(jm_state)).astype(bool)
            return (jm_next, next_state), out

        _, outs = jax.lax.scan(body, (jm_state, state), jax.random.split(key, num_steps))
        return start, outs

    return run


@pytest.mark.parametrize("name", PARITY)
def test_steps_equal_jaxmarls_own_step_on_the_same_keys(name):
    env = _build(name)
    _, _, (num_envs, num_steps), reasons = CASES[name]
    # Compiling both steps is most of this test's time; the fast options nearly halve it. Not for
    # SMAX: its float observations are compared exactly, and under the fast options JaxMARL's and
    # ours differ in the last bits (10 of 86,400 values, 1.3e-6 relative) although they run the
    # same code; Overcooked and Hanabi compare integers.
    options = {} if name == "smax" else fast_compile_options()
    start, outs = jax.jit(jax.vmap(_rollout(env, name, num_steps)), compiler_options=options)(
        jax.random.split(jax.random.key(1), num_envs)
    )
    outs = jax.device_get(outs)
    assert np.all(start[0]) and np.all(start[1]), "reset differs from JaxMARL's on the same key"
    np.testing.assert_array_equal(outs["obs"], outs["jm_obs"])
    np.testing.assert_array_equal(outs["reward"], outs["jm_reward"])
    assert outs["same_state"].all(), "the env state differs from JaxMARL's"
    done = np.all(outs["terminated"] | outs["truncated"], axis=-1)
    np.testing.assert_array_equal(done, outs["jm_done"])
    # An agent JaxMARL calls done is done here too, and terminated/truncated never overlap.
    assert np.all(~outs["jm_agent_dones"] | outs["terminated"] | outs["truncated"])
    assert not np.any(outs["terminated"] & outs["truncated"])
    if "jm_avail" in outs:
        np.testing.assert_array_equal(outs["mask"], outs["jm_avail"])
    if "world_state" in outs:
        np.testing.assert_array_equal(outs["world_state"], outs["jm_world_state"])
    # The split of an episode end into terminated and truncated follows the documented rule.
    ended_by_limit = np.any(outs["truncated"], axis=-1)
    ended_by_game = done & ~ended_by_limit
    after = outs["after_state"]
    if name == "smax":
        alive = after.state.unit_alive
        battle_over = ~alive[..., :3].any(-1) | ~alive[..., 3:].any(-1)
        np.testing.assert_array_equal(ended_by_game, done & battle_over)
        assert np.all(after.state.step[ended_by_limit] >= 20)
        dead = ~alive[..., :3]
        np.testing.assert_array_equal(outs["terminated"] & ~done[..., None], dead & ~done[..., None])
    if name == "overcooked":
        np.testing.assert_array_equal(ended_by_limit, done)
        assert np.all(after.step[done] == 50)
    if name == "hanabi":
        np.testing.assert_array_equal(ended_by_game, done)
    assert_parity_coverage(
        f"jaxmarl:{name}",
        terminated=outs["terminated"],
        truncated=outs["truncated"],
        reward=outs["jm_reward"],
        auto_reset=done,
        **reasons,
    )


def test_smax_global_state_and_masks_follow_the_multi_agent_contract():
    env = _build("smax")
    assert env.agent_names == ("ally_0", "ally_1", "ally_2")
    assert env.global_state_space().shape == (72,)
    obs, state = jax.eval_shape(env.reset, jax.random.key(0))
    assert jax.eval_shape(env.global_state, state).shape == (72,)
    assert jax.eval_shape(env.action_mask, state).shape == (3, 8)
    assert env.default_params.max_steps_in_episode == 20
    # Overcooked and Hanabi have no world state: no global_state, so MAPPO refuses them.
    assert not hasattr(_build("overcooked"), "global_state")


def test_heterogeneous_agents_are_padded_with_masks_and_padded_ids_are_the_noop():
    env = _build("speaker_listener")
    assert env.agent_names == ("speaker_0", "listener_0")
    assert env.observation_sizes == (3, 11) and env.observation_space().shape == (2, 11)
    assert env.observation_mask.tolist() == [[True] * 3 + [False] * 8, [True] * 11]
    assert env.num_actions_per_agent == (3, 5) and env.action_space().nvec.tolist() == [5, 5]
    obs, state = env.reset(jax.random.key(0))
    np.testing.assert_array_equal(obs[0, 3:], 0.0)  # padding
    mask = np.asarray(env.action_mask(state))
    assert mask.tolist() == [[True, True, True, False, False], [True] * 5]
    step = jax.jit(env.step)
    key = jax.random.key(1)
    padded = step(key, state, jnp.array([4, 2]))  # speaker id 4 is padding: the no-op 0
    noop = step(key, state, jnp.array([0, 2]))
    jax.tree.map(np.testing.assert_array_equal, padded[:5], noop[:5])
    moved = step(key, state, jnp.array([1, 2]))
    assert not np.array_equal(moved[0], noop[0])  # a real action does something else


def test_one_agent_env_has_no_agent_axis():
    env = from_jaxmarl("MPE_simple_v3")
    assert env.num_agents == 1 and isinstance(env.action_space(), lamella.envs.spaces.Discrete)
    obs, state = jax.eval_shape(env.reset, jax.random.key(0))
    out = jax.eval_shape(env.step, jax.random.key(1), state, jnp.int32(0))
    assert obs.shape == out[0].shape == env.observation_space().shape == (4,)
    assert out[2].shape == out[3].shape == out[4].shape == ()


@pytest.mark.filterwarnings("ignore:OvercookedV2 is now released:DeprecationWarning")
def test_flatten_observations_gives_vectors_for_mlp_networks():
    env = from_jaxmarl("overcooked", layout="cramped_room", flatten_observations=True)
    obs, _ = jax.eval_shape(env.reset, jax.random.key(0))
    assert obs.shape == env.observation_space().shape == (2, 4 * 5 * 26)


def test_overcooked_renders_jaxmarls_tiles():
    env = _build("overcooked")
    # Reset and render in one compiled program: eagerly, Overcooked's reset compiles each of its
    # operations on its own (about 7 of this test's 10 CPU-s).
    render = jax.jit(lambda key: env.render(env.reset(key)[1]), compiler_options=fast_compile_options())
    frame = np.asarray(render(jax.random.key(0)))
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[-1] == 3
    assert frame.std() > 0  # a picture, not a blank frame
    with pytest.raises(NotImplementedError, match="render_fn"):
        _build("hanabi").render(None)


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: from_jaxmarl("SMAX_3m"), ["Unknown JaxMARL env 'SMAX_3m'", "'SMAX'", "registered_envs"]),
        (lambda: from_jaxmarl("SMAX", scenario="3z"), ["Unknown SMAX scenario '3z'", "3m"]),
        (lambda: from_jaxmarl("overcooked", layout="cramped"), ["layout 'cramped'", "cramped_room"]),
        (lambda: from_jaxmarl("storm"), ["does not follow", "IPDInTheMatrix-v0"]),
        (lambda: from_jaxmarl(jaxmarl.make("hanabi"), num_agents=3), ["env object", "its id"]),
        (lambda: from_jaxmarl("hanabi", noop_action=21), ["noop_action=21", "[21, 21]"]),
        # JaxMARL's MPE takes **kwargs and dropped it: the step limit stayed 25, silently.
        (
            lambda: lamella.envs.make("jaxmarl:MPE_simple_spread_v3", max_steps_in_episode=50),
            ["max_steps_in_episode is lamella's", "max_steps=50", "episode_length=50"],
        ),
        # JaxMARL's MPE envs take **kwargs and dropped an unknown keyword: a typo did nothing.
        (
            lambda: from_jaxmarl("MPE_simple_spread_v3", local_ratoi=0.1),
            ["'local_ratoi'", "did you mean 'local_ratio'", "SimpleSpreadMPE", "local_ratio, mass,"],
        ),
        (
            lambda: lamella.envs.make("jaxmarl:MPE_simple_tag_v3", num_good_agent=2),
            ["'num_good_agent'", "did you mean 'num_good_agents'", "SimpleTagMPE", "num_adversaries"],
        ),
        # The other envs raised JaxMARL's own TypeError from inside jaxmarl.make: now the
        # adapter's error, naming the keyword and (where the class reads them) its settings.
        (
            lambda: from_jaxmarl("switch_riddle", num_agent=3),
            ["'num_agent'", "did you mean 'num_agents'", "SwitchRiddle", "initial_bulb_state, num_agents,"],
        ),
        (
            lambda: lamella.envs.make("jaxmarl:coin_game", num_inner_step=10),
            ["'num_inner_step'", "did you mean 'num_inner_steps'", "CoinGame", "num_outer_steps"],
        ),
        (
            lambda: from_jaxmarl("overcooked", layout="cramped_room", max_step=10),
            ["'max_step'", "did you mean 'max_steps'", "Overcooked", "layout, max_steps"],
        ),
        # LearnedPolicyEnemySMAX's policy and params have no default: JaxMARL's missing-argument
        # TypeError from inside jaxmarl.make, now the adapter's error saying how to pass them.
        (
            lambda: lamella.envs.make("jaxmarl:LearnedPolicyEnemySMAX"),
            ["LearnedPolicyEnemySMAX needs the settings 'policy', 'params'", "policy=..., params=..."],
        ),
        # HeuristicEnemySMAX hands its settings on to SMAX, which refuses the keyword.
        (
            lambda: from_jaxmarl("HeuristicEnemySMAX", scenario="3m", max_step=20),
            ["'max_step'", "jaxmarl:HeuristicEnemySMAX", "SMAX.__init__() got an unexpected keyword"],
        ),
    ],
)
def test_bad_input_is_a_clear_error(call, words):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(JaxMARLError) as raised:
            call()
    for word in words:
        assert word in str(raised.value)


def test_a_misspelt_keyword_keeps_jaxmarls_error_as_the_cause():
    with pytest.raises(JaxMARLError, match=r"'num_agent'.*HanabiEnv.*Fix the spelling.*num_agents") as raised:
        from_jaxmarl("hanabi", num_agent=2)
    assert isinstance(raised.value.__cause__, TypeError)
    assert is_user_error(raised.value)  # the `lamella` command prints it as one line


def test_without_jaxmarl_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "jaxmarl", None)  # makes `import jaxmarl` fail
    with pytest.raises(ImportError, match=r"pip install 'lamella-envs\[jaxmarl\]'") as info:
        from_jaxmarl("hanabi")
    assert is_user_error(info.value)  # the `lamella` command prints it as one line, exit status 2


def test_jaxmarl_leaves_the_callers_streams_and_prints_no_notices():
    """Importing jaxmarl prints its search for a source checkout's environments, and its MaBrax
    module sets ``sys.stdout`` / ``sys.stderr`` to ``sys.__stdout__`` / ``sys.__stderr__``
    after importing brax (undoing a notebook's or a caller's redirection). Through the adapter,
    a caller's redirected stdout stays in place and holds only the caller's own output. A fresh
    process: the import happens once per process."""
    code = (
        "import contextlib, io, sys\n"
        "held = io.StringIO()\n"
        "with contextlib.redirect_stdout(held):\n"
        "    from lamella.envs.adapters.jaxmarl import from_jaxmarl\n"
        "    from_jaxmarl('ant_4x2')\n"  # a MaBrax body: jaxmarl imports brax and mujoco
        "    print('built')\n"
        "    assert sys.stdout is held, sys.stdout\n"
        "sys.stderr.write(repr(held.getvalue()))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (done.stdout, done.stderr) == ("", "'built\\n'")


def test_jaxmarl_ids_make_the_adapted_env():
    """``lamella.envs.make("jaxmarl:<id>", **settings)`` is ``from_jaxmarl(<id>, **settings)``
    behind AutoReset, its family ``jaxmarl`` (the run log's environment level); a bad id names
    the fix, and the commands take such ids without listing them."""
    from lamella.envs.cli import _check_env_ids
    from lamella.envs.registry import adapter_prefix, env_family
    from lamella.envs.wrappers import AutoReset

    env, params = lamella.envs.make("jaxmarl:HeuristicEnemySMAX", scenario="3m", max_steps=20)
    assert isinstance(env, AutoReset) and env.env_id == "jaxmarl:HeuristicEnemySMAX"
    same = from_jaxmarl("HeuristicEnemySMAX", scenario="3m", max_steps=20)
    assert env.agent_names == same.agent_names == ("ally_0", "ally_1", "ally_2")
    assert params == same.default_params and params.max_steps_in_episode == 20
    bare, _ = lamella.envs.make("jaxmarl:MPE_simple_spread_v3", autoreset=False)
    assert bare.num_agents == 3 and env_family("jaxmarl:MPE_simple_spread_v3") == "jaxmarl"
    assert adapter_prefix("jaxmarl:hanabi") == "jaxmarl"
    _check_env_ids(["jaxmarl:hanabi"])  # `lamella demo --envs jaxmarl:...` takes it
    assert not any(i.startswith("jaxmarl:") for i in lamella.envs.registered())  # listing imports no jaxmarl
    with pytest.raises(JaxMARLError, match=r"write jaxmarl:<id>"):
        lamella.envs.make("jaxmarl:")
    with pytest.raises(JaxMARLError, match=r"did you mean 'MPE_simple_spread_v3'"):
        lamella.envs.make("jaxmarl:MPE_simple_sprad_v3")


def test_keywords_that_jaxmarl_reads_are_taken():
    """The unknown-keyword check refuses only what the env class cannot read: MPE's settings
    read from its ``**kwargs`` (``damping``, ``u_noise``) and those of a parent class (SimpleMPE's
    ``max_steps``, ``dt``) pass, and so do SMAX's, which HeuristicEnemySMAX hands to SMAX."""
    env = from_jaxmarl(
        "MPE_simple_spread_v3", local_ratio=0.2, max_steps=10, dt=0.2, damping=0.5, u_noise=jnp.zeros(3)
    )
    assert env.jaxmarl_env.local_ratio == 0.2 and env.jaxmarl_env.damping == 0.5
    assert env.default_params.max_steps_in_episode == 10
    smax = from_jaxmarl("HeuristicEnemySMAX", scenario="3m", enemy_shoots=False, see_enemy_actions=False)
    assert smax.jaxmarl_env.enemy_shoots is False
