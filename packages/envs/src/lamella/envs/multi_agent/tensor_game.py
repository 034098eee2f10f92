"""Iterated n-player tensor games (Pax's ``IteratedTensorGameNPlayer``): a social dilemma for n players.

Every player plays 0 (cooperate) or 1 (defect) each round; the reward depends on the player's
own action and on how many players defected. Payoff table layout (Pax's ``payoff_table``):
shape ``(n + 1, 2)``, ``payoff[k, a]`` = the reward of a player who played ``a`` in a round
where ``k`` players defected. ``payoff[0, 1]`` and ``payoff[n, 0]`` can never be paid (Pax's
configs fill them with +-1000).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import rendering, spaces, struct
from lamella.envs._inputs import check_one_state, integer_setting
from lamella.envs.environment import Environment, StepOutput
from lamella.envs.multi_agent.matrix_game import check_real_array

__all__ = [
    "TENSOR_GAME_PAYOFFS",
    "IteratedTensorGame",
    "IteratedTensorGameParams",
    "IteratedTensorGameState",
    "check_tensor_game_payoff",
]

# Pax's multiplayer_ipd configs: 3-player IPD (3pl_2shap_ipd.yaml) and the 2-player IPD written
# as a tensor game (lola_vs_ppo_ipd.yaml). Rows: number of defectors; columns: own action C, D.
TENSOR_GAME_PAYOFFS: dict[int, np.ndarray] = {
    2: np.array([[-1, 1000], [-3, 0], [1000, -2]], np.float32),
    3: np.array([[4, 1000], [2, 5], [0, 3], [-1000, 1]], np.float32),
}
for _payoff in TENSOR_GAME_PAYOFFS.values():
    _payoff.flags.writeable = False


def check_tensor_game_payoff(payoff: Any, num_players: int, where: str = "payoff") -> jax.Array:
    """Validate a payoff table for ``num_players`` and return it as float32 ``(n + 1, 2)``.

    Raises:
        ValueError: another shape, or a dtype that is not a real number.
    """
    shape = (num_players + 1, 2)
    expected = (
        f"expected a real-valued array of shape {shape} for {num_players} players: "
        "payoff[k, a] = the reward of a player who played a (0 cooperate, 1 defect) when k players defected"
    )
    return check_real_array(payoff, shape, where, expected)


class IteratedTensorGameState(struct.PyTreeNode):
    """State of :class:`IteratedTensorGame`.

    Attributes:
        last_actions: int32 ``(n,)``, the previous round's actions (zeros before the first).
        time: int32 ``()``, rounds played in this inner episode (0: the start state is observed).
        outer_time: int32 ``()``, inner episodes finished in this episode.
    """

    last_actions: jax.Array
    time: jax.Array
    outer_time: jax.Array


class IteratedTensorGameParams(struct.PyTreeNode):
    """Parameters of :class:`IteratedTensorGame` (traced, vmappable).

    Attributes:
        payoff: float32 ``(n + 1, 2)`` (see the module docs).
        num_inner_steps: int, rounds per inner episode.
        num_outer_steps: int, inner episodes per episode (1: every inner episode is an episode).
    """

    payoff: jax.Array
    num_inner_steps: int = struct.field(default=100, bounds=(1, None))
    num_outer_steps: int = struct.field(default=1, bounds=(1, None))


class IteratedTensorGame(Environment[IteratedTensorGameState, IteratedTensorGameParams]):
    """``n`` players play a symmetric 2-action social dilemma for ``num_inner_steps`` rounds.

    Agents: ``n`` (``num_players``, >= 2; leading agent axis on everything below).

    Action: int32 ``(n,)``, ``MultiDiscrete([2] * n)``: 0 cooperate, 1 defect. An action
    outside ``{0, 1}`` is clipped into it.

    Observation: float32 ``(n, 2**n + 1)``, one-hot of the previous round's joint action from
    each player's own seat, as Pax encodes it: player ``i`` reads the actions in the order
    ``i, i + 1, ..., n - 1, 0, ..., i - 1`` (its own first, then round the circle) as a binary
    number, most significant bit first, so index 0 is all-cooperate and ``2**n - 1``
    all-defect. Index ``2**n`` is the start state (no round played in this inner episode).

    Reward: float32 ``(n,)``, ``payoff[number of defectors, own action]``.

    Terminated: never. Truncated: bool ``(n,)``, all True when the last inner episode ends.

    Info: ``inner_episode_done`` bool ``(n,)``, every inner-episode end. Inner and outer
    episodes work as in :class:`~lamella.envs.multi_agent.CoinGame`: while more inner episodes
    follow, the env starts the next one itself (the observation returns to the start state,
    as in Pax); with ``num_outer_steps = 1`` (the default) ``truncated`` marks every inner end,
    as :class:`~lamella.envs.multi_agent.IteratedMatrixGame` does.

    Global state (:meth:`global_state`): float32 ``(2**n + 3,)``: player 0's observation, then
    ``time / num_inner_steps`` and ``outer_time / num_outer_steps``.

    Reset and step are deterministic (the keys are ignored).

    Args:
        num_players: ``n`` >= 2 (the observation has ``2**n + 1`` entries, so n <= 16).
        payoff: default payoff table ``(n + 1, 2)``; Pax's table for 2 or 3 players when
            omitted (other ``n`` must give one).
        num_inner_steps, num_outer_steps: defaults of the params (>= 1).
    """

    stochastic_step = False

    #: The agents do not form one team (multi-agent contract: a runner refuses a team reward here).
    cooperative = False

    def __init__(
        self, num_players: int = 3, payoff: Any = None, num_inner_steps: int = 100, num_outer_steps: int = 1
    ):
        self.num_agents = integer_setting(num_players, "num_players", "IteratedTensorGame", 2, 16)  # type: ignore[misc]
        if payoff is None:
            if self.num_agents not in TENSOR_GAME_PAYOFFS:
                raise ValueError(
                    f"IteratedTensorGame: no preset payoff for {self.num_agents} players (presets: "
                    f"{sorted(TENSOR_GAME_PAYOFFS)}); pass payoff= of shape ({self.num_agents + 1}, 2)."
                )
            payoff = TENSOR_GAME_PAYOFFS[self.num_agents]
        self._payoff = np.asarray(
            check_tensor_game_payoff(payoff, self.num_agents, "IteratedTensorGame(payoff=...)")
        )
        for name, value in (("num_inner_steps", num_inner_steps), ("num_outer_steps", num_outer_steps)):
            integer_setting(value, name, "IteratedTensorGame", minimum=1)
        self._lengths = (int(num_inner_steps), int(num_outer_steps))

    @property
    def default_params(self) -> IteratedTensorGameParams:
        return IteratedTensorGameParams(jnp.asarray(self._payoff), *self._lengths)

    @property
    def num_states(self) -> int:
        return 2**self.num_agents + 1

    def observation_space(self, params: IteratedTensorGameParams | None = None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (self.num_agents, self.num_states), jnp.float32)

    def action_space(self, params: IteratedTensorGameParams | None = None) -> spaces.MultiDiscrete:
        return spaces.MultiDiscrete([2] * self.num_agents)

    def global_state_space(self, params: IteratedTensorGameParams | None = None) -> spaces.Box:
        """The space of :meth:`global_state`: float32 ``(2**n + 3,)`` in ``[0, 1]``."""
        return spaces.Box(0.0, 1.0, (self.num_states + 2,), jnp.float32)

    def observation_of(
        self, state: IteratedTensorGameState, params: IteratedTensorGameParams | None = None
    ) -> jax.Array:
        """Every player's observation, float32 ``(n, 2**n + 1)``."""
        check_one_state(self, state, "observation_of")
        n = self.num_agents
        # seat[i, k] = the player read k-th by player i: (i + k) mod n.
        seats = (np.arange(n)[:, None] + np.arange(n)[None, :]) % n
        bits = 2 ** np.arange(n - 1, -1, -1)
        index = jnp.sum(state.last_actions[jnp.asarray(seats)] * jnp.asarray(bits), -1)
        index = jnp.where(state.time > 0, index, 2**n)
        return jax.nn.one_hot(index, self.num_states, dtype=jnp.float32)

    def global_state(
        self, state: IteratedTensorGameState, params: IteratedTensorGameParams | None = None
    ) -> jax.Array:
        """Player 0's observation and the two clocks, float32 ``(2**n + 3,)``."""
        check_one_state(self, state, "global_state")
        params = self.default_params if params is None else params
        clocks = jnp.stack(
            [
                state.time / jnp.asarray(params.num_inner_steps, jnp.float32),
                state.outer_time / jnp.asarray(params.num_outer_steps, jnp.float32),
            ]
        )
        return jnp.concatenate(
            [self.observation_of(state)[0], jnp.clip(clocks, 0.0, 1.0).astype(jnp.float32)]
        )

    def reset_env(
        self, key: jax.Array, params: IteratedTensorGameParams
    ) -> tuple[jax.Array, IteratedTensorGameState]:
        check_tensor_game_payoff(params.payoff, self.num_agents, "params.payoff")
        zero = jnp.zeros((), jnp.int32)
        state = IteratedTensorGameState(jnp.zeros((self.num_agents,), jnp.int32), zero, zero)
        return self.observation_of(state), state

    def step_env(
        self, key: jax.Array, state: IteratedTensorGameState, action: Any, params: IteratedTensorGameParams
    ) -> StepOutput:
        payoff = check_tensor_game_payoff(params.payoff, self.num_agents, "params.payoff")
        action = jnp.clip(jnp.asarray(action).astype(jnp.int32), 0, 1)
        defectors = jnp.sum(action)
        reward = payoff[defectors][action]
        time = state.time + 1
        inner_done = time >= params.num_inner_steps
        outer_time = state.outer_time + inner_done.astype(jnp.int32)
        episode_over = outer_time >= params.num_outer_steps
        restart = inner_done & ~episode_over
        state = IteratedTensorGameState(action, jnp.where(restart, 0, time), outer_time)
        n = self.num_agents
        info = {"inner_episode_done": jnp.broadcast_to(inner_done, (n,))}
        return (
            self.observation_of(state),
            state,
            reward.astype(jnp.float32),
            jnp.zeros((n,), jnp.bool_),
            jnp.broadcast_to(episode_over, (n,)),
            info,
        )

    def render(
        self, state: IteratedTensorGameState, params: IteratedTensorGameParams | None = None
    ) -> jax.Array:
        """The players in a circle, uint8 ``(160, 160, 3)``: green cooperated, red defected
        (grey before the first round); the bar at the bottom fills as the inner episode passes."""
        check_one_state(self, state, "render")
        params = self.default_params if params is None else params
        size, bar = 144, 16
        frame = rendering.canvas(size + bar, size, (255, 255, 255))
        started = state.time > 0
        for i in range(self.num_agents):
            angle = 2 * np.pi * i / self.num_agents - np.pi / 2
            x, y = size / 2 + 0.36 * size * np.cos(angle), size / 2 + 0.36 * size * np.sin(angle)
            defected = state.last_actions[i] == 1
            color: Any = jnp.where(
                started,
                jnp.where(defected, jnp.array([210, 50, 40], jnp.uint8), jnp.array([50, 170, 70], jnp.uint8)),
                jnp.array([170, 170, 170], jnp.uint8),
            )
            frame = rendering.fill_circle(frame, x, y, size * 0.5 / max(self.num_agents, 3), color)
        progress = jnp.clip(state.time / jnp.maximum(params.num_inner_steps, 1), 0.0, 1.0)
        frame = rendering.fill_rect(frame, 0, size + 4, size, size + bar - 2, (220, 220, 220))
        return rendering.fill_rect(frame, 0, size + 4, progress * size, size + bar - 2, (40, 160, 60))

    def __repr__(self) -> str:
        return f"IteratedTensorGame(num_players={self.num_agents}, num_inner_steps={self._lengths[0]})"
