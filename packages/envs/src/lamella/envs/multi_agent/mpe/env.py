"""The multi-agent particle environments of ``mpe2==1.1.1`` as one lamella env class."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import spaces
from lamella.envs._inputs import check_one_state, integer_setting
from lamella.envs.environment import Environment, StepOutput
from lamella.envs.multi_agent.mpe import core
from lamella.envs.multi_agent.mpe import render as mpe_render
from lamella.envs.multi_agent.mpe.scenarios import SCENARIOS
from lamella.envs.multi_agent.mpe.types import (
    MultiParticleCurriculumParams,
    MultiParticleParams,
    MultiParticleSharedParams,
    MultiParticleState,
)

__all__ = ["MultiParticleEnv"]


#: The scenarios whose agents oppose each other (adversaries, eavesdroppers, predators and prey).
COMPETITIVE_SCENARIOS = frozenset(
    {"simple_adversary", "simple_crypto", "simple_push", "simple_tag", "simple_world_comm"}
)


class MultiParticleEnv(Environment[MultiParticleState, MultiParticleParams]):
    """A multi-agent particle world (MPE) scenario with the physics and rules of ``mpe2==1.1.1``.

    Checked step by step against mpe2's parallel envs by state injection (``tests/test_mpe.py``).
    ``n`` agents in mpe2's order (``env.agent_names``); what each agent is, its observation and
    action sizes are listed per scenario in the package README and in ``env.agent_roles``.

    Agents: ``n`` (leading agent axis on everything below). ``simple`` has one agent and, like
    every single-agent lamella env, no agent axis.

    Action, discrete (default): int32 ``(n,)``, ``MultiDiscrete([A] * n)`` with ``A`` the largest
    per-agent count (``env.num_actions_per_agent``). An agent that moves has moves 0 no_action,
    1 left (-x), 2 right (+x), 3 down (-y), 4 up (+y); one that also talks takes ``move + 5 *
    word``; one that only talks takes ``word``. In scenarios with different counts
    (speaker_listener, world_comm) ids ``>= num_actions_per_agent[i]`` are padding: False in
    ``info["action_mask"]`` / :meth:`action_mask`, and like any out-of-range action they act
    as action 0 (no move; word 0 for an agent that talks). mpe2 asserts on such actions.

    Action, continuous (``continuous_actions=True``): float32 ``(n, D)``, ``Box(0, 1)``, ``D``
    the largest per-agent size (``env.action_sizes``). An agent that moves reads entries 0..4
    (force ``(a2 - a1, a4 - a3)``, entry 0 unused, as mpe2) and, if it talks, the next
    ``dim_c`` as its utterance; one that only talks reads entries ``0..dim_c - 1``; the rest
    is padding and ignored. Entries are clipped to [0, 1] (mpe2's ``ClipOutOfBoundsWrapper``).

    Observation: float32 ``(n, O)``, ``O`` the largest per-agent size (``env.observation_sizes``):
    agent ``i``'s mpe2 observation, then zeros.

    Reward: float32 ``(n,)``, each agent's mpe2 reward; in simple_spread and simple_reference
    ``global * (1 - local_ratio) + local * local_ratio``.

    Terminated: bool ``(n,)``, always False (no scenario ends early by default in mpe2).
    Truncated: bool ``(n,)``, all True once ``time >= max_cycles`` (25): an episode is 25
    steps, as mpe2's (JaxMARL's runs 26).

    Info: ``action_mask`` (discrete actions in scenarios with padded action ids only), bool
    ``(n, A)``, the same every step. With ``benchmark_data=True``: ``benchmark_data``, mpe2's
    per-agent benchmark data after the step as a dict of arrays with an agent axis (the scenario's
    ``benchmark``; empty for the scenarios where mpe2's is empty).

    Global state (:meth:`global_state`): float32 ``(sum of observation_sizes,)``, every agent's
    unpadded observation concatenated in agent order: mpe2's ``state()``.

    State: :class:`~lamella.envs.multi_agent.mpe.MultiParticleState`. Params:
    :class:`~lamella.envs.multi_agent.mpe.MultiParticleParams` (``max_cycles`` and the physics
    constants), :class:`~lamella.envs.multi_agent.mpe.MultiParticleSharedParams` (adds
    ``local_ratio``) for simple_spread and simple_reference,
    :class:`~lamella.envs.multi_agent.mpe.MultiParticleCurriculumParams` (adds
    ``curriculum_stage``) for simple_spread with ``curriculum=True``.

    Reset (mpe2's distribution, lamella's random numbers): agents uniform in ``[-1, 1]^2`` at
    rest and silent, landmarks uniform in ``[-1, 1]^2`` (``[-0.9, 0.9]^2`` for the obstacles of
    simple_tag and every landmark of simple_world_comm), goal indices uniform. The step is
    deterministic (mpe2's scenarios set no motor or comm noise), but in collect_treasure, whose
    treasures respawn at random places (drawn from the step's key).

    Args:
        scenario: an mpe2 scenario name (``"simple_spread"``, ...: :data:`SCENARIOS`).
        continuous_actions: continuous instead of discrete actions (mpe2's keyword).
        max_cycles, local_ratio: defaults of the params (mpe2's keywords; ``local_ratio`` only
            for simple_spread and simple_reference).
        benchmark_data: add ``info["benchmark_data"]`` (mpe2's keyword).
        **scenario_kwargs: the scenario's own sizes, mpe2's keywords (``N`` for simple_spread and
            simple_adversary; ``num_good``, ``num_adversaries``, ``num_obstacles`` for
            simple_tag, and ``num_food``, ``num_forests`` for simple_world_comm;
            ``num_collectors``, ``num_deposits``, ``num_treasures`` for collect_treasure) and
            options (``terminate_on_success``, ``curriculum``, ``num_agent_neighbors``, ...).
    """

    stochastic_step = False
    sparse_reset = True  # episodes of a fixed length: a batch ends together, every 25 steps
    # A reset is a few kernels (random positions): on a GPU the branch costs more than it saves
    # (IPPO on an H200: 1.19x faster with 1024 envs, 1.37x with 16, resetting every step).
    sparse_reset_on_accelerators = False

    def __init__(
        self,
        scenario: str,
        continuous_actions: bool = False,
        max_cycles: int = 25,
        local_ratio: float | None = None,
        benchmark_data: bool = False,
        **scenario_kwargs: Any,
    ):
        if scenario not in SCENARIOS:
            raise ValueError(
                f"MultiParticleEnv: unknown scenario {scenario!r}; choose one of {sorted(SCENARIOS)}."
            )
        make_scenario = SCENARIOS[scenario]
        _check_sizes(scenario, make_scenario, scenario_kwargs)
        self.scenario = make_scenario(**scenario_kwargs)
        scn = self.scenario
        self.num_agents = scn.num_agents  # type: ignore[misc]
        # Scenarios with adversaries have two opposing sides, so no team reward (multi-agent contract).
        self.cooperative = scenario not in COMPETITIVE_SCENARIOS
        self.agent_names = scn.agent_names
        self.agent_roles = scn.agent_roles
        for name, flag in (("continuous_actions", continuous_actions), ("benchmark_data", benchmark_data)):
            if not isinstance(flag, (bool, np.bool_)):  # "no" is truthy
                raise ValueError(f"MultiParticleEnv: {name} must be True or False, got {flag!r}.")
        self.continuous_actions = bool(continuous_actions)
        self.benchmark_data = bool(benchmark_data)
        if local_ratio is not None and scn.global_reward is None:
            raise ValueError(
                f"MultiParticleEnv: {scenario} has no shared reward, so it takes no local_ratio "
                "(mpe2's simple_spread and simple_reference do)."
            )
        if local_ratio is not None and not 0.0 <= float(local_ratio) <= 1.0:
            raise ValueError(f"MultiParticleEnv: local_ratio must be in [0, 1], got {local_ratio!r}.")
        integer_setting(max_cycles, "max_cycles", "MultiParticleEnv", minimum=1)
        self._defaults = (int(max_cycles), 0.5 if local_ratio is None else float(local_ratio))
        self.num_actions_per_agent = tuple(scn.discrete_actions(i) for i in range(scn.num_agents))
        self.action_sizes = tuple(scn.continuous_size(i) for i in range(scn.num_agents))
        self.num_actions = max(self.num_actions_per_agent)
        self.action_size = max(self.action_sizes)
        example = self._initial_state(
            jnp.zeros((scn.num_agents + scn.num_landmarks, 2)),
            jnp.zeros(len(scn.goal_choices), jnp.int32),
            jnp.zeros((scn.item_draws,), jnp.float32),
        )
        groups = jax.eval_shape(scn.observe, example)
        self.observation_sizes = tuple(size for group in groups for size in [group.shape[1]] * group.shape[0])
        assert len(self.observation_sizes) == scn.num_agents, (scn.name, self.observation_sizes)
        self.observation_size = max(self.observation_sizes)
        self._padded_actions = not self.continuous_actions and len(set(self.num_actions_per_agent)) > 1
        self._single = scn.num_agents == 1
        # collect_treasure's respawns draw from the step's key; every other scenario ignores it.
        self.stochastic_step = scn.post_step is not None  # type: ignore[misc]

    @property
    def name(self) -> str:
        return f"MPE-{self.scenario.name}-v{self.scenario.version}"

    @property
    def default_params(self) -> MultiParticleParams:
        max_cycles, local_ratio = self._defaults
        if self.scenario.global_reward is None:
            return MultiParticleParams(max_cycles=max_cycles)
        if self.scenario.curriculum is not None:
            return MultiParticleCurriculumParams(max_cycles=max_cycles, local_ratio=local_ratio)
        return MultiParticleSharedParams(max_cycles=max_cycles, local_ratio=local_ratio)

    # Spaces --------------------------------------------------------------------------------

    def _agents(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return shape if self._single else (self.num_agents, *shape)

    def observation_space(self, params: MultiParticleParams | None = None) -> spaces.Box:
        return spaces.Box(-np.inf, np.inf, self._agents((self.observation_size,)), jnp.float32)

    def action_space(self, params: MultiParticleParams | None = None) -> spaces.Space:
        if self.continuous_actions:
            return spaces.Box(0.0, 1.0, self._agents((self.action_size,)), jnp.float32)
        if self._single:
            return spaces.Discrete(self.num_actions)
        return spaces.MultiDiscrete([self.num_actions] * self.num_agents)

    def global_state_space(self, params: MultiParticleParams | None = None) -> spaces.Box:
        return spaces.Box(-np.inf, np.inf, (sum(self.observation_sizes),), jnp.float32)

    def action_mask(self, state: MultiParticleState, params: MultiParticleParams | None = None) -> jax.Array:
        """Each agent's own action ids, bool ``(n, A)`` (discrete actions): ids past
        ``num_actions_per_agent[i]`` are padding. The same in every state."""
        if self.continuous_actions:
            raise AttributeError(f"{self.name} with continuous actions has no action mask.")
        mask = np.arange(self.num_actions)[None, :] < np.asarray(self.num_actions_per_agent)[:, None]
        return jnp.asarray(mask[0] if self._single else mask)

    # Observations --------------------------------------------------------------------------

    def get_obs(self, state: MultiParticleState, params: MultiParticleParams | None = None) -> jax.Array:
        """Every agent's observation, zero-padded, float32 ``(n, O)`` (see the class docs)."""
        check_one_state(self, state, "get_obs")
        groups = self.scenario.observe(state)
        size = self.observation_size
        groups = [g if g.shape[1] == size else jnp.pad(g, ((0, 0), (0, size - g.shape[1]))) for g in groups]
        observed = (groups[0] if len(groups) == 1 else jnp.concatenate(groups)).astype(jnp.float32)
        return observed[0] if self._single else observed

    def observation_of(
        self, state: MultiParticleState, params: MultiParticleParams | None = None
    ) -> jax.Array:
        check_one_state(self, state, "observation_of")
        return self.get_obs(state, params)

    def global_state(self, state: MultiParticleState, params: MultiParticleParams | None = None) -> jax.Array:
        """Every agent's unpadded observation concatenated, float32 (mpe2's ``state()``).

        Raises:
            EnvInputError: a batch of states given outside ``vmap`` (concatenated, it would be
                one long vector, silently, in some scenarios).
        """
        check_one_state(self, state, "global_state")
        return jnp.concatenate([g.reshape(-1) for g in self.scenario.observe(state)]).astype(jnp.float32)

    # Reset and step ------------------------------------------------------------------------

    def _initial_state(
        self, positions: jax.Array, goal: jax.Array, item_draws: jax.Array
    ) -> MultiParticleState:
        n = self.scenario.num_agents
        reset_items = self.scenario.reset_items
        return MultiParticleState(
            agent_pos=positions[:n].astype(jnp.float32),
            agent_vel=jnp.zeros((n, 2), jnp.float32),
            landmark_pos=positions[n:].astype(jnp.float32),
            comm=jnp.zeros((n, self.scenario.dim_c), jnp.float32),
            goal=goal.astype(jnp.int32),
            time=jnp.zeros((), jnp.int32),
            items=None if reset_items is None else reset_items(item_draws).astype(jnp.int32),
        )

    def reset_env(self, key: jax.Array, params: MultiParticleParams) -> tuple[jax.Array, MultiParticleState]:
        # One compiled program even when called eagerly (op by op, a reset is dozens of tiny
        # programs); inside an outer jit or vmap the inner jit is inlined.
        return self._reset_compiled(key, params)

    @functools.partial(jax.jit, static_argnums=0)
    def _reset_compiled(
        self, key: jax.Array, params: MultiParticleParams
    ) -> tuple[jax.Array, MultiParticleState]:
        scn = self.scenario
        n, num_landmarks, num_goals = scn.num_agents, scn.num_landmarks, len(scn.goal_choices)
        boxes, goals = 2 * (n + num_landmarks), 2 * (n + num_landmarks) + num_goals
        placed = goals + scn.reset_draws
        u = fast_random.uniform(key, (placed + scn.item_draws,))
        half = np.asarray([1.0] * n + list(scn.landmark_spawn), np.float32)[:, None]
        positions = (2.0 * u[:boxes].reshape(-1, 2) - 1.0) * half
        if scn.place_landmarks is not None:
            positions = positions.at[n:].set(scn.place_landmarks(positions[n:], u[goals:placed]))
        choices = np.asarray(scn.goal_choices, np.int32)
        goal = jnp.minimum(jnp.floor(u[boxes:goals] * choices).astype(jnp.int32), choices - 1)
        state = self._initial_state(positions, goal, u[placed:])
        return self.get_obs(state), state

    def _check_action(self, action: Any) -> jax.Array:
        # Shapes and dtypes are checked by Environment.step against the action space.
        action = jnp.asarray(action)
        if self._single:
            action = action[None]
        return action

    def step_env(
        self, key: jax.Array, state: MultiParticleState, action: Any, params: MultiParticleParams
    ) -> StepOutput:
        scn = self.scenario
        action = self._check_action(action)
        if not self.continuous_actions:
            action = action.astype(jnp.int32)
            legal = (action >= 0) & (action < np.asarray(self.num_actions_per_agent))
            action = jnp.where(legal, action, 0)
        u, comm = core.decode_actions(scn, action, self.continuous_actions)
        state = core.world_step(scn, state, u, comm, params)
        if scn.post_step is not None:
            state = scn.post_step(state, key)
        reward = scn.reward(state)
        if scn.curriculum is not None:
            stages = np.asarray(scn.curriculum)
            stage = jnp.clip(params.curriculum_stage, 0, len(stages) - 1)  # type: ignore[attr-defined]
            reward = jnp.where(jnp.asarray(stages)[stage], reward, 0.0)
        if scn.global_reward is not None:
            ratio = params.local_ratio  # type: ignore[attr-defined]
            reward = scn.global_reward(state) * (1.0 - ratio) + reward * ratio
        reward = reward.astype(jnp.float32)
        n = self.num_agents
        limit = state.time >= params.max_cycles
        truncated = jnp.broadcast_to(limit, (n,))
        # As mpe2: the time limit first; the scenario's end of task only on an earlier step.
        done = jnp.zeros((), jnp.bool_) if scn.terminal is None else scn.terminal(state) & ~limit
        terminated = jnp.broadcast_to(done, (n,))
        info: dict[str, Any] = {}
        if self._padded_actions:
            info["action_mask"] = self.action_mask(state)
        if self.benchmark_data:
            info["benchmark_data"] = {} if scn.benchmark is None else scn.benchmark(state)
        obs = self.get_obs(state)
        if self._single:
            return obs, state, reward[0], terminated[0], truncated[0], info
        return obs, state, reward, terminated, truncated, info

    def render(self, state: MultiParticleState, params: MultiParticleParams | None = None) -> jax.Array:
        """The world, uint8 ``(256, 256, 3)``: see :func:`~lamella.envs.multi_agent.mpe.render.render`."""
        check_one_state(self, state, "render")
        return mpe_render.render(self.scenario, state)

    def __repr__(self) -> str:
        mode = "continuous" if self.continuous_actions else "discrete"
        return f"MultiParticleEnv({self.scenario.name!r}, {mode}, agents={self.agent_names})"


def _check_sizes(scenario: str, make_scenario: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    """Refuse unknown keywords and sizes that are not positive integers, naming the valid ones;
    the sizes in ``kwargs`` become ints."""
    import inspect

    valid = list(inspect.signature(make_scenario).parameters)
    unknown = sorted(set(kwargs) - set(valid))
    if unknown:
        raise TypeError(
            f"MultiParticleEnv: {scenario} takes no {unknown}; its size keywords are {valid or 'none'}."
        )
    minimum = {"num_obstacles": 0, "num_forests": 0}
    for name, value in kwargs.items():
        if value is None and name.endswith("_neighbors"):  # partial observability off
            continue
        if name in ("terminate_on_success", "curriculum"):
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"MultiParticleEnv: {scenario} {name} must be True or False, got {value!r}.")
            continue
        # Stored back: a whole float (N=4.0) is taken, and range() in the scenario needs an int.
        kwargs[name] = integer_setting(value, name, f"MultiParticleEnv: {scenario}", minimum.get(name, 1))
