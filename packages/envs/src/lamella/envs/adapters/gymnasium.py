"""Gymnasium adapters: a lamella env as a ``gymnasium.Env`` or ``gymnasium.vector.VectorEnv``.

>>> from lamella.envs.adapters.gymnasium import GymnasiumEnv, GymnasiumVectorEnv
>>> env = GymnasiumEnv("CartPole-v1", seed=0)
>>> obs, info = env.reset()
>>> obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
>>> envs = GymnasiumVectorEnv("CartPole-v1", num_envs=8, seed=0)
>>> obs, infos = envs.reset()  # obs: float32 (8, 4)

Both run the env's jitted ``reset``/``step`` (compiled once, on the first call)
and convert between JAX and NumPy at the boundary. They need the ``gymnasium``
extra: ``pip install 'lamella-envs[gymnasium]'``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import _inputs, spaces
from lamella.envs.environment import Environment, episode_done
from lamella.envs.errors import MissingExtraError
from lamella.envs.registry import make

try:
    import gymnasium
    from gymnasium.vector import AutoresetMode, VectorEnv
    from gymnasium.vector.utils import batch_space
except ImportError as error:  # pragma: no cover - depends on the extra
    raise MissingExtraError(
        "lamella.envs.adapters.gymnasium needs gymnasium>=1.0: pip install 'lamella-envs[gymnasium]'"
    ) from error

__all__ = ["GymnasiumEnv", "GymnasiumVectorEnv", "to_gymnasium_space"]


def to_gymnasium_space(space: spaces.Space) -> gymnasium.spaces.Space[Any]:
    """The gymnasium space equal to a lamella space (same bounds, shape and dtype).

    Raises:
        TypeError: ``space`` is not a Discrete, MultiDiscrete, Box, Tuple or Dict.
    """
    gym_spaces = gymnasium.spaces
    if isinstance(space, spaces.Discrete):
        return gym_spaces.Discrete(space.n, dtype=np.dtype(space.dtype))
    if isinstance(space, spaces.MultiDiscrete):
        return gym_spaces.MultiDiscrete(np.asarray(space.nvec), dtype=np.dtype(space.dtype))
    if isinstance(space, spaces.Box):
        dtype = np.dtype(space.dtype)
        return gym_spaces.Box(
            np.asarray(space.low, dtype), np.asarray(space.high, dtype), space.shape, dtype.type
        )
    if isinstance(space, spaces.Tuple):
        return gym_spaces.Tuple(tuple(to_gymnasium_space(s) for s in space.spaces))
    if isinstance(space, spaces.Dict):
        return gym_spaces.Dict({name: to_gymnasium_space(s) for name, s in space.spaces.items()})
    raise TypeError(
        f"to_gymnasium_space: no gymnasium equivalent for {space!r}; "
        "supported are Discrete, MultiDiscrete, Box, Tuple and Dict."
    )


def _to_lamella(space: spaces.Space, value: Any) -> Any:
    """A NumPy value (possibly batched) as JAX arrays of the lamella space's dtypes."""
    if isinstance(space, spaces.Tuple):
        return tuple(_to_lamella(s, v) for s, v in zip(space.spaces, value))
    if isinstance(space, spaces.Dict):
        return {name: _to_lamella(s, value[name]) for name, s in space.spaces.items()}
    return jnp.asarray(np.asarray(value), space.dtype)


def _check_actions(env: Environment[Any, Any], space: spaces.Space, actions: Any, num_envs: int) -> None:
    """Refuse what the cast of :func:`_to_lamella` would change (a float for a discrete space, a
    str, None), with ``env.step``'s own check, and a batch that is not one action per env."""
    if isinstance(space, (spaces.Tuple, spaces.Dict)):
        return  # entry by entry in a batch: left to the env's step
    batch = np.asarray(actions) if _inputs._shape_dtype(actions) is not None else None
    if batch is None or batch.shape[:1] != (num_envs,):
        raise _inputs.EnvInputError(
            f"{_inputs.env_label(env)}.step: expected one action per env ({num_envs} envs), an array "
            f"of shape ({num_envs}, *{tuple(space.shape)}); got {_inputs._describe(actions)}."
        )
    _inputs._check(env, space, np.asarray(batch[0]), "action")
    _check_in_space(env, space, batch, "env {}'s action")


def _check_in_space(env: Environment[Any, Any], space: spaces.Space, action: Any, where: str) -> None:
    """Refuse a Discrete or MultiDiscrete action outside the space (5 or -1 for CartPole's
    ``Discrete(2)``), which the env would step as some other action, silently; gymnasium's own
    envs refuse it too. ``action`` may hold a batch (``where`` names one env's action). Box
    actions are the env's to clip, as in gymnasium's continuous envs."""
    if isinstance(space, spaces.Discrete):
        high = np.asarray(space.n) - 1
    elif isinstance(space, spaces.MultiDiscrete):
        high = np.asarray(space.nvec) - 1
    else:
        return
    value = np.asarray(action)
    bad = (value < 0) | (value > high)
    if not bad.any():
        return
    first = tuple(np.argwhere(bad)[0])
    batch = first[: value.ndim - high.ndim]
    given = value[batch] if batch else value
    label = where.format(*batch) if batch else where
    takes = (
        f"integers 0 to {int(high)}" if high.ndim == 0 else f"integers 0 to {high.tolist()} entry by entry"
    )
    raise _inputs.EnvInputError(
        f"{_inputs.env_label(env)}.step: {label} {given.tolist()} is outside the action space "
        f"{space!r}, which takes {takes}. Pass an action of the space (action_space.contains(a) says)."
    )


_SEED_WORD = 2**32


def _seed_key(seed: int) -> jax.Array:
    """The JAX key of a seed >= 0: ``jax.random.key(seed)`` below 2**32, and above it the seed's
    higher 32-bit words folded into the key of its lowest; ``jax.random.key`` keeps only the low
    32 bits (2**32 made seed 0's key, the same trajectory) and fails from 2**63 on, while gymnasium
    and PettingZoo take any seed >= 0."""
    key = jax.random.key(seed % _SEED_WORD)
    seed //= _SEED_WORD
    while seed:
        key = jax.random.fold_in(key, np.uint32(seed % _SEED_WORD))
        seed //= _SEED_WORD
    return key


def _to_numpy(tree: Any) -> Any:
    return jax.tree.map(np.asarray, jax.device_get(tree))


def _observation_to_gymnasium(space: spaces.Space, obs: Any) -> Any:
    """One env's observation as gymnasium's checker expects it: NumPy arrays, and a Python int
    for a Discrete space (as gymnasium's own FrozenLake returns), not a 0-d array."""
    if isinstance(space, spaces.Discrete):
        return int(np.asarray(obs))
    if isinstance(space, spaces.Tuple):
        return tuple(_observation_to_gymnasium(s, o) for s, o in zip(space.spaces, obs))
    if isinstance(space, spaces.Dict):
        return {name: _observation_to_gymnasium(s, obs[name]) for name, s in space.spaces.items()}
    return np.asarray(obs)


def _bare_env(
    env_or_id: str | Environment[Any, Any], params: Any, *, adapter: str, expects: str, example: str
) -> tuple[Environment[Any, Any], Any]:
    """The bare env and params an adapter wraps (gymnasium's and PettingZoo's).

    A registered id is made without auto-reset; an env object must not reset itself, since the
    adapter's API ``expects`` the caller to see the episode end and reset.
    """
    if isinstance(env_or_id, str):
        env, default = make(env_or_id, autoreset=False)
        return env, default if params is None else params
    if not isinstance(env_or_id, Environment):
        raise TypeError(
            f"expected a lamella Environment or a registered id, got {type(env_or_id).__name__}. "
            f"Pass e.g. {example!r} or make({example!r}, autoreset=False)[0]."
        )
    from lamella.envs.wrappers import AutoReset

    inner: Any = env_or_id
    while inner is not None:
        if isinstance(inner, AutoReset):
            raise ValueError(
                f"{env_or_id!r} resets itself at episode end, but {adapter} expects the adapter to "
                f"{expects}. Build the env with make(env_id, autoreset=False)."
            )
        inner = inner.__dict__.get("env")
    return env_or_id, env_or_id.default_params if params is None else params


def _single_agent_env(
    env_or_id: str | Environment[Any, Any], params: Any
) -> tuple[Environment[Any, Any], Any]:
    env, params = _bare_env(
        env_or_id,
        params,
        adapter="gymnasium",
        expects="report terminated/truncated and leave the reset to the caller (or to the vector env)",
        example="CartPole-v1",
    )
    if env.num_agents != 1:
        raise ValueError(
            f"{env.name} has {env.num_agents} agents; the gymnasium adapters are single-agent. Use "
            "lamella.envs.adapters.pettingzoo.PettingZooParallelEnv, or fix the other agents' policy "
            "in a wrapper."
        )
    return env, params


def _render_modes(env: Environment[Any, Any], params: Any, render_mode: str | None) -> list[str]:
    """The render modes an adapter of ``env`` offers; a ``render_mode`` outside them is refused."""
    render_modes = ["rgb_array"] if _can_render(env, params) else []
    if render_mode is not None and render_mode not in render_modes:
        raise ValueError(
            f"render_mode={render_mode!r} is not supported by {env.name}; supported: {[*render_modes, None]}."
        )
    return render_modes


def _can_render(env: Environment[Any, Any], params: Any) -> bool:
    try:
        _, state = jax.eval_shape(lambda key: env.reset(key, params), jax.random.key(0))
        jax.eval_shape(lambda s: env.render(s, params), state)
    except NotImplementedError:
        return False
    return True


class GymnasiumEnv(gymnasium.Env):  # type: ignore[type-arg]
    """A ``gymnasium.Env`` over one lamella environment.

    The adapter does not reset by itself: when ``step`` reports ``terminated``
    or ``truncated``, call ``reset()`` as with any gymnasium env (stepping on
    is undefined, as in gymnasium). ``reset(seed=s)`` makes the episode and
    every following step a deterministic function of ``s``.

    Args:
        env_or_id: a registered id (built with ``autoreset=False``) or a bare
            lamella env (not wrapped in :class:`~lamella.envs.wrappers.AutoReset`)
            with ``num_agents == 1``.
        params: the env's params (its ``default_params`` when None).
        seed: seed of the first ``reset()`` that is called without one.
        render_mode: None or ``"rgb_array"`` (``render()`` returns the env's
            uint8 ``(H, W, 3)`` frame as a NumPy array).

    Attributes:
        lamella_env, params: the wrapped env and its params.
        observation_space, action_space: the gymnasium equivalents of the env's spaces.
    """

    def __init__(
        self,
        env_or_id: str | Environment[Any, Any],
        params: Any = None,
        seed: int | None = None,
        render_mode: str | None = None,
    ):
        env, params = _single_agent_env(env_or_id, params)
        self.lamella_env, self.params = env, params
        self._lamella_observation_space = env.observation_space(params)
        self._lamella_action_space = env.action_space(params)
        self.observation_space = to_gymnasium_space(self._lamella_observation_space)
        self.action_space = to_gymnasium_space(self._lamella_action_space)
        render_modes = _render_modes(env, params, render_mode)
        self.metadata = {"render_modes": render_modes, "render_fps": 50}
        self.render_mode = render_mode
        self._initial_seed = seed
        self._key: jax.Array | None = None
        self._state: Any = None
        self._done = False

        def reset(key: jax.Array, params: Any) -> Any:
            key, key_reset = jax.random.split(key)
            obs, state = env.reset(key_reset, params)
            return key, obs, state

        def step(key: jax.Array, state: Any, action: Any, params: Any) -> Any:
            key, key_step = jax.random.split(key)
            obs, state, reward, terminated, truncated, info = env.step(key_step, state, action, params)
            return key, obs, state, reward, terminated, truncated, info

        self._reset_fn = jax.jit(reset)
        self._step_fn = jax.jit(step)
        self._render_fn = jax.jit(env.render) if render_modes else None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Start an episode: ``(obs, info)``; ``info`` is empty."""
        if seed is None and self._key is None:
            seed = self._initial_seed
        super().reset(seed=seed)
        if seed is not None:
            self._key = _seed_key(seed)
        elif self._key is None:
            self._key = jax.random.key(int(self.np_random.integers(2**31)))
        self._key, obs, self._state = self._reset_fn(self._key, self.params)
        self._done = False
        return _observation_to_gymnasium(self._lamella_observation_space, jax.device_get(obs)), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """One step: ``(obs, reward, terminated, truncated, info)`` with NumPy values."""
        if self._state is None:
            raise gymnasium.error.ResetNeeded("Call reset() before step().")
        if self._done:
            gymnasium.logger.warn(
                "step() called after the episode ended; call reset() first (the result is undefined)."
            )
        _inputs._check(self.lamella_env, self._lamella_action_space, action, "action")
        _check_in_space(self.lamella_env, self._lamella_action_space, action, "action")
        lamella_action = _to_lamella(self._lamella_action_space, action)
        self._key, obs, self._state, reward, terminated, truncated, info = self._step_fn(
            self._key, self._state, lamella_action, self.params
        )
        terminated, truncated = bool(terminated), bool(truncated)
        self._done = terminated or truncated
        obs = _observation_to_gymnasium(self._lamella_observation_space, jax.device_get(obs))
        return obs, float(reward), terminated, truncated, _to_numpy(info)

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """The current frame, uint8 ``(H, W, 3)``, when ``render_mode == "rgb_array"``; else None."""
        if self.render_mode is None:
            gymnasium.logger.warn("render() called without a render_mode; pass render_mode='rgb_array'.")
            return None
        if self._state is None:
            raise gymnasium.error.ResetNeeded("Call reset() before render().")
        assert self._render_fn is not None
        return np.asarray(self._render_fn(self._state, self.params))

    def __repr__(self) -> str:
        return f"GymnasiumEnv({self.lamella_env!r})"


class GymnasiumVectorEnv(VectorEnv):  # type: ignore[type-arg]
    """``num_envs`` copies of a lamella env as one ``gymnasium.vector.VectorEnv``.

    All envs step in one jitted, vmapped call. Episode ends follow gymnasium's
    ``AutoresetMode.SAME_STEP`` (declared in ``metadata["autoreset_mode"]``):
    an env that ends is reset within the same ``step``, the returned
    observation is the new episode's first, and the last observation and info
    of the ended episode are in ``infos["final_obs"]`` (an object array, None
    for envs that did not end) and ``infos["final_info"]``, with the masks
    ``infos["_final_obs"]`` / ``infos["_final_info"]``. The env's own info
    entries are batched arrays with a mask ``infos["_<name>"]`` that is False
    for envs that were reset on this step (their info moved to ``final_info``).

    Env ``i`` after ``reset(seed=s)`` follows exactly the key sequence of
    ``GymnasiumEnv(...).reset(seed=s + i)`` (and of its resets after each
    episode end), so it matches a ``SyncVectorEnv`` of :class:`GymnasiumEnv`
    in SAME_STEP mode transition for transition.

    Args:
        env_or_id: a registered id or a bare single-agent lamella env.
        num_envs: number of parallel envs.
        params: params shared by all envs (``default_params`` when None).
        seed: seed of the first ``reset()`` that is called without one.
    """

    def __init__(
        self,
        env_or_id: str | Environment[Any, Any],
        num_envs: int,
        params: Any = None,
        seed: int | None = None,
    ):
        num_envs = _inputs.integer_setting(num_envs, "num_envs", "GymnasiumVectorEnv", minimum=1)
        env, params = _single_agent_env(env_or_id, params)
        self.lamella_env, self.params, self.num_envs = env, params, num_envs
        self._lamella_observation_space = env.observation_space(params)
        self._lamella_action_space = env.action_space(params)
        self.single_observation_space = to_gymnasium_space(self._lamella_observation_space)
        self.single_action_space = to_gymnasium_space(self._lamella_action_space)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}
        self.render_mode = None
        self._initial_seed = seed
        self._keys: jax.Array | None = None
        self._state: Any = None

        def reset_one(key: jax.Array, params: Any) -> Any:
            key, key_reset = jax.random.split(key)
            obs, state = env.reset(key_reset, params)
            return key, obs, state

        def step_one(key: jax.Array, state: Any, action: Any, params: Any) -> Any:
            key, key_step = jax.random.split(key)
            obs, state, reward, terminated, truncated, info = env.step(key_step, state, action, params)
            done = episode_done(terminated, truncated)
            after_reset_key, reset_obs, reset_state = reset_one(key, params)
            select = lambda new, old: jnp.where(done, new, old)  # noqa: E731
            return (
                jax.random.wrap_key_data(
                    jnp.where(done, jax.random.key_data(after_reset_key), jax.random.key_data(key))
                ),
                jax.tree.map(select, reset_obs, obs),
                jax.tree.map(select, reset_state, state),
                obs,
                reward,
                terminated,
                truncated,
                info,
            )

        self._reset_fn = jax.jit(jax.vmap(reset_one, in_axes=(0, None)))
        self._step_fn = jax.jit(jax.vmap(step_one, in_axes=(0, 0, 0, None)))

    def reset(
        self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every env: ``(obs, infos)``. ``seed`` is one int (env ``i`` gets ``seed + i``) or one per env."""
        if seed is None and self._keys is None:
            seed = self._initial_seed
        if seed is None:
            if self._keys is None:
                seed = int(np.random.default_rng().integers(2**31 - self.num_envs))
        where = "GymnasiumVectorEnv.reset"
        if (
            isinstance(seed, Sequence | np.ndarray)
            and not isinstance(seed, str | bytes)
            and np.ndim(seed) > 0
        ):
            seeds = [_inputs.integer_setting(s, "seed", where) for s in seed]
            if len(seeds) != self.num_envs:
                raise ValueError(f"reset: got {len(seeds)} seeds for {self.num_envs} envs.")
        elif seed is not None:
            first = _inputs.integer_setting(seed, "seed", where)
            seeds = [first + i for i in range(self.num_envs)]
        super().reset(seed=seeds[0] if seed is not None else None)
        if seed is not None and max(seeds) < _SEED_WORD:
            self._keys = jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.uint32))
        elif seed is not None:
            self._keys = jnp.stack([_seed_key(s) for s in seeds])
        self._keys, obs, self._state = self._reset_fn(self._keys, self.params)
        return _to_numpy(obs), {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env; see the class docstring for the autoreset and ``infos`` layout."""
        if self._state is None:
            raise gymnasium.error.ResetNeeded("Call reset() before step().")
        _check_actions(self.lamella_env, self._lamella_action_space, actions, self.num_envs)
        lamella_actions = _to_lamella(self._lamella_action_space, actions)
        self._keys, obs, self._state, final_obs, reward, terminated, truncated, info = self._step_fn(
            self._keys, self._state, lamella_actions, self.params
        )
        obs, final_obs, reward, terminated, truncated, info = _to_numpy(
            (obs, final_obs, reward, terminated, truncated, info)
        )
        done = terminated | truncated
        infos: dict[str, Any] = {}
        for name, value in info.items():
            infos[name], infos[f"_{name}"] = value, ~done
        if done.any():
            finals = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(done):
                finals[i] = jax.tree.map(lambda x, i=i: x[i], final_obs)
            final_info: dict[str, Any] = {}
            for name, value in info.items():
                final_info[name], final_info[f"_{name}"] = value, done.copy()
            infos["final_obs"], infos["_final_obs"] = finals, done.copy()
            infos["final_info"], infos["_final_info"] = final_info, done.copy()
        return obs, reward.astype(np.float64), terminated, truncated, infos

    def __repr__(self) -> str:
        return f"GymnasiumVectorEnv({self.lamella_env!r}, num_envs={self.num_envs})"
