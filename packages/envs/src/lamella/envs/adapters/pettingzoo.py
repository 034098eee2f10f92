"""PettingZoo adapter: a lamella multi-agent env as a ``pettingzoo.ParallelEnv``.

>>> from lamella.envs.adapters.pettingzoo import PettingZooParallelEnv
>>> env = PettingZooParallelEnv("Foraging-8x8-2p-2f-v3")
>>> obs, infos = env.reset(seed=0)
>>> actions = {agent: env.action_space(agent).sample(infos[agent]["action_mask"]) for agent in env.agents}
>>> obs, rewards, terminations, truncations, infos = env.step(actions)

Agent ``i`` of the lamella env (row ``i`` of every agent-axis array) is
``"agent_i"``. The env's jitted ``reset``/``step`` are compiled once per
adapter (on the first call) and the values are converted between JAX and
NumPy at the boundary. Needs the ``pettingzoo`` extra:
``pip install 'lamella-envs[pettingzoo]'``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import _inputs, spaces
from lamella.envs.environment import Environment
from lamella.envs.errors import MissingExtraError

try:
    import gymnasium
    from pettingzoo.utils.env import ParallelEnv
except ImportError as error:  # pragma: no cover - depends on the extra
    raise MissingExtraError(
        "lamella.envs.adapters.pettingzoo needs pettingzoo>=1.27: pip install 'lamella-envs[pettingzoo]'"
    ) from error

from lamella.envs.adapters.gymnasium import (
    _bare_env,
    _check_in_space,
    _render_modes,
    _seed_key,
    to_gymnasium_space,
)

__all__ = ["PettingZooParallelEnv", "agent_space"]

_MASK_PLACES = ("info", "obs")


def agent_space(space: spaces.Space, index: int) -> spaces.Space:
    """Agent ``index``'s own lamella space, cut from a joint space with a leading agent axis.

    ``MultiDiscrete(nvec)`` gives ``Discrete(nvec[index])``; a ``Box`` of shape
    ``(n, ...)`` gives row ``index`` of its bounds; a ``Dict`` is cut key by key.

    Raises:
        TypeError: ``space`` has no agent axis this function knows.
    """
    if isinstance(space, spaces.MultiDiscrete) and len(space.shape) == 1:
        return spaces.Discrete(int(space.nvec[index]), dtype=space.dtype)
    if isinstance(space, spaces.Box) and len(space.shape) >= 1:
        return spaces.Box(space.low[index], space.high[index], space.shape[1:], space.dtype)
    if isinstance(space, spaces.Dict):
        return spaces.Dict({name: agent_space(s, index) for name, s in space.spaces.items()})
    raise TypeError(
        f"agent_space: cannot cut agent {index}'s space from {space!r}; a multi-agent env's spaces "
        "are MultiDiscrete([k] * n), a Box of shape (n, ...) or a Dict of them (see the multi-agent "
        "contract in docs/architecture.md)."
    )


def _row(tree: Any, index: int) -> Any:
    return jax.tree.map(lambda x: x[index], tree)


class PettingZooParallelEnv(ParallelEnv):  # type: ignore[type-arg]
    """A ``pettingzoo.ParallelEnv`` over a lamella multi-agent env (``num_agents > 1``).

    * **Agents.** ``possible_agents`` is ``["agent_0", ..., "agent_{n-1}"]``.
      ``agents`` holds the agents still playing: an agent leaves it on the step
      that reports it terminated or truncated, and never comes back; ``agents``
      is empty when the episode is over (call ``reset()``). ``step`` returns
      dicts keyed by the agents that acted (those in ``agents`` before it).
    * **Actions.** ``step(actions)`` needs exactly one action per agent in
      ``agents``. The lamella env still takes a row for every agent; agents that
      finished get the env's no-op row (0 for discrete actions, the ``Box``
      value nearest 0 for continuous ones), which the multi-agent contract says
      the env ignores.
    * **Spaces.** ``observation_space(agent)`` / ``action_space(agent)`` are the
      gymnasium equivalents of that agent's row of the lamella spaces, built
      once and returned as the same object on every call.
    * **Seeding.** ``reset(seed=s)`` sets the JAX key to ``jax.random.key(s)``;
      each reset and step then splits it (``key, sub = jax.random.split(key)``)
      and passes ``sub`` to the lamella ``reset``/``step``, so a seeded run is a
      deterministic function of ``s`` and matches the lamella env driven with
      the same keys. ``reset()`` without a seed continues the key sequence.
    * **Action masks** (envs with ``env.action_mask``, e.g. Level-Based
      Foraging): bool ``(num_actions,)`` in ``infos[agent]["action_mask"]`` by
      default (observations stay plain ``Box`` arrays, as PettingZoo's
      checkers prefer), or with ``action_mask_in="obs"`` as
      ``obs[agent] = {"observation": ..., "action_mask": ...}`` (a ``Dict``
      observation space), the one place ``parallel_api_test`` reads masks from.
      Masks are int8 0/1 arrays, which gymnasium's ``Discrete.sample(mask)``
      takes. An illegal action is the env's no-op either way.
    * **Other info.** Each array of the env's ``info`` (in nested dicts too, such
      as MPE's ``benchmark_data``) with a leading agent axis is split per agent;
      other entries are given to every agent whole.
    * **Global state** (envs with ``env.global_state``): ``state()`` returns
      it as NumPy, and ``state_space`` is its gymnasium space; other envs have
      no ``state_space`` and ``state()`` raises ``NotImplementedError``.
    * **Rendering.** ``render_mode="rgb_array"`` makes ``render()`` return the
      env's uint8 ``(H, W, 3)`` frame.

    Args:
        env_or_id: a registered id (built with ``autoreset=False``) or a bare
            lamella env with ``num_agents > 1`` (not wrapped in ``AutoReset``).
        params: the env's params (its ``default_params`` when None).
        seed: seed of the first ``reset()`` that is called without one.
        render_mode: None or ``"rgb_array"``.
        action_mask_in: ``"info"`` (default) or ``"obs"``; see above.

    Attributes:
        lamella_env, params: the wrapped env and its params.
        max_cycles: unused by the adapter (episodes end when the lamella env
            says so); PettingZoo's ``parallel_api_test`` assigns it.
    """

    def __init__(
        self,
        env_or_id: str | Environment[Any, Any],
        params: Any = None,
        seed: int | None = None,
        render_mode: str | None = None,
        action_mask_in: str = "info",
    ):
        if action_mask_in not in _MASK_PLACES:
            raise ValueError(
                f"PettingZooParallelEnv: action_mask_in must be one of {_MASK_PLACES}, got {action_mask_in!r}."
            )
        env: Any  # the optional multi-agent methods (action_mask, global_state) are not on the base class
        env, params = _multi_agent_env(env_or_id, params)
        self.lamella_env, self.params = env, params
        n = self.num_lamella_agents = int(env.num_agents)
        self.possible_agents = [f"agent_{i}" for i in range(n)]
        self._index = {agent: i for i, agent in enumerate(self.possible_agents)}
        self.agents: list[str] = []
        self.max_cycles: int | None = None

        self._lamella_observation_space = env.observation_space(params)
        self._lamella_action_space = env.action_space(params)
        # MPE and JaxMARL envs with continuous actions define action_mask only to refuse the call.
        self._has_mask = callable(getattr(env, "action_mask", None)) and not isinstance(
            self._lamella_action_space, spaces.Box
        )
        self._mask_in_obs = self._has_mask and action_mask_in == "obs"
        self._has_state = callable(getattr(env, "global_state", None))
        self._agent_action_spaces = [agent_space(self._lamella_action_space, i) for i in range(n)]
        self._observation_spaces: dict[str, gymnasium.spaces.Space[Any]] = {}
        self._action_spaces: dict[str, gymnasium.spaces.Space[Any]] = {}
        for i, agent in enumerate(self.possible_agents):
            obs_space = to_gymnasium_space(agent_space(self._lamella_observation_space, i))
            action_space = to_gymnasium_space(self._agent_action_spaces[i])
            if self._mask_in_obs:
                if not isinstance(action_space, gymnasium.spaces.Discrete):
                    raise ValueError(f"{env.name}: action masks need discrete actions, got {action_space!r}.")
                mask_space = gymnasium.spaces.Box(0, 1, (int(action_space.n),), np.int8)
                obs_space = gymnasium.spaces.Dict({"observation": obs_space, "action_mask": mask_space})
            self._observation_spaces[agent] = obs_space
            self._action_spaces[agent] = action_space
        if self._has_state:
            self.state_space = to_gymnasium_space(env.global_state_space(params))
        self._noop = np.stack([_noop_action(s) for s in self._agent_action_spaces])

        render_modes = _render_modes(env, params, render_mode)
        self.metadata = {"name": env.name, "render_modes": render_modes, "render_fps": 10}
        self.render_mode = render_mode
        self._initial_seed = seed
        self._key: jax.Array | None = None
        self._state: Any = None

        has_mask = self._has_mask

        def reset(key: jax.Array, params: Any) -> Any:
            key, key_reset = jax.random.split(key)
            obs, state = env.reset(key_reset, params)
            info = {"action_mask": env.action_mask(state, params)} if has_mask else {}
            return key, obs, state, info

        def step(key: jax.Array, state: Any, action: Any, params: Any) -> Any:
            key, key_step = jax.random.split(key)
            obs, state, reward, terminated, truncated, info = env.step(key_step, state, action, params)
            return key, obs, state, reward, terminated, truncated, info

        self._reset_fn = jax.jit(reset)
        self._step_fn = jax.jit(step)
        self._render_fn = jax.jit(env.render) if render_modes else None
        self._state_fn = jax.jit(env.global_state) if self._has_state else None

    # Spaces -------------------------------------------------------------------------------

    def observation_space(self, agent: str) -> gymnasium.spaces.Space[Any]:
        """Agent ``agent``'s observation space (the same object on every call)."""
        return self._observation_spaces[self._check_agent(agent)]

    def action_space(self, agent: str) -> gymnasium.spaces.Space[Any]:
        """Agent ``agent``'s action space (the same object on every call)."""
        return self._action_spaces[self._check_agent(agent)]

    def _check_agent(self, agent: Any) -> str:
        if agent not in self._index:
            raise KeyError(
                f"{self.lamella_env.name}: unknown agent {agent!r}; the agents are {self.possible_agents}."
            )
        return str(agent)

    # Reset and step -----------------------------------------------------------------------

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode: ``(observations, infos)`` for every agent. ``options`` is ignored."""
        if seed is None and self._key is None:
            seed = self._initial_seed
        if seed is not None:
            self._key = _seed_key(_inputs.integer_setting(seed, "seed", "PettingZooParallelEnv.reset"))
        elif self._key is None:
            self._key = jax.random.key(int(np.random.default_rng().integers(2**31)))
        self._key, obs, self._state, info = self._reset_fn(self._key, self.params)
        self.agents = list(self.possible_agents)
        return self._split(obs, info, self.agents)

    def step(
        self, actions: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, float], dict[str, bool], dict[str, bool], dict[str, Any]]:
        """One joint step: ``(observations, rewards, terminations, truncations, infos)``.

        Raises:
            RuntimeError: no episode is running (call ``reset()``).
            KeyError: ``actions`` names an unknown agent, an agent that has
                already finished, or lacks an agent in ``agents``.
        """
        if self._state is None or not self.agents:
            raise RuntimeError(
                f"{self.lamella_env.name}: step() called with no episode running; call reset() first."
            )
        if not isinstance(actions, dict):
            raise TypeError(
                f"step() takes a dict {{agent: action}} for the agents {self.agents}, got {type(actions).__name__}."
            )
        unknown = [agent for agent in actions if agent not in self._index]
        if unknown:
            raise KeyError(f"step(): unknown agent(s) {unknown}; the agents are {self.possible_agents}.")
        finished = [agent for agent in actions if agent not in self.agents]
        if finished:
            raise KeyError(
                f"step(): agent(s) {finished} already finished this episode; pass actions only for "
                f"env.agents = {self.agents}."
            )
        missing = [agent for agent in self.agents if agent not in actions]
        if missing:
            raise KeyError(f"step(): no action for agent(s) {missing}; pass one for each of {self.agents}.")
        joint = self._noop.copy()
        for agent, action in actions.items():
            index = self._index[agent]
            # The joint action is an array of the space's dtype: 1.7 or "1" would be stored as 1.
            _inputs._check(self.lamella_env, self._agent_action_spaces[index], action, f"{agent}'s action")
            _check_in_space(self.lamella_env, self._agent_action_spaces[index], action, f"{agent}'s action")
            value = np.asarray(action)
            if value.shape != joint.shape[1:]:
                raise ValueError(
                    f"step(): {agent}'s action has shape {value.shape}, expected {joint.shape[1:]} "
                    f"({self._action_spaces[agent]!r})."
                )
            joint[index] = value
        lamella_action = jnp.asarray(joint, self._lamella_action_space.dtype)
        self._key, obs, self._state, reward, terminated, truncated, info = self._step_fn(
            self._key, self._state, lamella_action, self.params
        )
        acting = list(self.agents)
        observations, infos = self._split(obs, info, acting)
        reward, terminated, truncated = jax.device_get((reward, terminated, truncated))
        rewards = {agent: float(reward[self._index[agent]]) for agent in acting}
        terminations = {agent: bool(terminated[self._index[agent]]) for agent in acting}
        truncations = {agent: bool(truncated[self._index[agent]]) for agent in acting}
        self.agents = [agent for agent in acting if not (terminations[agent] or truncations[agent])]
        return observations, rewards, terminations, truncations, infos

    def _split(
        self, obs: Any, info: dict[str, Any], agents: list[str]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Per-agent NumPy observations and infos for ``agents``."""
        obs, info = jax.tree.map(np.asarray, jax.device_get((obs, info)))
        n = self.num_lamella_agents
        if "action_mask" in info:
            info = {**info, "action_mask": info["action_mask"].astype(np.int8)}
        observations, infos = {}, {}
        for agent in agents:
            i = self._index[agent]
            agent_info = {
                name: jax.tree.map(
                    lambda x, i=i: _row(x, i) if np.ndim(x) >= 1 and np.shape(x)[0] == n else x, value
                )
                for name, value in info.items()
            }
            agent_obs = _row(obs, i)
            if self._mask_in_obs:
                agent_obs = {"observation": agent_obs, "action_mask": agent_info.pop("action_mask")}
            observations[agent], infos[agent] = agent_obs, agent_info
        return observations, infos

    # State, render, close -------------------------------------------------------------------

    def state(self) -> np.ndarray:
        """The env's global state (``env.global_state``) as NumPy, in ``state_space``."""
        if self._state_fn is None:
            raise NotImplementedError(
                f"{self.lamella_env.name} has no global_state(state, params), so the adapter has no state()."
            )
        if self._state is None:
            raise RuntimeError("state() needs a running episode; call reset() first.")
        return np.asarray(self._state_fn(self._state, self.params))

    def render(self) -> np.ndarray | None:
        """The current frame, uint8 ``(H, W, 3)``, when ``render_mode == "rgb_array"``; else None."""
        if self.render_mode is None:
            gymnasium.logger.warn("render() called without a render_mode; pass render_mode='rgb_array'.")
            return None
        if self._state is None:
            raise RuntimeError("render() needs a running episode; call reset() first.")
        assert self._render_fn is not None
        return np.asarray(self._render_fn(self._state, self.params))

    def close(self) -> None:
        """Nothing to release."""

    def __str__(self) -> str:
        return self.lamella_env.name

    def __repr__(self) -> str:
        return f"PettingZooParallelEnv({self.lamella_env!r})"


def _noop_action(space: spaces.Space) -> np.ndarray:
    if isinstance(space, spaces.Discrete):
        return np.zeros((), np.dtype(space.dtype))
    if isinstance(space, spaces.Box):
        return np.clip(np.zeros(space.shape, space.low.dtype), space.low, space.high)
    raise TypeError(f"PettingZooParallelEnv: unsupported per-agent action space {space!r}.")


def _multi_agent_env(
    env_or_id: str | Environment[Any, Any], params: Any
) -> tuple[Environment[Any, Any], Any]:
    env, params = _bare_env(
        env_or_id,
        params,
        adapter="PettingZoo",
        expects="empty env.agents and leave the reset to the caller",
        example="Foraging-8x8-2p-2f-v3",
    )
    if env.num_agents < 2:
        raise ValueError(
            f"{env.name} is single-agent (num_agents == {env.num_agents}); PettingZooParallelEnv wraps "
            "multi-agent envs. Use lamella.envs.adapters.gymnasium.GymnasiumEnv instead."
        )
    return env, params
