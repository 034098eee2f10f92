"""JaxMARL adapter: a JaxMARL multi-agent env behind the lamella :class:`~lamella.envs.Environment` API.

>>> import jax
>>> from lamella.envs.adapters.jaxmarl import from_jaxmarl
>>> env = from_jaxmarl("HeuristicEnemySMAX", scenario="3m")
>>> obs, state = env.reset(jax.random.key(0))          # obs: float32 (3, 75)
>>> mask = env.action_mask(state)                      # bool (3, 8)

JaxMARL (``jaxmarl==0.2.0``) speaks in dicts keyed by agent name; lamella in arrays with a
leading agent axis (docs/architecture.md, "The multi-agent contract"). :func:`from_jaxmarl`
converts one into the other, calling the JaxMARL env's own ``reset``/``step_env`` with the key
it is given, so the adapted env computes exactly what JaxMARL computes. Needs the ``jaxmarl``
extra (``pip install 'lamella-envs[jaxmarl]'``); jaxmarl is imported when
:func:`from_jaxmarl` is called, never when this module is.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import inspect
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import spaces, struct
from lamella.envs.adapters._notices import without_import_notices
from lamella.envs.environment import Environment, StepOutput
from lamella.envs.errors import MissingExtraError, UserError

__all__ = [
    "MABRAX_IDS",
    "PREFIX",
    "JaxMARLEnv",
    "JaxMARLError",
    "JaxMARLParams",
    "JaxMARLState",
    "from_jaxmarl",
    "make_from_id",
]

PRNGKey = jax.Array
#: ``episode_truncated(jaxmarl_env, jaxmarl_state) -> bool``: whether an episode that JaxMARL
#: reports over (``dones["__all__"]``) ended by its time limit.
TruncationRule = Callable[[Any, Any], jax.Array]

_INSTALL = "pip install 'lamella-envs[jaxmarl]'"


class JaxMARLError(UserError, ValueError):
    """A JaxMARL env name, scenario, layout or option the adapter cannot use; the message names the fix."""


def _import_jaxmarl() -> Any:
    try:
        with without_import_notices():  # its search for a source checkout's submodules
            return importlib.import_module("jaxmarl")
    except ImportError as error:
        raise MissingExtraError(
            f"lamella.envs.adapters.jaxmarl needs JaxMARL (jaxmarl==0.2.0): {_INSTALL}"
        ) from error


@struct.dataclass
class JaxMARLParams:
    """The adapted env's params. JaxMARL envs keep every setting on the env object (pass them
    to :func:`from_jaxmarl`), so nothing here is traced.

    Attributes:
        max_steps_in_episode: the JaxMARL env's ``max_steps`` (None where it has none); read by
            lamella's runners as the step cap of an evaluation. Changing it changes nothing.
    """

    max_steps_in_episode: int | None = struct.field(static=True, default=None)


@struct.dataclass
class JaxMARLState:
    """The adapted env's state.

    Attributes:
        env_state: the JaxMARL env's own state, unchanged.
        agent_done: bool ``(n,)``, agents that finished before the episode ended (their
            ``terminated`` stays True until the episode is over).
    """

    env_state: Any
    agent_done: jax.Array


# Per-family rules --------------------------------------------------------------------------
# JaxMARL reports one `dones["__all__"]` per episode and no truncation flag. Each family's rule
# says, from the state after the step, whether an episode that is over was cut by the time limit.


def _smax_state(jaxmarl_env: Any, state: Any) -> Any:
    """The SMAX state inside ``state`` (HeuristicEnemySMAX nests it under ``.state``)."""
    return state.state if hasattr(state, "enemy_policy_state") else state


def _smax_truncated(jaxmarl_env: Any, state: Any) -> jax.Array:
    inner = _smax_state(jaxmarl_env, state)
    allies = int(jaxmarl_env.num_allies)
    allies_dead = jnp.all(~inner.unit_alive[:allies])
    enemies_dead = jnp.all(~inner.unit_alive[allies:])
    return ~(allies_dead | enemies_dead)


def _smax_agent_terminal(jaxmarl_env: Any, state: Any, num_agents: int) -> jax.Array:
    # SMAX's per-agent done is "dead"; agents are its first num_agents units (allies first).
    return ~_smax_state(jaxmarl_env, state).unit_alive[:num_agents]


def _always(jaxmarl_env: Any, state: Any) -> jax.Array:
    return jnp.asarray(True)


def _never(jaxmarl_env: Any, state: Any) -> jax.Array:
    return jnp.asarray(False)


def _time_limit(jaxmarl_env: Any, state: Any) -> jax.Array:
    return jnp.asarray(state.step >= jaxmarl_env.max_steps)


def _brax_time_limit(jaxmarl_env: Any, state: Any) -> jax.Array:
    # Brax's EpisodeWrapper: 1 where the time limit ended an episode the body did not end itself.
    return jnp.asarray(state.info["truncation"] > 0)


#: JaxMARL 0.2.0's MaBrax ids: Brax bodies split into agents (``jaxmarl.registered_envs``).
MABRAX_IDS = ("ant_4x2", "halfcheetah_6x1", "hopper_3x1", "humanoid_9|8", "walker2d_2x3")


def _family(jaxmarl_env: Any) -> str:
    """``"smax"`` (SMAX and HeuristicEnemySMAX), ``"overcooked"``, ``"overcooked_v2"``, ``"hanabi"``,
    ``"mpe"``, ``"coin_game"``, ``"mabrax"`` or ``"other"``."""
    classes = {
        "smax": ("jaxmarl.environments.smax.smax_env", "SMAX"),
        "enemy_smax": ("jaxmarl.environments.smax.heuristic_enemy_smax_env", "EnemySMAX"),
        "overcooked": ("jaxmarl.environments.overcooked.overcooked", "Overcooked"),
        "overcooked_v2": ("jaxmarl.environments.overcooked_v2.overcooked", "OvercookedV2"),
        "hanabi": ("jaxmarl.environments.hanabi.hanabi", "HanabiEnv"),
        "mpe": ("jaxmarl.environments.mpe.simple", "SimpleMPE"),
        "coin_game": ("jaxmarl.environments.coin_game.coin_game", "CoinGame"),
        "mabrax": ("jaxmarl.environments.mabrax.mabrax_env", "MABraxEnv"),
    }
    for family, (module, name) in classes.items():
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):  # pragma: no cover - another jaxmarl version
            continue
        if isinstance(jaxmarl_env, cls):
            return "smax" if family == "enemy_smax" else family
    return "other"


_TRUNCATION_RULES: dict[str, TruncationRule] = {
    "smax": _smax_truncated,  # a battle won or lost is terminal; the time limit truncates
    "overcooked": _always,  # ends only at max_steps
    "overcooked_v2": _always,
    "mpe": _always,  # ends only at max_steps
    "coin_game": _always,  # ends only after num_outer_steps inner episodes
    "hanabi": _never,  # ends only when the game is over (no time limit)
    "mabrax": _brax_time_limit,  # a fallen body is terminal; Brax's episode length truncates
}


def _noop_actions(jaxmarl_env: Any, family: str) -> int | None:
    """The family's no-op action id (None: use 0)."""
    if family == "smax":
        return int(jaxmarl_env.num_movement_actions) - 1  # "stop"
    if family in ("overcooked", "overcooked_v2"):
        return 4  # "stay"
    if family == "hanabi":
        return int(jaxmarl_env.num_moves) - 1  # "noop" (the only legal move of a waiting player)
    return None


def _overcooked_frame(jaxmarl_env: Any, state: Any) -> np.ndarray:
    from jaxmarl.viz.overcooked_visualizer import TILE_PIXELS, OvercookedVisualizer

    padding = jaxmarl_env.agent_view_size - 2
    grid = np.asarray(state.maze_map[padding:-padding, padding:-padding, :])
    frame = OvercookedVisualizer._render_grid(
        grid,
        tile_size=TILE_PIXELS,
        highlight_mask=None,
        agent_dir_idx=np.asarray(state.agent_dir_idx),
        agent_inv=np.asarray(state.agent_inv),
    )
    return np.asarray(frame, np.uint8)


def _overcooked_frame_shape(jaxmarl_env: Any) -> tuple[int, int, int]:
    """The shape of :func:`_overcooked_frame`'s frames: a tile per cell of the cropped maze map
    (its shape from tracing ``reset``, which compiles nothing)."""
    from jaxmarl.viz.overcooked_visualizer import TILE_PIXELS

    _, state = jax.eval_shape(jaxmarl_env.reset, jax.random.key(0))
    padding = jaxmarl_env.agent_view_size - 2
    rows, cols = (size - 2 * padding for size in state.maze_map.shape[:2])
    return (rows * TILE_PIXELS, cols * TILE_PIXELS, 3)


def _strong(tree: Any) -> Any:
    """``tree`` without weak types: some JaxMARL resets return weakly typed leaves (the heuristic
    SMAX enemy's ``last_attacked_enemy``) that its step returns strongly typed, which would make
    a jitted step trace twice."""

    def strong(x: Any) -> Any:
        aval = jax.typeof(x)
        return jnp.asarray(x, aval.dtype) if getattr(aval, "weak_type", False) else x

    return jax.tree.map(strong, tree)


# Construction ------------------------------------------------------------------------------


def _bounds(space: Any, shape: tuple[int, ...], dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """A JaxMARL ``Box``'s bounds as arrays of ``shape`` (-inf/inf, or the dtype's range, where
    it has none or their shape does not fit: JaxMARL's declared shapes are not always the
    returned ones, e.g. Overcooked declares (W, H, 26) and returns (H, W, 26))."""
    if jnp.issubdtype(dtype, jnp.integer):
        info = np.iinfo(dtype)
        default_low, default_high = float(info.min), float(info.max)
    else:
        default_low, default_high = -np.inf, np.inf
    low = np.full(shape, default_low)
    high = np.full(shape, default_high)
    for name, target in (("low", low), ("high", high)):
        value = getattr(space, name, None)
        if value is None:
            continue
        value = np.asarray(value, np.float64)
        if value.ndim == 0 or value.shape == shape:
            target[...] = np.clip(value, default_low, default_high)
    return low, high


class JaxMARLEnv(Environment[JaxMARLState, JaxMARLParams]):
    """A JaxMARL multi-agent env behind the lamella API; built by :func:`from_jaxmarl`.

    Agents are ``jaxmarl_env.agents`` in their order (``env.agent_names``): row ``i`` of every
    agent-axis array is agent ``agent_names[i]`` (SMAX: the allies; HeuristicEnemySMAX's enemies
    are part of the env). With one agent there is no agent axis (a single-agent env).

    Observation: ``(n, ...)``, each agent's JaxMARL observation stacked, in the dtype JaxMARL
    returns (Overcooked: uint8 ``(n, H, W, 26)``; SMAX, Hanabi: float32 ``(n, O)``). Where
    agents' observations differ in shape they are flattened and zero-padded to the largest size
    ``O`` (and with ``flatten_observations=True`` they are flattened in any case):
    ``env.observation_sizes[i]`` entries are agent ``i``'s, the rest padding
    (``env.observation_mask``, bool ``(n, O)``, marks the real entries). Bounds are JaxMARL's
    ``Box`` bounds (padding: ``[0, 0]``). Non-agent entries of JaxMARL's observation dict are
    dropped; SMAX's ``"world_state"`` is :meth:`global_state`.

    Action, discrete: int32 ``(n,)``, ``MultiDiscrete([A] * n)``, ``A`` the largest per-agent
    count (``env.num_actions_per_agent``). Ids ``>= num_actions_per_agent[i]`` (padding) and
    negative ids are replaced by the no-op ``env.noop_actions[i]`` (SMAX: stop, Overcooked:
    stay, Hanabi: noop, others: 0 unless ``noop_action`` is given) before JaxMARL sees them.
    Other actions go to JaxMARL as they are; what an action that is illegal under the mask does
    is JaxMARL's rule (SMAX: an attack it cannot make does nothing, the unit stands still; Hanabi: only the
    current player's action counts). Continuous: float32 ``(n, D)``, each agent's ``Box`` row
    padded to the largest size ``D`` (``env.action_sizes``) with bounds ``[0, 0]``; the padding
    is ignored.

    Reward: float32 ``(n,)``, JaxMARL's per-agent rewards (shared where JaxMARL shares them:
    SMAX gives each team's reward to dead allies too, Overcooked and Hanabi the same reward to
    both agents).

    Terminated / truncated: bool ``(n,)``. JaxMARL has no truncation flag; it reports
    ``dones[agent]`` and ``dones["__all__"]`` (the episode is over). An agent whose
    ``dones[agent]`` is True before the episode ends (SMAX: dead) is terminated from then on.
    When the episode ends the other agents are truncated if the family's rule says the time
    limit ended it, else terminated: SMAX truncates when both teams still have units alive
    (a battle won or lost, or a draw, is terminal); Overcooked (v1 and v2), MPE and CoinGame
    always truncate (they end only at their step limit); Hanabi always terminates (it has no step
    limit); MaBrax truncates where Brax's episode length ended it (``info["truncation"]``; a
    fallen body is terminal); other envs truncate when ``state.step >= env.max_steps`` where
    they have both, and terminate otherwise. ``episode_truncated`` overrides the rule.

    Info: JaxMARL's info, entries keyed by agent stacked along the agent axis (Overcooked's
    ``shaped_reward``: float32 ``(n,)``); ``action_mask`` (discrete actions), bool ``(n, A)``,
    the returned state's :meth:`action_mask`.

    Action mask (:meth:`action_mask`): JaxMARL's ``get_avail_actions`` (SMAX) or
    ``get_legal_moves`` (Hanabi), else all True, and False on padded ids.

    Global state (:meth:`global_state`, envs with ``get_world_state`` only, e.g. SMAX, and
    MaBrax): float32, JaxMARL's world state (``obs["world_state"]``); MaBrax: Brax's whole
    observation of the body. MaBrax envs must be built with ``auto_reset=False`` (by id they
    are). The attributes ``global_state`` and
    ``global_state_space`` exist only on such envs, so lamella-marl's MAPPO refuses the others.

    Render: an RGB uint8 frame from JaxMARL's own host-side renderer through
    ``jax.pure_callback`` (Overcooked: its tile renderer), or from ``render_fn``; MaBrax bodies
    are drawn in JAX by lamella's Brax adapter (its sketch of the Brax env JaxMARL wraps); other
    envs raise ``NotImplementedError``.

    Params: :class:`JaxMARLParams` (nothing traced). State: :class:`JaxMARLState`.
    """

    stochastic_step = True

    def __init__(
        self,
        jaxmarl_env: Any,
        name: str | None = None,
        *,
        noop_action: int | Sequence[int] | None = None,
        episode_truncated: TruncationRule | None = None,
        render_fn: Callable[[Any], Any] | None = None,
        flatten_observations: bool = False,
    ):
        self.jaxmarl_env = jaxmarl_env
        self._name = f"jaxmarl:{name or getattr(jaxmarl_env, 'name', type(jaxmarl_env).__name__)}"
        agents = getattr(jaxmarl_env, "agents", None)
        if not isinstance(agents, (list, tuple)) or not agents:
            raise JaxMARLError(f"{self._name}: the env has no list of agent names (`env.agents`).")
        self.agent_names: tuple[str, ...] = tuple(agents)
        n = len(self.agent_names)
        self.num_agents = n  # type: ignore[misc]
        self._single = n == 1
        self.family = _family(jaxmarl_env)
        self._flatten = bool(flatten_observations)
        if self.family == "mabrax" and getattr(jaxmarl_env, "auto_reset", False):
            raise JaxMARLError(
                f"{self._name}: built with auto_reset=True, so Brax's AutoResetWrapper resets inside the "
                "step and the observation that ended an episode is lost; build it with auto_reset=False "
                "(from_jaxmarl('ant_4x2') does): lamella's AutoReset wrapper resets and keeps it."
            )

        key = jax.random.key(0)
        obs, state = jax.eval_shape(jaxmarl_env.reset, key)
        if not isinstance(obs, Mapping) or not all(agent in obs for agent in self.agent_names):
            raise JaxMARLError(
                f"{self._name}: its reset returns {type(obs).__name__}, not a dict with one observation "
                f"per agent {list(self.agent_names)}, so it does not follow JaxMARL's MultiAgentEnv API "
                "and the adapter cannot convert it (in jaxmarl 0.2.0 the STORM envs 'storm', 'storm_2p' "
                "and 'storm_np' return batched arrays). lamella has STORM natively: "
                "lamella.envs.make('IPDInTheMatrix-v0')."
            )
        extras = sorted(set(obs) - set(self.agent_names) - {"world_state"})
        if extras:
            raise JaxMARLError(
                f"{self._name}: its observation dict has entries {extras} that are not agents; the "
                "adapter knows only SMAX's 'world_state'."
            )
        self._init_observations(obs)
        self._init_actions(noop_action)
        self._avail = self._find_mask_function(state)
        self._world_state = self._find_world_state(state)
        if self._world_state is not None:
            self.global_state = self._global_state
            self.global_state_space = self._global_state_space
        self._agent_terminal = _smax_agent_terminal if self.family == "smax" else None
        if episode_truncated is not None:
            self._truncated: TruncationRule = episode_truncated
        elif self.family in _TRUNCATION_RULES:
            self._truncated = _TRUNCATION_RULES[self.family]
        elif isinstance(getattr(jaxmarl_env, "max_steps", None), int) and hasattr(state, "step"):
            self._truncated = _time_limit
        else:
            self._truncated = _never
        self._frame_shape: tuple[int, ...] | None = None
        if render_fn is None and self.family == "overcooked" and hasattr(jaxmarl_env, "agent_view_size"):
            render_fn = lambda state: _overcooked_frame(jaxmarl_env, state)  # noqa: E731
            # Known without an example frame (whose eager reset compiles hundreds of small ops).
            self._frame_shape = _overcooked_frame_shape(jaxmarl_env)
        self._render_fn = render_fn
        # MaBrax: lamella's Brax sketch of the body, computed in JAX (built at the first render).
        self._draw_body: Callable[[Any], jax.Array] | None = None
        max_steps = getattr(jaxmarl_env, "episode_length" if self.family == "mabrax" else "max_steps", None)
        self._params = JaxMARLParams(max_steps_in_episode=max_steps if isinstance(max_steps, int) else None)

    # Static description ----------------------------------------------------------------------

    def _init_observations(self, obs: Mapping[str, Any]) -> None:
        shapes = [tuple(obs[agent].shape) for agent in self.agent_names]
        dtype = jnp.result_type(*[obs[agent].dtype for agent in self.agent_names])
        self._obs_dtype = dtype
        self._padded_obs = len(set(shapes)) > 1 or (self._flatten and len(shapes[0]) != 1)
        self.observation_sizes = tuple(int(np.prod(shape)) for shape in shapes)
        per_agent_bounds = [
            _bounds(self.jaxmarl_env.observation_space(agent), shape, dtype)
            for agent, shape in zip(self.agent_names, shapes)
        ]
        if self._padded_obs:
            size = max(self.observation_sizes)
            self._obs_shape: tuple[int, ...] = (size,)
            low, high = np.zeros((len(shapes), size)), np.zeros((len(shapes), size))
            for i, (lo, hi) in enumerate(per_agent_bounds):
                low[i, : lo.size], high[i, : hi.size] = lo.ravel(), hi.ravel()
        else:
            self._obs_shape = shapes[0]
            low = np.stack([lo for lo, _ in per_agent_bounds])
            high = np.stack([hi for _, hi in per_agent_bounds])
        self.observation_mask = (
            np.arange(int(np.prod(self._obs_shape)))[None, :] < np.asarray(self.observation_sizes)[:, None]
        )
        self._obs_low: np.ndarray = low[0] if self._single else low
        self._obs_high: np.ndarray = high[0] if self._single else high

    def _init_actions(self, noop_action: int | Sequence[int] | None) -> None:
        agent_spaces = [self.jaxmarl_env.action_space(agent) for agent in self.agent_names]
        discrete = [hasattr(s, "n") and tuple(getattr(s, "shape", ())) == () for s in agent_spaces]
        boxes = [hasattr(s, "low") and hasattr(s, "high") and not d for s, d in zip(agent_spaces, discrete)]
        self._agent_action_dtypes = tuple(jnp.dtype(getattr(s, "dtype", jnp.int32)) for s in agent_spaces)
        if all(discrete):
            self.continuous_actions = False
            self.num_actions_per_agent = tuple(int(s.n) for s in agent_spaces)
            self.num_actions = max(self.num_actions_per_agent)
            if noop_action is None:
                default = _noop_actions(self.jaxmarl_env, self.family)
                noops = [0 if default is None else default] * len(agent_spaces)
            elif isinstance(noop_action, (int, np.integer)):
                noops = [int(noop_action)] * len(agent_spaces)
            else:
                noops = [int(a) for a in noop_action]
            if len(noops) != len(agent_spaces) or any(
                not 0 <= a < k for a, k in zip(noops, self.num_actions_per_agent)
            ):
                raise JaxMARLError(
                    f"{self._name}: noop_action={noop_action!r} must be one action id (or one per agent) "
                    f"valid for every agent; the agents have {list(self.num_actions_per_agent)} actions."
                )
            self.noop_actions = tuple(noops)
        elif all(boxes):
            self.continuous_actions = True
            self.action_sizes = tuple(int(np.prod(s.shape)) for s in agent_spaces)
            size = max(self.action_sizes)
            low, high = np.zeros((len(agent_spaces), size)), np.zeros((len(agent_spaces), size))
            for i, s in enumerate(agent_spaces):
                lo, hi = _bounds(s, tuple(s.shape), jnp.float32)
                low[i, : lo.size], high[i, : hi.size] = lo.ravel(), hi.ravel()
            self._act_low: np.ndarray = low[0] if self._single else low
            self._act_high: np.ndarray = high[0] if self._single else high
        else:
            kinds = sorted({type(s).__name__ for s in agent_spaces})
            raise JaxMARLError(
                f"{self._name}: the adapter converts agents that all have Discrete or all have Box action "
                f"spaces; this env's are {kinds}."
            )

    def _find_mask_function(self, state: Any) -> Callable[[Any], Mapping[str, Any]] | None:
        if self.continuous_actions:
            return None
        for method in ("get_avail_actions", "get_legal_moves"):
            function = getattr(self.jaxmarl_env, method, None)
            if function is None:
                continue
            try:
                jax.eval_shape(function, state)
            except NotImplementedError:
                continue
            return function  # type: ignore[no-any-return]
        return None

    def _find_world_state(self, state: Any) -> Callable[[Any], jax.Array] | None:
        if self.family == "mabrax":
            # The whole body's observation (every agent's part and the rest), Brax's own vector.
            self._world_state_shape = tuple(state.obs.shape)
            return lambda brax_state: brax_state.obs
        function = getattr(self.jaxmarl_env, "get_world_state", None)
        if function is None:
            return None
        try:
            shape = jax.eval_shape(function, state)
        except NotImplementedError:
            return None
        self._world_state_shape = tuple(shape.shape)
        return function  # type: ignore[no-any-return]

    # lamella API -----------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def default_params(self) -> JaxMARLParams:
        return self._params

    def _agents(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return shape if self._single else (self.num_agents, *shape)

    def observation_space(self, params: JaxMARLParams | None = None) -> spaces.Box:
        return spaces.Box(self._obs_low, self._obs_high, self._agents(self._obs_shape), self._obs_dtype)

    def action_space(self, params: JaxMARLParams | None = None) -> spaces.Space:
        if self.continuous_actions:
            return spaces.Box(self._act_low, self._act_high, self._agents((max(self.action_sizes),)))
        if self._single:
            return spaces.Discrete(self.num_actions)
        return spaces.MultiDiscrete([self.num_actions] * self.num_agents)

    def _stack_obs(self, obs: Mapping[str, Any]) -> jax.Array:
        rows = [jnp.asarray(obs[agent], self._obs_dtype) for agent in self.agent_names]
        if self._padded_obs:
            size = self._obs_shape[0]
            rows = [jnp.pad(row.reshape(-1), (0, size - row.size)) for row in rows]
        return rows[0] if self._single else jnp.stack(rows)

    def _stack(self, values: Mapping[str, Any], dtype: Any) -> jax.Array:
        stacked = jnp.stack([jnp.asarray(values[agent], dtype) for agent in self.agent_names])
        return stacked[0] if self._single else stacked

    def _joint_action(self, action: Any) -> dict[str, jax.Array]:
        action = jnp.asarray(action)
        rows = action[None] if self._single else action
        if self.continuous_actions:
            return {
                agent: rows[i, :size].reshape(self.jaxmarl_env.action_space(agent).shape).astype(dtype)
                for i, (agent, size, dtype) in enumerate(
                    zip(self.agent_names, self.action_sizes, self._agent_action_dtypes)
                )
            }
        counts = jnp.asarray(self.num_actions_per_agent)
        rows = jnp.where((rows >= 0) & (rows < counts), rows, jnp.asarray(self.noop_actions))
        return {
            agent: rows[i].astype(dtype)
            for i, (agent, dtype) in enumerate(zip(self.agent_names, self._agent_action_dtypes))
        }

    def _info(self, info: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in info.items():
            if isinstance(value, Mapping) and all(agent in value for agent in self.agent_names):
                out[name] = self._stack(value, jnp.result_type(*[value[a] for a in self.agent_names]))
            else:
                out[name] = value
        return out

    def reset_env(self, key: PRNGKey, params: JaxMARLParams) -> tuple[jax.Array, JaxMARLState]:
        obs, env_state = self.jaxmarl_env.reset(key)
        env_state = _strong(env_state)
        agent_done = jnp.zeros((self.num_agents,), jnp.bool_)
        return self._stack_obs(obs), JaxMARLState(env_state=env_state, agent_done=agent_done)

    def step_env(self, key: PRNGKey, state: JaxMARLState, action: Any, params: JaxMARLParams) -> StepOutput:
        obs, env_state, reward, dones, info = self.jaxmarl_env.step_env(
            key, state.env_state, self._joint_action(action)
        )
        env_state = _strong(env_state)
        episode_over = jnp.asarray(dones["__all__"], jnp.bool_)
        agent_dones = jnp.stack([jnp.asarray(dones[agent], jnp.bool_) for agent in self.agent_names])
        if self._agent_terminal is not None:
            early = self._agent_terminal(self.jaxmarl_env, env_state, self.num_agents)
        else:
            early = state.agent_done | (agent_dones & ~episode_over)
        truncated_episode = episode_over & jnp.asarray(
            self._truncated(self.jaxmarl_env, env_state), jnp.bool_
        )
        terminated = early | (episode_over & ~truncated_episode)
        truncated = truncated_episode & ~early
        info = self._info(info)
        new_state = JaxMARLState(env_state=env_state, agent_done=early)
        if not self.continuous_actions:
            info["action_mask"] = self.action_mask(new_state, params)
        if self._single:
            terminated, truncated = terminated[0], truncated[0]
        return (
            self._stack_obs(obs),
            new_state,
            self._stack(reward, jnp.float32),
            terminated,
            truncated,
            info,
        )

    def action_mask(self, state: JaxMARLState, params: JaxMARLParams | None = None) -> jax.Array:
        """Legal actions, bool ``(n, A)`` (discrete actions): JaxMARL's available actions (all True
        where the env has none), False on padded ids."""
        if self.continuous_actions:
            raise AttributeError(f"{self.name} has continuous actions and no action mask.")
        padding = np.arange(self.num_actions)[None, :] < np.asarray(self.num_actions_per_agent)[:, None]
        if self._avail is None:
            mask = jnp.asarray(padding)
        else:
            avail = self._avail(state.env_state)
            rows = [
                jnp.pad(jnp.asarray(avail[agent], jnp.bool_), (0, self.num_actions - count))
                for agent, count in zip(self.agent_names, self.num_actions_per_agent)
            ]
            mask = jnp.stack(rows) & padding
        return mask[0] if self._single else mask

    def _global_state(self, state: JaxMARLState, params: JaxMARLParams | None = None) -> jax.Array:
        """JaxMARL's world state (``get_world_state``), float32."""
        assert self._world_state is not None
        return jnp.asarray(self._world_state(state.env_state), jnp.float32)

    def _global_state_space(self, params: JaxMARLParams | None = None) -> spaces.Box:
        return spaces.Box(-np.inf, np.inf, self._world_state_shape, jnp.float32)

    def render(self, state: JaxMARLState, params: JaxMARLParams | None = None) -> jax.Array:
        """An RGB uint8 ``(H, W, 3)`` frame from the host-side renderer, or for MaBrax from
        lamella's Brax adapter (see the class docs)."""
        if self._render_fn is None and self.family == "mabrax":
            if self._draw_body is None:
                self._draw_body = _mabrax_drawer(self.jaxmarl_env)
            return self._draw_body(state.env_state)
        if self._render_fn is None:
            raise NotImplementedError(
                f"{self.name}: JaxMARL has no image renderer the adapter knows for this env; pass "
                "render_fn=(jaxmarl_state -> uint8 (H, W, 3) array) to from_jaxmarl."
            )
        render_fn = self._render_fn
        if self._frame_shape is None:
            with jax.ensure_compile_time_eval():
                _, example = self.jaxmarl_env.reset(jax.random.key(0))
                self._frame_shape = tuple(np.shape(render_fn(jax.device_get(example))))
        shape = jax.ShapeDtypeStruct(self._frame_shape, jnp.uint8)

        def host(env_state: Any) -> np.ndarray:
            return np.asarray(render_fn(env_state), np.uint8)

        return jax.pure_callback(host, shape, state.env_state, vmap_method="sequential")


def _mabrax_drawer(jaxmarl_env: Any) -> Callable[[Any], jax.Array]:
    """``brax_state -> uint8 (120, 160, 3)``: the body of a MaBrax env as
    :class:`lamella.envs.adapters.brax.BraxEnv` draws it (in JAX), from the Brax env JaxMARL
    wraps (its ``env``; a MaBrax state is that env's ``brax.envs.State``)."""
    from lamella.envs.adapters.brax import BraxEnv, BraxState

    brax_env = jaxmarl_env.env
    # The Brax env's name (``ant``, ``halfcheetah``, ``walker2d``, ...) picks the view.
    body = BraxEnv(brax_env, type(brax_env.unwrapped).__name__.lower(), str(brax_env.backend))
    return lambda brax_state: body.render(BraxState(brax_state=brax_state, time=jnp.zeros((), jnp.int32)))


# Entry point ---------------------------------------------------------------------------------


def _resolve_kwargs(jaxmarl: Any, env_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Names that JaxMARL takes only as objects, given as strings: SMAX ``scenario="3m"`` and
    Overcooked ``layout="cramped_room"`` (OvercookedV2 takes names itself)."""
    kwargs = dict(kwargs)
    if "SMAX" in env_id and isinstance(kwargs.get("scenario"), str):
        from jaxmarl.environments.smax.smax_env import MAP_NAME_TO_SCENARIO, map_name_to_scenario

        name = kwargs["scenario"]
        if name not in MAP_NAME_TO_SCENARIO:
            raise JaxMARLError(
                f"Unknown SMAX scenario {name!r}{_did_you_mean(name, MAP_NAME_TO_SCENARIO)}; "
                f"JaxMARL's scenarios: {', '.join(sorted(MAP_NAME_TO_SCENARIO))}."
            )
        kwargs["scenario"] = map_name_to_scenario(name)
    if env_id == "overcooked" and isinstance(kwargs.get("layout"), str):
        from jaxmarl.environments.overcooked.layouts import overcooked_layouts  # FrozenDicts

        name = kwargs["layout"]
        if name not in overcooked_layouts:
            raise JaxMARLError(
                f"Unknown overcooked layout {name!r}{_did_you_mean(name, overcooked_layouts)}; JaxMARL's "
                f"layouts: {', '.join(sorted(overcooked_layouts))}."
            )
        kwargs["layout"] = overcooked_layouts[name]
    return kwargs


def _kwargs_read(node: ast.AST) -> tuple[ast.AST, str] | None:
    """``(mapping, "rad")`` for ``"rad" in mapping``, ``mapping["rad"]`` or ``mapping.get("rad")``."""
    mapping: ast.AST | None = None
    name: ast.AST | None = None
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
        mapping, name = node.comparators[0], node.left
    elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        mapping, name = node.value, node.slice
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
    ):
        mapping, name = node.func.value, node.args[0]
    if mapping is None or not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
        return None
    return mapping, name.value


def _init_keywords(init: Any) -> tuple[set[str], set[str] | None] | None:
    """What one ``__init__`` reads: ``(keywords, passed_on)``. ``keywords``: its named
    parameters and the keys it reads from its ``**kwargs`` (``"rad" in kwargs``,
    ``kwargs["rad"]``, ``kwargs.get("rad")``); ``passed_on``: None where it has no ``**kwargs``
    or does not hand them to ``super().__init__``, else the keywords that call sets itself
    (the class above must not take those from the user). None where its source cannot be read
    or its ``**kwargs`` are used any other way (stored, handed to another callable)."""
    parameters = list(inspect.signature(init).parameters.values())[1:]  # self
    names = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    var = next((p.name for p in parameters if p.kind == p.VAR_KEYWORD), None)
    if var is None:
        return names, None
    tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
    is_var = lambda node: isinstance(node, ast.Name) and node.id == var  # noqa: E731
    reads: set[str] = set()
    passed_on: set[str] | None = None
    understood: set[int] = set()  # the uses of the **kwargs name accounted for
    for node in ast.walk(tree):
        read = _kwargs_read(node)
        if read is not None and is_var(read[0]):
            reads.add(read[1])
            understood.add(id(read[0]))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "__init__"
            and isinstance(node.func.value, ast.Call)
            and getattr(node.func.value.func, "id", None) == "super"
        ):
            spread = [k.value for k in node.keywords if k.arg is None and is_var(k.value)]
            if spread:
                passed_on = {k.arg for k in node.keywords if k.arg is not None}
                understood.update(map(id, spread))
    if any(is_var(node) and id(node) not in understood for node in ast.walk(tree)):
        return None
    return names | reads, passed_on


def _constructor_keywords(cls: type) -> set[str] | None:
    """The keywords ``cls(...)`` reads, walking up the MRO while an ``__init__`` hands its
    ``**kwargs`` to ``super().__init__``; None where that cannot be told for sure (see
    :func:`_init_keywords`), so nothing is refused there."""
    keywords: set[str] = set()
    set_below: set[str] = set()  # keywords a subclass passes up itself
    try:
        for klass in cls.__mro__:
            init = klass.__dict__.get("__init__")
            if init is None:
                continue
            if klass is object:
                return keywords
            found = _init_keywords(init)
            if found is None:
                return None
            names, passed_on = found
            keywords |= names - set_below
            if passed_on is None:
                return keywords
            set_below |= passed_on
    except (OSError, TypeError, ValueError, SyntaxError):  # no source or signature to read
        return None
    return keywords


def _check_keywords(env_id: str, jaxmarl_env: Any, kwargs: Mapping[str, Any]) -> None:
    """Refuse keywords the JaxMARL env's class does not read: its MPE envs take ``**kwargs`` and
    drop what they do not know (``local_ratoi=0.5`` did nothing). Envs without ``**kwargs``
    refuse the keyword while being built (:func:`_raise_setting_error`); envs whose
    ``**kwargs`` go elsewhere (SMAX's wrappers build a SMAX with them, MaBrax hands them to
    brax) are not checked here: the class they reach refuses it the same way."""
    keywords = _constructor_keywords(type(jaxmarl_env))
    unknown = sorted(set(kwargs) - keywords) if keywords is not None else []
    if unknown:
        hint = _did_you_mean(unknown[0], keywords) if len(unknown) == 1 else ""
        raise JaxMARLError(
            f"jaxmarl:{env_id}: unknown setting(s) {', '.join(map(repr, unknown))}{hint}; JaxMARL's "
            f"{type(jaxmarl_env).__name__} would ignore {'it' if len(unknown) == 1 else 'them'}, silently. "
            f"Its settings: {', '.join(sorted(keywords or ()))}."
        )


_UNEXPECTED_KEYWORD = re.compile(r"^([\w.]+)\.__init__\(\) got an unexpected keyword argument '([^']+)'")
_MISSING_ARGUMENTS = re.compile(
    r"^([\w.]+)\.__init__\(\) missing \d+ required (?:positional |keyword-only )?arguments?: (.+)$"
)


def _raise_setting_error(env_id: str, error: TypeError, kwargs: Mapping[str, Any]) -> None:
    """Re-raise ``error``, raised by ``jaxmarl.make(env_id, **kwargs)``, as a
    :class:`JaxMARLError` where the class ``jaxmarl.make`` builds misses a setting without a default
    (``LearnedPolicyEnemySMAX``'s ``policy`` and ``params``), or where a constructor refuses one of
    ``kwargs`` (the envs without ``**kwargs`` or whose ``**kwargs`` end up in another constructor:
    SMAX, Hanabi, Overcooked, CoinGame, MaBrax's brax env, ...); return for any other TypeError.
    The class's settings are listed where it is the one ``jaxmarl.make`` builds and its keywords
    can be read."""
    traceback = error.__traceback__
    while traceback is not None and traceback.tb_next is not None:
        traceback = traceback.tb_next
    caller = traceback.tb_frame.f_globals if traceback is not None else {}
    built_by_make = caller.get("__name__") == "jaxmarl.registration"  # not a class further in
    missing = _MISSING_ARGUMENTS.match(str(error))
    if missing is not None and built_by_make:
        class_name, names = missing.group(1), re.findall(r"'([^']+)'", missing.group(2))
        settings, one = ", ".join(f"{name}=..." for name in names), len(names) == 1
        raise JaxMARLError(
            f"jaxmarl:{env_id}: JaxMARL's {class_name} needs the setting{'' if one else 's'} "
            f"{', '.join(map(repr, names))}, which {'has' if one else 'have'} no default. Pass "
            f'{"it" if one else "them"} as keywords: lamella.envs.make("jaxmarl:{env_id}", {settings}) '
            f'or from_jaxmarl("{env_id}", {settings}).'
        ) from error
    match = _UNEXPECTED_KEYWORD.match(str(error))
    if match is None or match.group(2) not in kwargs:
        return
    class_name, keyword = match.groups()
    keywords = None
    if built_by_make:  # the class jaxmarl.make builds refused it
        # Found by its name in the message: jaxmarl.registration imports some under other names.
        classes = [v for v in caller.values() if isinstance(v, type) and v.__qualname__ == class_name]
        keywords = _constructor_keywords(classes[0]) if len(classes) == 1 else None
    if keywords is None:  # refused further in: a class the env builds with its settings
        raise JaxMARLError(
            f"jaxmarl:{env_id}: unknown setting {keyword!r}; JaxMARL refused it ({error}). Fix the "
            f"spelling or drop it: jaxmarl:{env_id}'s settings are the keyword arguments of its "
            "JaxMARL class and of the classes it hands them on to."
        ) from error
    unknown = sorted(set(kwargs) - keywords) or [keyword]
    one = len(unknown) == 1
    hint = _did_you_mean(keyword, keywords) if one else ""
    raise JaxMARLError(
        f"jaxmarl:{env_id}: unknown setting{'' if one else 's'} {', '.join(map(repr, unknown))}{hint}; "
        f"JaxMARL's {class_name} does not take {'it' if one else 'them'}. Fix the spelling or drop "
        f"{'it' if one else 'them'}; its settings: {', '.join(sorted(keywords))}."
    ) from error


def _did_you_mean(name: str, choices: Any) -> str:
    close = difflib.get_close_matches(name, list(choices), n=3)
    return f" (did you mean {', '.join(map(repr, close))}?)" if close else ""


def from_jaxmarl(
    env_or_name: Any,
    *,
    noop_action: int | Sequence[int] | None = None,
    episode_truncated: TruncationRule | None = None,
    render_fn: Callable[[Any], Any] | None = None,
    flatten_observations: bool = False,
    **kwargs: Any,
) -> JaxMARLEnv:
    """A JaxMARL env as a lamella multi-agent :class:`~lamella.envs.Environment`.

    Args:
        env_or_name: a JaxMARL env id (``"HeuristicEnemySMAX"``, ``"SMAX"``, ``"overcooked"``,
            ``"hanabi"``, ``"MPE_simple_spread_v3"``, ...: ``jaxmarl.registered_envs``), built with
            ``jaxmarl.make(env_or_name, **kwargs)``, or a JaxMARL env object.
        noop_action: the action id that replaces padded and negative ids (one, or one per agent);
            default: the family's no-op (see :class:`JaxMARLEnv`).
        episode_truncated: ``(jaxmarl_env, jaxmarl_state) -> bool``, whether an episode JaxMARL
            reports over ended by the time limit; default: the family's rule.
        render_fn: ``jaxmarl_state -> uint8 (H, W, 3)`` host-side renderer (NumPy in, NumPy out).
        flatten_observations: flatten each agent's observation to one axis (``(n, O)``), as the
            MLP networks of lamella's runners expect (Overcooked's ``(n, H, W, 26)`` grids).
        **kwargs: the JaxMARL env's own settings (only with an id). SMAX's ``scenario`` and
            Overcooked's ``layout`` may be given by name (``scenario="3m"``,
            ``layout="cramped_room"``).

    Raises:
        ImportError: jaxmarl is not installed (``pip install 'lamella-envs[jaxmarl]'``).
        JaxMARLError: an unknown id, scenario or layout, a setting the env does not take, ``kwargs``
            with an env object, an env whose API the adapter cannot convert, or a bad ``noop_action``.
    """
    jaxmarl = _import_jaxmarl()
    if isinstance(env_or_name, str):
        registered = list(getattr(jaxmarl, "registered_envs", []))
        if env_or_name not in registered:
            raise JaxMARLError(
                f"Unknown JaxMARL env {env_or_name!r}{_did_you_mean(env_or_name, registered)}; "
                "the ids are jaxmarl.registered_envs."
            )
        if "max_steps_in_episode" in kwargs:
            # JaxMARL's envs take **kwargs and most drop what they do not know.
            limit = kwargs["max_steps_in_episode"]
            raise JaxMARLError(
                f"jaxmarl:{env_or_name}: max_steps_in_episode is lamella's name for the step limit, "
                "read from the JaxMARL env (JaxMARLParams); JaxMARL would ignore it, silently. Set the "
                f"JaxMARL env's own setting: max_steps={limit!r} (MaBrax: episode_length={limit!r})."
            )
        if env_or_name in MABRAX_IDS:
            kwargs = {"auto_reset": False, **kwargs}  # lamella's AutoReset keeps the final observation
        try:
            with without_import_notices():  # a MaBrax env imports brax (and mujoco) here
                env = jaxmarl.make(env_or_name, **_resolve_kwargs(jaxmarl, env_or_name, kwargs))
        except TypeError as error:
            _raise_setting_error(env_or_name, error, kwargs)
            raise
        _check_keywords(env_or_name, env, kwargs)
        name = env_or_name
    else:
        if kwargs:
            raise JaxMARLError(
                f"from_jaxmarl: settings {sorted(kwargs)} are for building an env by id; "
                "this is an env object already (build it with them, or pass its id)."
            )
        env, name = env_or_name, None
    return JaxMARLEnv(
        env,
        name,
        noop_action=noop_action,
        episode_truncated=episode_truncated,
        render_fn=render_fn,
        flatten_observations=flatten_observations,
    )


#: The id prefix of JaxMARL envs in ``lamella.envs.make`` and the commands (``jaxmarl:<id>``).
PREFIX = "jaxmarl:"


def make_from_id(
    env_id: str,
    *,
    noop_action: int | Sequence[int] | None = None,
    flatten_observations: bool = False,
    **settings: Any,
) -> JaxMARLEnv:
    """:func:`from_jaxmarl` for an id ``jaxmarl:<id>`` (``<id>`` one of ``jaxmarl.registered_envs``):
    what ``lamella.envs.make("jaxmarl:...", **settings)`` calls, and so what ``lamella train ippo
    --env jaxmarl:MPE_simple_spread_v3`` builds. ``settings`` are the JaxMARL env's own
    (``scenario="3m"``, MaBrax's ``backend="spring"``; a config's ``env_kwargs``).

    Raises:
        JaxMARLError: ``env_id`` does not start with ``jaxmarl:``, or as :func:`from_jaxmarl`.
    """
    name = env_id[len(PREFIX) :] if env_id.startswith(PREFIX) else ""
    if not name:
        raise JaxMARLError(
            f"{env_id!r} is not a JaxMARL id; write jaxmarl:<id> with an id of jaxmarl.registered_envs "
            "(jaxmarl:MPE_simple_spread_v3)."
        )
    return from_jaxmarl(name, noop_action=noop_action, flatten_observations=flatten_observations, **settings)
