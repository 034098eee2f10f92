import functools
import re

import jax
import jax.numpy as jnp
import pytest

import lamella.envs as le
import lamella.envs.testing  # noqa: F401  (le.testing)
from lamella.envs import spaces, struct
from lamella.envs.adapters.gymnasium import GymnasiumEnv, GymnasiumVectorEnv
from lamella.envs.minatar import Seaquest
from lamella.envs.multi_agent import CoinGame, InfiniteMatrixGame, IteratedTensorGame


def test_unknown_id_lists_close_matches():
    with pytest.raises(KeyError, match="CartPole-v1"):
        le.make("CartPol-v1")


def test_settings_written_into_the_id_name_the_keyword_call():
    """``id:k=v`` (a command-line habit) was an unknown id whose suggestion was the id itself."""
    with pytest.raises(
        KeyError, match=r"settings are not part of an id.*make\('CartPole-v1', max_steps_in_episode=0\)"
    ):
        le.make("CartPole-v1:max_steps_in_episode=0")


def test_unknown_override_lists_params():
    with pytest.raises(TypeError, match="gravity"):
        le.make("CartPole-v1", gravty=3.0)


# A tiny custom env (the worked example of docs/custom-env.md) --------------------------


@struct.dataclass
class WalkState:
    position: jax.Array  # int32 (): where the walker is
    time: jax.Array  # int32 (): steps taken


@struct.dataclass
class WalkParams:
    step_reward: float = -1.0  # reward of every step that does not reach the goal
    max_steps: int = 20


class Walk(le.Environment):
    """Walk on a line of ``size`` cells from cell 0 to the last one.

    Observation: int32 ``()``, the position. Action: Discrete(2), 0 left, 1 right.
    Reward: 0.0 on reaching the goal, ``step_reward`` otherwise.
    Terminated: at the goal. Truncated: after ``max_steps`` steps.
    """

    stochastic_step = False

    def __init__(self, size: int = 5):
        self.size = size

    @property
    def default_params(self):
        return WalkParams()

    def reset_env(self, key, params):
        state = WalkState(jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
        return state.position, state

    def step_env(self, key, state, action, params):
        position = jnp.clip(state.position + 2 * action - 1, 0, self.size - 1).astype(jnp.int32)
        state = WalkState(position, state.time + 1)
        terminated = position == self.size - 1
        reward = jnp.where(terminated, 0.0, params.step_reward).astype(jnp.float32)
        return position, state, reward, terminated, state.time >= params.max_steps, {}

    def observation_space(self, params=None):
        return spaces.Discrete(self.size)

    def action_space(self, params=None):
        return spaces.Discrete(2)


@pytest.fixture
def walk_id():
    env_id = "Walk-v0"
    le.register(env_id, Walk)
    yield env_id
    le.registry._REGISTRY.pop(env_id)  # keep the global registry as other tests expect it


def test_register_and_make_custom_env(walk_id):
    assert walk_id in le.registered()
    env, params = le.make(walk_id)
    assert isinstance(env, le.wrappers.AutoReset) and isinstance(env.unwrapped, Walk)
    assert env.unwrapped.env_id == walk_id
    obs, state = env.reset(jax.random.key(0), params)
    for _ in range(3):
        obs, state, reward, terminated, truncated, _ = env.step(jax.random.key(0), state, 1, params)
        assert float(reward) == -1.0
    # The fourth step right reaches cell 4 (the goal): terminated, reward 0, auto-reset to 0.
    obs, state, reward, terminated, truncated, info = env.step(jax.random.key(0), state, 1, params)
    assert bool(terminated) and float(reward) == 0.0 and int(obs) == 0
    assert int(info["final_observation"]) == 4
    le.testing.check_env(le.make(walk_id, autoreset=False)[0], num_steps=8, num_envs=2)


def test_variants_are_made_but_left_out_of_the_main_list(walk_id):
    le.register("Walk-long-v0", functools.partial(Walk, size=9), variant=True)
    try:
        assert "Walk-long-v0" in le.registered()
        assert "Walk-long-v0" not in le.registered(variants=False)
        assert walk_id in le.registered(variants=False)
        assert le.make("Walk-long-v0")[0].unwrapped.size == 9
    finally:
        le.registry._REGISTRY.pop("Walk-long-v0")
        le.registry._VARIANTS.discard("Walk-long-v0")
    # lbforaging's 1920 sizes are variants; the main list keeps a few of them for demo/animate.
    main = [env_id for env_id in le.registered(variants=False) if env_id.startswith("Foraging")]
    assert set(main) == set(le.multi_agent.lbf.MAIN_IDS), main


def test_overrides_go_to_params_or_constructor(walk_id):
    env, params = le.make(walk_id, autoreset=False, size=3, step_reward=-0.5)
    assert env.size == 3  # constructor argument (static: changes the observation space)
    assert env.observation_space(params).n == 3
    assert params == WalkParams(step_reward=-0.5)  # params field (traced: vmappable)
    _, state = env.reset(jax.random.key(0), params)
    _, _, reward, terminated, _, _ = env.step(jax.random.key(0), state, 1, params)
    assert float(reward) == -0.5 and not terminated
    with pytest.raises(TypeError, match=r"constructor arguments: \['size'\]"):
        le.make(walk_id, sise=3)


def test_duplicate_registration_is_an_error(walk_id):
    le.register(walk_id, Walk)  # the same factory again is harmless (module re-imports)
    with pytest.raises(ValueError, match=r"already registered.*overwrite=True"):
        le.register(walk_id, lambda: Walk(7))
    le.register(walk_id, lambda: Walk(7), overwrite=True)
    assert le.make(walk_id)[0].size == 7


def test_bad_registrations():
    with pytest.raises(ValueError, match="non-empty string"):
        le.register("", Walk)
    with pytest.raises(TypeError, match="callable"):
        le.register("Thing-v0", 3)


def test_unknown_id_suggests_the_closest_ids(walk_id):
    with pytest.raises(KeyError, match=r"Did you mean 'Walk-v0'"):
        le.make("walk-v0")
    with pytest.raises(KeyError, match=r"registered\(\)") as error:
        le.make("Zzzzzzzz")
    assert "Did you mean" not in str(error.value)


def test_env_family_is_the_defining_sub_package(walk_id):
    assert le.registry.env_family("CartPole-v1") == "classic_control"
    assert le.registry.env_family(le.make("Breakout-MinAtar")[0]) == "minatar"  # through AutoReset
    assert le.registry.env_family(le.make("Catch-bsuite", autoreset=False)[0]) == "bsuite"
    assert le.registry.env_family("Foraging-8x8-2p-2f-v3") == "multi_agent"
    assert le.registry.env_family(walk_id) == "custom"  # defined in this test module
    assert le.registry.env_family("NotAnEnv-v0") == "custom"


class _DuckWalk:
    """An env that does not subclass Environment but has its methods (as gymnax's envs do)."""

    def reset(self, key, params):
        return Walk().reset(key, params)

    def step(self, key, state, action, params):
        return Walk().step(key, state, action, params)

    def observation_space(self, params=None):
        return spaces.Discrete(5)

    def action_space(self, params=None):
        return spaces.Discrete(2)


@pytest.mark.parametrize(
    ("env", "env_params", "kwargs", "message"),
    [
        (
            "CartPole-v1",
            None,
            {},
            "run_it: env must be an env object, got the id 'CartPole-v1'. Leave env out and set the "
            "config's env_id='CartPole-v1', or pass the object: env, env_params = lamella.envs.make('CartPole-v1').",
        ),
        (
            "CartPole-v1",
            None,
            {"takes_id": False},
            "run_it: env must be an env object, got the id 'CartPole-v1'. Pass the object: "
            "env, env_params = lamella.envs.make('CartPole-v1').",
        ),
        (
            le.make("CartPole-v1"),
            None,
            {},
            "run_it: env got a pair (AutoReset, CartPoleParams), what lamella.envs.make returns. Unpack it: "
            "env, env_params = lamella.envs.make(...), then pass env=env, env_params=env_params.",
        ),
        (
            Walk,
            None,
            {},
            "run_it: env must be an env object, got the class Walk. Pass an instance: env=Walk(...).",
        ),
        (
            GymnasiumEnv("CartPole-v1"),
            None,
            {"host_loop": "train_host(config, env)"},
            "run_it: env is a gymnasium env (GymnasiumEnv), stepped by Python; this runner steps its env "
            "inside compiled JAX code and needs a lamella env: lamella.envs.make(id), or your own "
            "lamella.envs.Environment. To train on it, use train_host(config, env).",
        ),
        (
            _DuckWalk(),
            None,
            {},
            "run_it: env must be a lamella env (a lamella.envs.Environment, or an object with its reset, "
            "step, observation_space and action_space methods); got _DuckWalk",
        ),
        (object(), WalkParams(), {}, "which lacks reset, step, observation_space, action_space."),
    ],
    ids=["id", "id-no-config", "pair", "class", "gymnasium", "no-default-params", "object"],
)
def test_check_env_object_names_what_was_given_and_the_fix(env, env_params, kwargs, message):
    with pytest.raises(le.EnvInputError) as raised:
        le.check_env_object(env, env_params, "run_it", **kwargs)
    assert message in str(raised.value), str(raised.value)
    if isinstance(env, _DuckWalk):
        assert str(raised.value).endswith("which lacks default_params (or pass env_params=)."), str(
            raised.value
        )


def test_check_env_object_accepts_envs_wrappers_and_duck_typed_envs():
    env, params = le.make("CartPole-v1")
    le.check_env_object(env, None, "run_it")  # an AutoReset wrapper
    le.check_env_object(Walk(), None, "run_it")
    le.check_env_object(_DuckWalk(), WalkParams(), "run_it")  # no default_params, but params given


def test_make_refuses_an_id_that_is_not_a_str_and_an_autoreset_that_is_not_a_bool():
    with pytest.raises(
        TypeError,
        match=r"^make: env_id must be a registered id \(a str such as 'CartPole-v1'\), got NoneType",
    ):
        le.make(None)
    env, _ = le.make("CartPole-v1")
    with pytest.raises(TypeError, match=r"got AutoReset .*See lamella\.envs\.registered\(\)"):
        le.make(env)
    with pytest.raises(
        TypeError, match=r"^make\('CartPole-v1'\): autoreset must be True or False, got 'no'\."
    ):
        le.make("CartPole-v1", autoreset="no")


def test_an_env_attribute_read_off_makes_pair_names_the_unpacking():
    """Before: ``'tuple' object has no attribute 'reset'`` (gymnasium's ``env = gym.make(id)``)."""
    made = le.make("CartPole-v1")
    with pytest.raises(
        AttributeError,
        match=r"^make returns the pair \(env, params\), not the env: unpack it, env, params = "
        r"lamella\.envs\.make\(\.\.\.\), then use env\.reset\.$",
    ):
        made.reset(jax.random.key(0))
    with pytest.raises(AttributeError, match=r"^no_such_thing$"):
        made.no_such_thing  # noqa: B018  (not an env attribute either: the plain error)
    env, params = made  # still a plain pair
    assert made == (env, params) and isinstance(made, tuple)


def test_step_given_the_observation_as_the_state_names_the_order():
    """Before: ``'ArrayImpl' object has no attribute 'time'`` from inside the step."""
    env, params = le.make("CartPole-v1")
    obs, state = env.reset(jax.random.key(0), params)
    with pytest.raises(le.EnvInputError) as raised:
        env.step(jax.random.key(1), obs, 0, params)
    assert str(raised.value) == (
        "CartPole-v1.step: `state` must be the env state that reset returns (CartPoleState: obs, state = "
        "env.reset(key, params)), got shape (4,), dtype float32. It has the observation's shape: reset "
        "returns (obs, state), the observation first."
    )
    with pytest.raises(le.EnvInputError, match=r"got None\.$"):
        env.step(jax.random.key(1), None, 0, params)
    # Under vmap, per env; and the right state passes.
    keys = jax.random.split(jax.random.key(2), 3)
    batch_obs, batch_state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    with pytest.raises(le.EnvInputError, match="observation first"):
        jax.eval_shape(step, keys, batch_obs, jnp.zeros(3, jnp.int32), params)
    jax.eval_shape(step, keys, batch_state, jnp.zeros(3, jnp.int32), params)


def test_render_given_the_observation_as_the_state_names_the_order():
    """Before: ``'ArrayImpl' object has no attribute 'x'`` from inside the renderer."""
    env, params = le.make("CartPole-v1")
    obs, state = env.reset(jax.random.key(0), params)
    with pytest.raises(
        le.EnvInputError, match=r"^CartPole-v1\.render: `state` must be the env state.*observation first"
    ):
        env.render(obs, params)
    with pytest.raises(le.EnvInputError, match=r"^CartPole-v1\.render: .*got None\.$"):
        env.render(None)
    assert jax.eval_shape(env.render, state, params).shape[-1] == 3


def test_reset_done_given_obs_and_state_swapped_names_the_order():
    """Before: ``where requires ndarray or scalar arguments, got <class '...CartPoleState'>``
    (bare env), or ``'ArrayImpl' object has no attribute 'env_state'`` (a wrapper)."""
    for env, params in (le.make("CartPole-v1", autoreset=False), (le.wrappers.TimeLimit(Walk(), 3), None)):
        obs, state = env.reset(jax.random.key(0), params)
        with pytest.raises(
            le.EnvInputError,
            match=r"\.reset_done: `state` and `obs` are swapped: it takes \(key, done, state, obs, "
            r"params\), the state first; reset returns \(obs, state\), the observation first\.$",
        ):
            env.reset_done(jax.random.key(1), jnp.bool_(True), obs, state, params)
        new_obs, new_state = env.reset_done(jax.random.key(1), jnp.bool_(True), state, obs, params)
        assert jax.tree.structure(new_state) == jax.tree.structure(state)
    with pytest.raises(TypeError, match=r"^registered: variants must be True or False, got 'no'\.$"):
        le.registered(variants="no")  # was truthy: every variant, silently


def test_an_env_whose_state_is_an_array_is_left_alone():
    class Counter(le.Environment):
        def reset_env(self, key, params):
            return jnp.zeros(()), jnp.zeros((), jnp.int32)

        def step_env(self, key, state, action, params):
            state = state + 1
            return jnp.zeros(()), state, jnp.float32(1.0), state >= 3, jnp.bool_(False), {}

        @property
        def default_params(self):
            return None

        def observation_space(self, params=None):
            return spaces.Box(-1.0, 1.0, (), jnp.float32)

        def action_space(self, params=None):
            return spaces.Discrete(2)

    env = Counter()
    _, state = env.reset(jax.random.key(0))
    assert int(env.step(jax.random.key(1), state, 0)[1]) == 1


def test_step_given_a_batch_outside_vmap_names_the_vmap():
    """Before: CartPole stepped a vmapped reset's 3 states with one key and one action and returned
    batched outputs, silently (its reward does not depend on the state: the flags show the batch)."""
    env, params = le.make("CartPole-v1")
    keys = jax.random.split(jax.random.key(0), 3)
    _, states = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    with pytest.raises(le.EnvInputError) as raised:
        env.step(jax.random.key(1), states, 0, params)
    assert str(raised.value) == (
        "CartPole-v1.step: `state` is a batch of 3 (leading axes (3,) on x, x_dot, theta, theta_dot, "
        "time). step takes one env's state; broadcasting would step the whole batch with one key and "
        "one action. vmap over the batch: jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, states, "
        "actions, params), with keys = jax.random.split(key, 3)."
    )
    # A batch of params (one field of it is enough) is named with the in_axes that maps them too.
    _, state = env.reset(jax.random.key(0), params)
    with pytest.raises(
        le.EnvInputError,
        match=r"^CartPole-v1\.step: `params` is a batch of 2 \(leading axes \(2,\) on gravity\)\. .*"
        r"in_axes=\(0, 0, 0, 0\)",
    ):
        env.step(jax.random.key(1), state, 0, params.replace(gravity=jnp.array([9.8, 5.0])))
    # A multi-agent env: its flags' agent axis is not a batch; a batch on top of it is.
    ipd, ipd_params = le.make("IteratedPrisonersDilemma-v0")
    _, ipd_state = ipd.reset(jax.random.key(0), ipd_params)
    actions = jnp.zeros(2, jnp.int32)
    assert ipd.step(jax.random.key(1), ipd_state, actions, ipd_params)[2].shape == (2,)
    _, ipd_states = jax.vmap(ipd.reset, in_axes=(0, None))(keys, ipd_params)
    with pytest.raises(
        le.EnvInputError, match=r"^IteratedPrisonersDilemma-v0\.step: `state` is a batch of 3"
    ):
        ipd.step(jax.random.key(1), ipd_states, actions, ipd_params)
    # Under vmap the same batch is one state per env, and traces.
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    assert jax.eval_shape(step, keys, states, jnp.zeros(3, jnp.int32), params)[2].shape == (3,)


def test_a_batch_that_breaks_the_step_is_named_instead_of_its_error():
    """An env whose step cannot broadcast a batch fails inside; the error names the batch."""

    class Lookup(Walk):
        def step_env(self, key, state, action, params):
            out = super().step_env(key, state, action, params)
            cell = jax.lax.dynamic_index_in_dim(jnp.arange(self.size), state.position, keepdims=False)
            return (cell, *out[1:])

    env = Lookup()
    _, state = env.reset(jax.random.key(0))
    assert int(env.step(jax.random.key(1), state, 1)[0]) == 0
    states = jax.tree.map(lambda x: jnp.stack([x, x]), state)
    with pytest.raises(
        le.EnvInputError,
        match=r"^Lookup\.step: `state` is a batch of 2 \(leading axes \(2,\) on position, time\)",
    ):
        env.step(jax.random.key(1), states, 1)


def test_render_given_a_batch_of_states_names_the_vmap():
    """Before: ``Incompatible shapes for broadcasting: shapes=[(200, 300), (4,)]``."""
    env, params = le.make("CartPole-v1")
    _, states = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(jax.random.key(0), 4), params)
    with pytest.raises(
        le.EnvInputError,
        match=r"^CartPole-v1\.render: `state` is a batch of 4 .* render draws one env: pick one, "
        r"jax\.tree\.map\(lambda x: x\[0\], state\), or vmap over the batch",
    ):
        env.render(states, params)
    frames = jax.eval_shape(jax.vmap(env.render, in_axes=(0, None)), states, params)
    assert frames.shape[0] == 4


# What reads one env's state (the multi-agent contract's action_mask and global_state, the
# observation, render), per id: the first is traced under vmap too. Before, a batch of states
# failed inside JAX: ``Incompatible shapes for broadcasting: shapes=[(3, 1, 2, 2), (1, 4, 2)]``
# (LBF's action_mask), ``Cannot concatenate arrays with different numbers of dimensions`` (SMAX's
# global_state), or mixed the envs: IteratedTensorGame's observation_of gave 3 envs of 3 players
# one (3, 3, 9) array, silently.
_ONE_STATE_READERS = {
    "Foraging-8x8-2p-2f-v3": ("action_mask", "global_state", "observation_of", "get_obs", "render"),
    "rware-tiny-2ag-v2": ("global_state", "observation_of", "render"),
    "SMAX-3m-v0": ("action_mask", "global_state", "observation_of", "get_obs", "render"),
    "MPE-simple_spread-v3": ("global_state", "observation_of", "get_obs", "render"),
    "CoinGame-v0": ("global_state", "observation_of", "render"),
    "IPDInTheMatrix-v0": ("global_state", "observation_of", "render"),
    "IteratedTensorGame-v0": ("observation_of", "global_state", "render"),
    "Cournot-v0": ("global_state", "observation_of", "render"),
    "Fishery-v0": ("global_state", "observation_of", "render"),
    "IteratedPrisonersDilemma-v0": ("render",),
    "InfiniteMatrixGame-v0": ("render",),
}


@pytest.mark.parametrize("env_id", sorted(_ONE_STATE_READERS))
def test_functions_of_one_state_given_a_batch_name_the_vmap(env_id):
    env, params = le.make(env_id, autoreset=False)
    keys = jax.random.split(jax.random.key(0), 3)
    states = jax.eval_shape(jax.vmap(env.reset, in_axes=(0, None)), keys, params)[1]
    methods = _ONE_STATE_READERS[env_id]
    for method in methods:
        what = (
            "render draws one env: pick one, .*"
            if method == "render"
            else f"{method} reads one env's state. "
        )
        with pytest.raises(
            le.EnvInputError,
            match=rf"^{re.escape(env_id)}\.{method}: `state` is a batch of 3 \(leading axes \(3,\)\); "
            rf"{what}.*jax\.vmap\(env\.{method}, in_axes=\(0, None\)\)\(states, params\)\.",
        ):
            jax.eval_shape(getattr(env, method), states, params)
    read = jax.vmap(getattr(env, methods[0]), in_axes=(0, None))  # one state per env: traces
    assert jax.tree.leaves(jax.eval_shape(read, states, params))[0].shape[0] == 3


@pytest.mark.parametrize(
    "env_id, other_id, message",
    [
        (
            "Foraging-8x8-2p-2f-v3",
            "rware-tiny-2ag-v2",
            r"must be LevelBasedForagingParams, this env's params; got RobotWarehouseParams\.",
        ),
        (
            "MPE-simple_spread-v3",
            "MPE-simple_tag-v3",
            r"must be MultiParticleSharedParams.*got MultiParticleParams\.",
        ),
        (
            "MPE-simple-v3",
            "MPE-simple_spread-v3",
            "must be MultiParticleParams.*got MultiParticleSharedParams, whose local_ratio this env would ignore",
        ),
        (
            "CoinGame-v0",
            "IteratedPrisonersDilemma-v0",
            "must be CoinGameParams.*got IteratedMatrixGameParams",
        ),
        ("CartPole-v1", "Acrobot-v1", "must be CartPoleParams.*got AcrobotParams"),
    ],
)
def test_reset_and_step_refuse_another_envs_params(env_id, other_id, message):
    """Before: LBF's and MPE's reset ran on another env's params and the step failed inside
    (``'RobotWarehouseParams' object has no attribute 'normalize_reward'``); MPE's simple stepped
    on simple_spread's params, ignoring their local_ratio, silently."""
    other_params = le.make(other_id, autoreset=False)[1]
    key = jax.random.key(0)
    for autoreset in (False, True):  # a bare env, and make's default wrapped in AutoReset
        env, params = le.make(env_id, autoreset=autoreset)
        fix = (
            rf"Params of another env .* lamella\.envs\.make\('{re.escape(env_id)}'\)\) or env\.default_params"
        )
        with pytest.raises(
            le.EnvInputError, match=rf"^{re.escape(env_id)}\.reset: `params` {message}.*{fix}"
        ):
            jax.eval_shape(env.reset, key, other_params)
        state = jax.eval_shape(env.reset, key, params)[1]
        space = env.action_space(params)
        action = jnp.zeros(space.shape, space.dtype)
        with pytest.raises(le.EnvInputError, match=rf"^{re.escape(env_id)}\.step: `params` {message}"):
            jax.eval_shape(env.step, key, state, action, other_params)
        jax.eval_shape(env.step, key, state, action, params)


def test_a_wrapper_with_params_of_its_own_is_left_alone():
    """A wrapper may take other params than the inner env's (lamella-ued's OnLevel takes a level and
    them); one that does not say it keeps them (``keeps_params``) is checked only when its step
    fails reading a field the params lack."""

    class Scaled(le.Wrapper):  # params: (the inner env's params, a reward scale)
        def reset_env(self, key, params):
            return self.env.reset_env(key, params[0])

        def step_env(self, key, state, action, params):
            obs, state, reward, terminated, truncated, info = self.env.step_env(key, state, action, params[0])
            return obs, state, reward * params[1], terminated, truncated, info

    bare, params = le.make("CartPole-v1", autoreset=False)
    key = jax.random.key(0)
    for env in (Scaled(bare), le.wrappers.AutoReset(Scaled(bare))):
        state = jax.eval_shape(env.reset, key, (params, 2.0))[1]
        assert jax.eval_shape(env.step, key, state, 0, (params, 2.0))[2].shape == ()
    plain = le.Wrapper(bare)  # passes the params on, but does not say so: checked on failure
    state = jax.eval_shape(plain.reset, key, params)[1]
    acrobot_params = le.make("Acrobot-v1", autoreset=False)[1]
    with pytest.raises(
        le.EnvInputError, match=r"^CartPole-v1\.step: `params` must be CartPoleParams.*got AcrobotParams"
    ):
        jax.eval_shape(plain.step, key, state, 0, acrobot_params)


def test_make_names_a_registered_factory_that_returned_no_env(walk_id):
    """Before: ``'int' object has no attribute 'default_params'`` from inside make."""
    le.register(walk_id, lambda: 3, overwrite=True)
    with pytest.raises(
        TypeError,
        match=r"^make\('Walk-v0'\): the factory registered for it \(<lambda>\) returned int 3, not an env",
    ):
        le.make(walk_id)
    le.register(walk_id, lambda: Walk, overwrite=True)
    with pytest.raises(
        TypeError, match=r"returned the class Walk, not an env .* Return an instance: Walk\(\.\.\.\)\.$"
    ):
        le.make(walk_id)
    with pytest.raises(
        TypeError,
        match=r"factory must be callable .* got Walk\(\)\. That is an env object: register its class, register\('Walk-v0', Walk\)\.$",
    ):
        le.register(walk_id, Walk(), overwrite=True)


def test_a_wrapper_of_what_is_not_an_env_names_the_fix():
    with pytest.raises(
        le.EnvInputError, match=r"^AutoReset\(env\): env must be an env object, got the id 'CartPole-v1'"
    ):
        le.wrappers.AutoReset("CartPole-v1")
    with pytest.raises(le.EnvInputError, match=r"^FlattenObservation\(env\): env got a pair .* Unpack it"):
        le.wrappers.FlattenObservation(le.make("CartPole-v1", autoreset=False))


@pytest.mark.parametrize(
    ("env_id", "overrides", "message"),
    [
        # A float step limit used to compare as if rounded up; a negative one truncated every step.
        (
            "CartPole-v1",
            {"max_steps_in_episode": 2.5},
            r"max_steps_in_episode must be an integer .*got the Python float 2\.5",
        ),
        ("CartPole-v1", {"max_steps_in_episode": -1}, r"max_steps_in_episode must be >= 1, got -1"),
        (
            "CartPole-v1",
            {"max_steps_in_episode": "500"},
            r"max_steps_in_episode must be an integer .*got str '500'",
        ),
        ("CartPole-v1", {"gravity": None}, r"gravity must be a real number .*got NoneType None"),
        ("CartPole-v1", {"gravity": float("nan")}, r"gravity is NaN"),
        ("BernoulliBandit-misc", {"reward_prob": 1.5}, r"reward_prob must be in \[0\.0, 1\.0\], got 1\.5"),
        ("BernoulliBandit-misc", {"normalize_time": "no"}, r"normalize_time must be True or False"),
        ("GaussianBandit-misc", {"sigma_p": -1.0}, r"sigma_p must be >= 0\.0, got -1\.0"),
        ("SMAX-3m-v0", {"max_episode_steps": -5}, r"max_episode_steps must be >= 1, got -5"),
        # Params fields the constructor also takes (its defaults) went to the constructor only,
        # past these checks: NaN and "0.1" were stored, 2.5 steps became 2 ("no" became True: LBF's
        # constructor now refuses that itself, test_lbf.py).
        ("Foraging-8x8-2p-2f-v3", {"penalty": float("nan")}, r"penalty is NaN"),
        (
            "Foraging-8x8-2p-2f-v3",
            {"penalty": "0.1"},
            r"penalty must be a real number .*default: 0\.0\), got str '0\.1'",
        ),
        (
            "IteratedPrisonersDilemma-v0",
            {"num_inner_steps": True},
            r"num_inner_steps must be an integer .*bool",
        ),
        (
            "DeepSea-bsuite",
            {"action_mapping": jnp.zeros((3,), jnp.int32)},
            r"action_mapping must be an array of shape \(8, 8\)",
        ),
        # Ranges that are not step limits: these made NaN observations or never-ending dynamics.
        ("Fishery-v0", {"s_max": 0.0}, r"s_max must be > 0\.0, got 0\.0\. Pass a value > 0\.0"),
        ("CartPole-v1", {"length": -0.5}, r"length must be in \(0\.0, inf\), got -0\.5"),
        ("Breakout-MinAtar", {"sticky_action_prob": 1.5}, r"sticky_action_prob must be in \[0\.0, 1\.0\]"),
    ],
)
def test_make_refuses_params_overrides_of_the_wrong_kind_or_range(env_id, overrides, message):
    with pytest.raises(le.EnvInputError, match=rf"^make\('{env_id}'\): {message}"):
        le.make(env_id, **overrides)


@pytest.mark.parametrize(
    ("env_id", "field", "value", "message"),
    [
        # Each used to run: NaN or inf in the first step's observation or reward ...
        ("CartPole-v1", "length", 0.0, r"length must be in \(0\.0, inf\), got 0\.0"),
        ("CartPole-v1", "masscart", 0.0, r"masscart must be > 0\.0"),
        ("Pendulum-v1", "l", 0.0, r"l must be > 0\.0"),  # a ZeroDivisionError in the step
        ("Acrobot-v1", "link_moi", 0.0, r"link_moi must be in \(0\.0, inf\)"),
        ("Fishery-v0", "s_max", 0.0, r"s_max must be > 0\.0"),
        ("MemoryChain-bsuite", "memory_length", 0, r"memory_length must be >= 1, got 0"),
        ("UmbrellaChain-bsuite", "chain_length", 0, r"chain_length must be >= 1"),
        ("InfiniteMatrixGame-v0", "gamma", 1.0, r"gamma must be in \[0\.0, 1\.0\), got 1\.0"),
        ("MPE-simple_spread-v3", "contact_margin", 0.0, r"contact_margin must be > 0\.0"),
        # ... or nonsense, silently: every step sticky, every move random, an episode of one step.
        ("Breakout-MinAtar", "sticky_action_prob", 1.5, r"sticky_action_prob must be in \[0\.0, 1\.0\]"),
        ("FourRooms-misc", "fail_prob", 2.0, r"fail_prob must be in \[0\.0, 1\.0\]"),
        ("CartPole-v1", "x_threshold", 0.0, r"x_threshold must be > 0\.0"),
        ("Cournot-v0", "b", -1.0, r"b must be > 0\.0"),
        (
            "Fishery-v0",
            "num_inner_steps",
            0,
            r"num_inner_steps must be >= 1, got 0\. Pass a value >= 1 \(default: 300\)",
        ),
    ],
)
def test_reset_refuses_concrete_params_outside_their_range(env_id, field, value, message):
    env, params = le.make(env_id)
    bad = params.replace(**{field: value})  # past make's override check
    fix = rf": params\.replace\({field}=\.\.\.\)\.$"
    with pytest.raises(le.EnvInputError, match=rf"^{env_id}\.reset: params\.{message}.*{fix}"):
        env.reset(jax.random.key(0), bad)


@pytest.mark.parametrize(
    ("env_id", "field", "value"),
    [
        # Each was taken and made the state NaN within the first steps of every episode.
        ("CartPole-v1", "tau", float("inf")),
        ("CartPole-v1", "gravity", float("-inf")),
        ("CartPole-v1", "force_mag", float("inf")),
        ("CartPole-v1", "length", float("inf")),
        ("Acrobot-v1", "dt", float("inf")),
        ("Acrobot-v1", "link_mass_1", float("inf")),
        ("Acrobot-v1", "link_com_pos_2", float("-inf")),
        ("Pendulum-v1", "dt", float("inf")),
        ("Reacher-misc", "torque_scale", float("-inf")),
        ("Swimmer-misc", "dt", float("inf")),
        ("MountainCar-v0", "force", float("inf")),
        ("PointRobot-misc", "circle_radius", float("inf")),
    ],
)
def test_infinite_physical_settings_are_refused(env_id, field, value):
    with pytest.raises(
        le.EnvInputError, match=rf"^make\('{env_id}'\): {field} must be (in|>|>=) .*got -?inf"
    ):
        le.make(env_id, **{field: value})
    env, params = le.make(env_id, autoreset=False)
    with pytest.raises(le.EnvInputError, match=rf"^{env_id}\.reset: params\.{field} must be .*got -?inf"):
        env.reset(jax.random.key(0), params.replace(**{field: value}))


def test_reset_leaves_traced_params_to_the_sweep():
    env, params = le.make("CartPole-v1", autoreset=False)
    key = jax.random.key(0)
    sweep = jax.vmap(lambda length: env.reset(key, params.replace(length=length)))
    jax.eval_shape(sweep, jnp.asarray([0.25, 1.0]))  # a legitimate sweep
    # Traced values are not known while tracing: left alone (make's overrides are checked).
    jax.eval_shape(env.reset, key, params.replace(length=0.0))
    # Concrete values are, also closed over by jit and in a batch.
    batch = params.replace(length=jnp.asarray([0.5, 0.0]))
    with pytest.raises(
        le.EnvInputError, match=r"params\.length must be in \(0\.0, inf\), got Array\(\[0\.5, 0\. \]"
    ):
        jax.eval_shape(lambda k: env.reset(k, batch), key)


def test_make_accepts_params_overrides_of_the_right_kind():
    _, params = le.make("CartPole-v1", gravity=9, max_steps_in_episode=jnp.array([10, 20]))
    assert params.gravity == 9 and params.max_steps_in_episode.shape == (2,)  # a batch for vmap
    # Under jit only the dtype is known: a traced float step limit is refused all the same.
    with pytest.raises(le.EnvInputError, match=r"max_steps_in_episode must be an integer .*dtype float32"):
        jax.jit(lambda steps: le.make("CartPole-v1", max_steps_in_episode=steps)[1])(9.0)
    # A params field the constructor takes: None is its "default", the right kinds pass.
    _, params = le.make("Foraging-8x8-2p-2f-v3", max_episode_steps=None, penalty=1, normalize_reward=False)
    assert (params.max_episode_steps, params.penalty, params.normalize_reward) == (50, 1.0, False)


def test_register_refuses_flags_that_are_not_bools(walk_id):
    with pytest.raises(TypeError, match=r"overwrite must be True or False, got 'no'"):
        le.register(walk_id, lambda: Walk(7), overwrite="no")  # was truthy: replaced the env
    with pytest.raises(TypeError, match=r"variant must be True or False, got 'no'"):
        le.register("Thing-v0", Walk, variant="no")
    assert "Thing-v0" not in le.registered()


def _pettingzoo_reset(seed):
    from lamella.envs.adapters.pettingzoo import PettingZooParallelEnv

    return PettingZooParallelEnv(le.make("Foraging-8x8-2p-2f-v3", autoreset=False)[0]).reset(seed=seed)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        # Each was int()'d: 2.5 became 2 silently, NaN was "cannot convert float NaN to integer",
        # inf an OverflowError, 1.5 seeded with 1.
        (
            lambda: InfiniteMatrixGame(num_steps=2.5),
            "InfiniteMatrixGame: num_steps must be an integer >= 1, got 2.5.",
        ),
        (
            lambda: le.make("InfiniteMatrixGame-v0", num_steps=2.5),
            "InfiniteMatrixGame: num_steps must be an integer >= 1, got 2.5.",
        ),
        (lambda: Seaquest(max_enemies=2.5), "Seaquest: max_enemies must be an integer >= 1, got 2.5."),
        (
            lambda: CoinGame(num_inner_steps=float("inf")),
            "CoinGame: num_inner_steps must be an integer >= 1, got inf.",
        ),
        (
            lambda: le.make("IPDInTheMatrix-v0", freeze_penalty=float("nan")),
            "InTheMatrix: freeze_penalty must be an integer >= 1, got nan.",
        ),
        (
            lambda: IteratedTensorGame(num_players="3"),
            "IteratedTensorGame: num_players must be an integer in 2..16, got '3'.",
        ),
        (
            lambda: GymnasiumVectorEnv("CartPole-v1", num_envs=2.5),
            "GymnasiumVectorEnv: num_envs must be an integer >= 1, got 2.5.",
        ),
        (
            lambda: _pettingzoo_reset(1.5),
            "PettingZooParallelEnv.reset: seed must be an integer >= 0, got 1.5.",
        ),
    ],
)
def test_counts_and_seeds_that_are_not_whole_numbers_are_refused_by_name(build, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        build()
