"""What a multi-agent policy sees: the observation, the action mask and (for MAPPO) the global state.

:class:`MultiAgentObservation` wraps a bare multi-agent env so that its observation is a dict::

    {"obs": (n, L) float32, "action_mask": (n, num_actions) bool, "global_state": (G,) float32}

(``"action_mask"`` only for discrete actions, ``"global_state"`` only when asked for; each
agent's observation and the global state are flattened, so an image ``(n, H, W, C)`` becomes
``(n, H * W * C)``, and a dict of per-agent arrays (IPD-in-the-Matrix's) is one row per agent,
its entries in sorted-key order: :func:`lamella.marl.shaping.observations.flatten_agent_observations`). Everything a learner needs for one step then travels
as the observation: lamella-agents' rollout collector stores it, ``AutoReset`` hands back the
dict of the state that ended an episode as ``info["final_observation"]`` (so a centralised
critic bootstraps a truncated episode from the *final* global state), and the network reads the
mask where it builds its distribution. Put it inside ``AutoReset``::

    env, params = lamella.envs.make("Foraging-8x8-2p-2f-coop-v3", autoreset=False)
    env = wrappers.AutoReset(MultiAgentObservation(env, global_state=True))

The mask of a step is the env's ``info["action_mask"]`` (the returned state's, per the
multi-agent contract); a reset state's is ``env.action_mask(state, params)``. An env without
illegal actions (no ``action_mask`` method) gets a mask of each agent's own actions: all True,
except that an agent with fewer actions than the largest (``MultiDiscrete([3, 5])``) has the
extra ones masked out. An env with continuous actions (a ``Box`` of shape ``(n, D)``) has no mask
entry.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents.config import ConfigError
from lamella.envs import EnvInputError, spaces, wrappers
from lamella.envs.environment import Environment, StepOutput, Wrapper

__all__ = ["MultiAgentObservation", "action_bounds_of", "check_multi_agent_env", "num_actions_of"]


def num_actions_of(env: Environment[Any, Any], params: Any) -> int:
    """The per-agent action count of a discrete multi-agent env (the largest agent's); 0 for
    continuous actions."""
    space = env.action_space(params)
    if isinstance(space, spaces.Box):
        return 0
    assert isinstance(space, spaces.MultiDiscrete)
    return int(np.max(np.asarray(space.nvec)))


def action_bounds_of(env: Environment[Any, Any], params: Any) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``(low, high)`` of each agent's continuous action (one float per action dimension; every
    agent has the same bounds, see :func:`check_multi_agent_env`); ``((), ())`` for discrete
    actions."""
    space = env.action_space(params)
    if not isinstance(space, spaces.Box):
        return (), ()
    low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
    return tuple(float(v) for v in low[0]), tuple(float(v) for v in high[0])


def check_multi_agent_env(
    env: Environment[Any, Any],
    params: Any,
    algorithm: str,
    *,
    global_state: bool = False,
    env_id: str | None = None,
    continuous_action: str = "tanh",
    team_reward: bool = False,
) -> None:
    """Raise :class:`~lamella.agents.config.ConfigError` (a user error: one line, exit status 2
    from ``lamella train``) unless ``env`` is a multi-agent env with discrete actions
    (``MultiDiscrete``) or continuous ones (a ``Box`` of shape ``(n, D)``, the same bounds for
    every agent, finite where ``continuous_action="tanh"`` squashes into them), observations in a
    ``Box`` of shape ``(n, ...)`` or a dict of them, has a
    ``global_state`` where ``global_state`` is asked for, and agents that form one team where
    ``team_reward`` is asked for (an env with ``cooperative = False`` has none). ``env_id``
    names the env in the message (default: ``env.name``)."""
    name = env_id or getattr(env, "name", type(env).__name__)
    if int(getattr(env, "num_agents", 1)) < 2:
        raise ConfigError(
            f"{algorithm} trains multi-agent envs (num_agents > 1); {name} has a single agent. "
            f"Train it with ppo (lamella train ppo --env {name}), or pick a multi-agent env "
            "such as Foraging-8x8-2p-2f-coop-v3."
        )
    num_agents = int(env.num_agents)
    observation_space = env.observation_space(params)
    entries = (
        list(observation_space.spaces.values())
        if isinstance(observation_space, spaces.Dict)
        else [observation_space]
    )
    if not entries or not all(
        isinstance(entry, spaces.Box) and entry.shape[:1] == (num_agents,) for entry in entries
    ):
        raise ConfigError(
            f"{algorithm} takes each agent's observation as a Box with the agent axis first, (num_agents, "
            f"...) = ({num_agents}, ...), or a dict of such Boxes; {name} observes {observation_space!r}. "
            "Wrap the env so that it does."
        )
    space = env.action_space(params)
    if isinstance(space, spaces.Box):
        if len(space.shape) != 2 or space.shape[0] != num_agents:
            raise ConfigError(
                f"{algorithm} takes continuous actions as a Box of shape (num_agents, D) = "
                f"({num_agents}, D); {name}'s action space has shape {space.shape}."
            )
        low, high = np.asarray(space.low), np.asarray(space.high)
        if not (
            np.array_equal(low, np.broadcast_to(low[:1], low.shape))
            and np.array_equal(high, np.broadcast_to(high[:1], high.shape))
        ):
            raise ConfigError(
                f"{algorithm} needs the same action bounds for every agent; {name}'s differ between "
                "agents. Rescale the actions in a wrapper so every agent's Box is the same."
            )
        if continuous_action not in ("tanh", "clip"):
            raise ConfigError(f"continuous_action must be 'tanh' or 'clip', got {continuous_action!r}.")
        if continuous_action == "tanh" and not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ConfigError(
                f"{name}'s action bounds are not finite, so tanh squashing cannot map into them; "
                "set continuous_action=clip."
            )
    elif not isinstance(space, spaces.MultiDiscrete):
        raise ConfigError(
            f"{algorithm} supports discrete actions (MultiDiscrete, one int per agent) and continuous "
            f"ones (Box (num_agents, D)); {name}'s action space is {type(space).__name__}."
        )
    if global_state and not callable(getattr(env, "global_state", None)):
        raise ConfigError(
            f"{algorithm}'s centralised critic reads env.global_state(state, params), which {name} does "
            f"not define. Use ippo (independent critics on each agent's observation) for {name}."
        )
    if team_reward and getattr(env, "cooperative", True) is False:
        raise ConfigError(
            f"team_reward=true trains every agent on the sum of all agents' rewards, but {name} has no team "
            "reward: its agents play against each other (env.cooperative is False). Set team_reward=false "
            "(each agent learns from its own reward)."
        )


class MultiAgentObservation(Wrapper):
    """Dict observations ``{"obs", "action_mask"[, "global_state"]}`` (see the module docs).

    Wraps a bare env (no auto-reset): its state is the env's own, so ``env.action_mask`` and
    ``env.global_state`` read it directly.

    Args:
        env: a multi-agent env (discrete or continuous actions).
        global_state: add ``"global_state"`` (``env.global_state(state, params)``, float32).
    """

    def __init__(self, env: Environment[Any, Any], global_state: bool = False):
        if isinstance(env, wrappers.AutoReset):
            raise ValueError(
                "MultiAgentObservation wraps a bare env: put it inside AutoReset "
                "(lamella.envs.make(id, autoreset=False)), so the final observation is a dict too."
            )
        # A dict observation (IPD-in-the-Matrix's view and inventory): one flat row per agent, as
        # the shaping runners take it (a wrapper that delegates action_mask and global_state).
        from lamella.marl.shaping.observations import flatten_agent_observations

        env = flatten_agent_observations(env, env.default_params)
        super().__init__(env)
        # The multi-agent extras (action_mask, global_state) are not on the base Environment.
        self.inner: Any = env
        self.with_global_state = bool(global_state)
        self._continuous = isinstance(env.action_space(env.default_params), spaces.Box)
        self._has_mask = callable(getattr(env, "action_mask", None)) and not self._continuous

    def _checked(self, mask: Any) -> jax.Array:
        """The env's mask as bool ``(n, num_actions)``; another shape is refused (trace time)."""
        mask = jnp.asarray(mask, jnp.bool_)
        if not self._continuous:
            expected = (self.num_agents, num_actions_of(self.env, self.env.default_params))
            if mask.shape != expected:
                raise EnvInputError(
                    f"{getattr(self.inner, 'name', type(self.inner).__name__)}'s action mask has shape {mask.shape}; the multi-agent runners "
                    f"need one bool per action of each agent, (num_agents, num_actions) = {expected}, from "
                    "env.action_mask(state, params) and a step's info['action_mask']. Fix the env's mask."
                )
        return mask

    def _mask(self, state: Any, params: Any) -> jax.Array:
        if self._has_mask:
            return self._checked(self.inner.action_mask(state, params))
        # Each agent's own actions: an agent with fewer than the largest has the rest masked out.
        space = self.env.action_space(params)
        assert isinstance(space, spaces.MultiDiscrete)  # check_multi_agent_env's; no mask for a Box
        nvec = np.asarray(space.nvec).reshape(-1, 1)
        return jnp.asarray(np.arange(num_actions_of(self.env, params)) < nvec)

    def _observe(self, obs: Any, state: Any, mask: jax.Array | None, params: Any) -> dict[str, jax.Array]:
        # One flat vector per agent (the networks' (n, L)), one for the global state.
        out = {"obs": jnp.asarray(obs, jnp.float32).reshape((self.num_agents, -1))}
        if mask is not None:
            out["action_mask"] = mask
        if self.with_global_state:
            out["global_state"] = jnp.asarray(self.inner.global_state(state, params), jnp.float32).reshape(-1)
        return out

    def reset_env(self, key: jax.Array, params: Any) -> tuple[dict[str, jax.Array], Any]:
        obs, state = self.env.reset_env(key, params)
        mask = None if self._continuous else self._mask(state, params)
        return self._observe(obs, state, mask, params), state

    def step_env(self, key: jax.Array, state: Any, action: Any, params: Any) -> StepOutput:
        obs, state, reward, terminated, truncated, info = self.env.step_env(key, state, action, params)
        if self._continuous:
            mask = None
        else:
            mask = self._checked(info["action_mask"]) if "action_mask" in info else self._mask(state, params)
        return (
            self._observe(obs, state, mask, params),
            state,
            reward,
            terminated,
            truncated,
            info,
        )

    def observation_space(self, params: Any = None) -> spaces.Dict:
        n, num_actions = self.num_agents, num_actions_of(self.env, params)
        inner: Any = self.env.observation_space(params)
        entries: dict[str, spaces.Space] = {"obs": _flat_box(inner, (n, -1))}
        if not self._continuous:
            entries["action_mask"] = spaces.Box(0, 1, (n, num_actions), np.bool_)
        if self.with_global_state:
            entries["global_state"] = _flat_box(self.inner.global_state_space(params), (-1,))
        return spaces.Dict(entries)


def _flat_box(space: Any, shape: tuple[int, ...]) -> spaces.Box:
    """``space`` (a Box) reshaped to ``shape``, float32."""
    low, high = np.asarray(space.low).reshape(shape), np.asarray(space.high).reshape(shape)
    return spaces.Box(low, high, low.shape, np.float32)
