"""CoinGame: two players collect coins on a 3x3 torus (Lerer & Peysakhovich; Pax's rules).

The rules are those of Pax's ``CoinGame`` (``pax/envs/coin_game.py``, the env of the
M-FOS, Good Shepherd and Shaper coin-game experiments), written anew for lamella's
contract. One deliberate change: Pax zeroes both rewards on the step that ends each inner
episode, so the last transition's coin is never paid. Here it is paid; ``pax_quirks=True``
restores Pax's rule (see :class:`CoinGame`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import rendering, spaces, struct
from lamella.envs._inputs import bool_setting, check_one_state, integer_setting
from lamella.envs.environment import Environment, StepOutput
from lamella.envs.multi_agent.matrix_game import check_real_array

__all__ = [
    "ACTION_NAMES",
    "COIN_GAME_PAYOFF",
    "COIN_GAME_PAYOFF_SHAPE",
    "CoinGame",
    "CoinGameParams",
    "CoinGameState",
    "check_coin_game_payoff",
]

RIGHT, LEFT, UP, DOWN, STAY = range(5)
NUM_ACTIONS = 5
ACTION_NAMES = ("right", "left", "up", "down", "stay")
# (row, column) offset of each action, Pax's MOVES: "up" adds 1 to the row index.
_MOVES = np.array([[0, 1], [0, -1], [1, 0], [-1, 0], [0, 0]], np.int32)
SIZE = 3  # the grid is SIZE x SIZE, with wrap-around
NUM_CHANNELS = 4

COIN_GAME_PAYOFF_SHAPE = (2, 3)
# Every CoinGame config of Pax (pax/conf/experiment/cg/*.yaml): [[rr, rb, r_pen], [br, bb, b_pen]].
COIN_GAME_PAYOFF = np.array([[1.0, 1.0, -2.0], [1.0, 1.0, -2.0]], np.float32)
COIN_GAME_PAYOFF.flags.writeable = False


def check_coin_game_payoff(payoff: Any, where: str = "payoff") -> jax.Array:
    """Validate a CoinGame payoff and return it as float32 ``(2, 3)``.

    Only shape and dtype are read, so this works on concrete values (at construction) and on
    tracers (when ``reset``/``step`` are traced with hand-built params).

    Args:
        payoff: ``[[rr, rb, r_pen], [br, bb, b_pen]]``: row 0 is the red player's reward for
            taking the red coin, for taking the blue coin, and when blue takes the red coin;
            row 1 the blue player's for the red coin, the blue coin, and when red takes the
            blue coin. Integer or floating dtype.
        where: what to call the value in the error message.

    Raises:
        ValueError: another shape, or a dtype that is not a real number.
    """
    expected = (
        f"expected a real-valued array of shape {COIN_GAME_PAYOFF_SHAPE} laid out as "
        "[[rr, rb, r_pen], [br, bb, b_pen]] (Pax's CoinGame payoff_matrix, e.g. [[1, 1, -2], [1, 1, -2]])"
    )
    hint = " It looks transposed: one row per player, three entries each."
    return check_real_array(payoff, COIN_GAME_PAYOFF_SHAPE, where, expected, {(3, 2): hint})


class CoinGameState(struct.PyTreeNode):
    """State of :class:`CoinGame`. Coordinates are ``(row, column)`` in ``0..2``.

    Attributes:
        agent_positions: int32 ``(2, 2)``, the red player's cell then the blue player's. The
            players may share a cell.
        coin_positions: int32 ``(2, 2)``, the red coin's cell then the blue coin's. Coins may
            share a cell with each other or with a player.
        time: int32 ``()``, steps taken in the current inner episode (Pax's ``inner_t``).
        outer_time: int32 ``()``, inner episodes finished in this episode (Pax's ``outer_t``).
    """

    agent_positions: jax.Array
    coin_positions: jax.Array
    time: jax.Array
    outer_time: jax.Array


class CoinGameParams(struct.PyTreeNode):
    """Parameters of :class:`CoinGame` (all traced, all vmappable).

    Attributes:
        payoff: float32 ``(2, 3)``, ``[[rr, rb, r_pen], [br, bb, b_pen]]`` (see
            :func:`check_coin_game_payoff`).
        num_inner_steps: int, steps per inner episode (16 in every Pax config).
        num_outer_steps: int, inner episodes per episode (1: every inner episode is an episode).
    """

    payoff: jax.Array = struct.field(default_factory=lambda: jnp.asarray(COIN_GAME_PAYOFF))
    num_inner_steps: int = struct.field(default=16, bounds=(1, None))
    num_outer_steps: int = struct.field(default=1, bounds=(1, None))


def _wrap(x: jax.Array) -> jax.Array:
    """``x mod 3`` for ``x`` in ``-2..4`` (two selects; cheaper than an integer remainder)."""
    x = jnp.where(x < 0, x + SIZE, x)
    return jnp.where(x >= SIZE, x - SIZE, x)


def _cells(key: jax.Array, count: int, stream: int = 0) -> jax.Array:
    """``count`` independent uniform cells, int32 ``(count, 2)`` (Pax: ``randint(0, 3)`` per coordinate)."""
    u = fast_random.uniform16(key, (count,), stream=stream)
    cell = jnp.minimum(jnp.floor(u * (SIZE * SIZE)).astype(jnp.int32), SIZE * SIZE - 1)
    row = cell // SIZE
    return jnp.stack([row, cell - SIZE * row], -1)


class CoinGame(Environment[CoinGameState, CoinGameParams]):
    """CoinGame: a red and a blue player collect red and blue coins on a 3x3 torus.

    A sequential social dilemma: taking the other player's coin pays you and costs them, so
    both do best when each takes only its own coin. Rules (Pax's; ``n = 2``):

    - **Moves.** Both players move at once, ``mod 3`` in each coordinate. There are no
      collisions: players may share a cell.
    - **Coins.** A player takes a coin when its *new* cell holds the coin; both players can
      take the same coin on one step. With ``payoff = [[rr, rb, r_pen], [br, bb, b_pen]]``
      red gets ``rr`` for the red coin, ``rb`` for the blue coin and ``r_pen`` when blue takes
      the red coin; blue gets ``br`` for the red coin, ``bb`` for the blue coin and ``b_pen``
      when red takes the blue coin (all added up on a step with several). A taken coin
      reappears on a uniform cell at once (it may land on a player or on the other coin).
    - **Inner and outer episodes.** ``num_inner_steps`` steps make an inner episode and
      ``num_outer_steps`` inner episodes make an episode, as in Pax (``inner_t``,
      ``outer_t``). When an inner episode ends and more follow, the env starts the next one
      itself (all four positions drawn afresh, ``time`` back to 0, ``outer_time + 1``),
      as Pax does at every inner end, and returns its first observation. The inner
      boundary is ``info["inner_episode_done"]`` on every step. With ``num_outer_steps = 1``
      (the default) every inner episode is an episode: ``truncated`` marks its end, exactly
      as :class:`~lamella.envs.multi_agent.IteratedMatrixGame` marks its rounds' end, and
      the :class:`~lamella.envs.wrappers.AutoReset` wrapper starts the next (the ending
      observation stays in ``info["final_observation"]`` for bootstrapping).
    - **Reset.** The two players and the two coins each on a uniform cell, independently
      (overlaps possible), as in Pax.

    Agents: 2, agent 0 is red, agent 1 is blue (leading agent axis on everything below).

    Action: int32 ``(2,)``, ``MultiDiscrete([5, 5])``: 0 right (column + 1), 1 left
    (column - 1), 2 up (row + 1), 3 down (row - 1), 4 stay: Pax's action ids and names
    (its "up" adds 1 to the row). An action outside ``0..4`` is stay.

    Observation: uint8 ``(2, 36)`` (``(2, 3, 3, 4)`` with ``grid_observation=True``), one row
    per agent, a 3x3 grid of 4 channels ``[self, other, own coin, other's coin]`` flattened
    cell by cell (index ``4 * (3 * row + column) + channel``). Egocentric (the default, as in
    every Pax CoinGame config): shifted on the torus so the observer is at the centre cell
    ``(1, 1)``. With ``egocentric=False`` the grid is absolute. Either way the blue player's
    observation is built from the colour-swapped state, so every agent sees itself in
    channel 0 and its own coin in channel 2.

    Reward: float32 ``(2,)``, individual, from the payoff as above.

    Terminated: never (bool ``(2,)``, all False).

    Truncated: bool ``(2,)``, all True on the step that ends the last inner episode
    (``num_inner_steps * num_outer_steps`` steps).

    Info:

    - ``inner_episode_done``: bool ``(2,)``, all True on every step that ends an inner
      episode (so also where ``truncated`` is).
    - ``own_coins``: int32 ``(2,)``, coins of its own colour each agent took this step (0 or 1).
    - ``other_coins``: int32 ``(2,)``, coins of the other's colour each agent took this step.
      Pax's ``red_coop``/``blue_coop`` are ``own_coins`` and ``red_defect``/``blue_defect``
      are ``other_coins``, summed over an inner episode.

    Global state (:meth:`global_state`): float32 ``(38,)``, the absolute grid with channels
    ``[red player, blue player, red coin, blue coin]`` flattened as the observation, then
    ``time / num_inner_steps`` and ``outer_time / num_outer_steps``.

    State: :class:`CoinGameState`. Params: :class:`CoinGameParams` (payoff,
    ``num_inner_steps``, ``num_outer_steps``; a batch of games with different payoffs is one
    ``vmap`` over params).

    Pax's quirk (``pax_quirks=True``): both rewards are 0 on every step that ends an inner
    episode, as Pax (and JaxMARL's port) compute them, so an inner episode of ``T`` steps pays
    only its first ``T - 1``. By default that step pays like any other.

    Args:
        payoff: default payoff of the params, ``(2, 3)``; Pax's ``[[1, 1, -2], [1, 1, -2]]``
            when omitted. Another shape fails here with the expected layout in the message.
        num_inner_steps: default steps per inner episode (>= 1).
        num_outer_steps: default inner episodes per episode (>= 1).
        egocentric: observations centred on the observer (Pax's ``egocentric``).
        grid_observation: observations ``(2, 3, 3, 4)`` instead of ``(2, 36)`` (Pax's ``cnn``).
        pax_quirks: zero the rewards of the step that ends each inner episode, as Pax does.
    """

    num_agents = 2
    #: The agents do not form one team (multi-agent contract: a runner refuses a team reward here).
    cooperative = False
    sparse_reset = True  # episodes of a fixed length: a batch ends together

    def __init__(
        self,
        payoff: Any = None,
        num_inner_steps: int = 16,
        num_outer_steps: int = 1,
        egocentric: bool = True,
        grid_observation: bool = False,
        pax_quirks: bool = False,
    ):
        payoff = COIN_GAME_PAYOFF if payoff is None else payoff
        self._payoff = np.asarray(check_coin_game_payoff(payoff, f"{type(self).__name__}(payoff=...)"))
        for name, value in (("num_inner_steps", num_inner_steps), ("num_outer_steps", num_outer_steps)):
            integer_setting(value, name, type(self).__name__, minimum=1)
        self._num_inner_steps = int(num_inner_steps)
        self._num_outer_steps = int(num_outer_steps)
        self.egocentric = bool_setting(egocentric, "egocentric", type(self).__name__)
        self.grid_observation = bool_setting(grid_observation, "grid_observation", type(self).__name__)
        self.pax_quirks = bool_setting(pax_quirks, "pax_quirks", type(self).__name__)

    @property
    def default_params(self) -> CoinGameParams:
        return CoinGameParams(jnp.asarray(self._payoff), self._num_inner_steps, self._num_outer_steps)

    # Spaces ----------------------------------------------------------------------------------

    @property
    def _obs_shape(self) -> tuple[int, ...]:
        return (SIZE, SIZE, NUM_CHANNELS) if self.grid_observation else (SIZE * SIZE * NUM_CHANNELS,)

    def observation_space(self, params: CoinGameParams | None = None) -> spaces.Box:
        return spaces.Box(0, 1, (2, *self._obs_shape), jnp.uint8)

    def action_space(self, params: CoinGameParams | None = None) -> spaces.MultiDiscrete:
        return spaces.MultiDiscrete([NUM_ACTIONS, NUM_ACTIONS])

    def global_state_space(self, params: CoinGameParams | None = None) -> spaces.Box:
        """The space of :meth:`global_state`: float32 ``(38,)`` in ``[0, 1]``."""
        return spaces.Box(0.0, 1.0, (SIZE * SIZE * NUM_CHANNELS + 2,), jnp.float32)

    # Observations ----------------------------------------------------------------------------

    def _grids(self, entities: jax.Array) -> jax.Array:
        """One-hot grids of ``(..., 4, 2)`` positions: uint8 ``(..., 36)`` or ``(..., 3, 3, 4)``."""
        cell = SIZE * entities[..., 0] + entities[..., 1]  # (..., 4)
        grid = cell[..., None, :] == jnp.arange(SIZE * SIZE, dtype=jnp.int32)[:, None]  # (..., 9, 4)
        grid = grid.astype(jnp.uint8)
        return grid.reshape((*grid.shape[:-2], *self._obs_shape))

    def observation_of(self, state: CoinGameState, params: CoinGameParams | None = None) -> jax.Array:
        """Both agents' observations of ``state``, uint8 ``(2, 36)`` (or ``(2, 3, 3, 4)``)."""
        check_one_state(self, state, "observation_of")
        red, blue = state.agent_positions[0], state.agent_positions[1]
        red_coin, blue_coin = state.coin_positions[0], state.coin_positions[1]
        # Each agent's entities in its own channel order: self, other, own coin, other's coin.
        entities = jnp.stack(
            [jnp.stack([red, blue, red_coin, blue_coin]), jnp.stack([blue, red, blue_coin, red_coin])]
        )  # (2, 4, 2)
        if self.egocentric:
            # Shift so the observer (channel 0) sits at (1, 1).
            entities = _wrap(entities - entities[:, :1, :] + 1)
        return self._grids(entities)

    def global_state(self, state: CoinGameState, params: CoinGameParams | None = None) -> jax.Array:
        """The whole state, float32 ``(38,)`` (see the class docs)."""
        check_one_state(self, state, "global_state")
        params = self.default_params if params is None else params
        entities = jnp.concatenate([state.agent_positions, state.coin_positions])  # (4, 2)
        cell = SIZE * entities[:, 0] + entities[:, 1]
        grid = (cell[None, :] == jnp.arange(SIZE * SIZE)[:, None]).astype(jnp.float32).reshape(-1)
        clocks = jnp.stack(
            [
                state.time / jnp.asarray(params.num_inner_steps, jnp.float32),
                state.outer_time / jnp.asarray(params.num_outer_steps, jnp.float32),
            ]
        ).astype(jnp.float32)
        return jnp.concatenate([grid, jnp.clip(clocks, 0.0, 1.0)])

    # Reset and step --------------------------------------------------------------------------

    def _fresh_positions(self, key: jax.Array, stream: int) -> tuple[jax.Array, jax.Array]:
        cells = _cells(key, 4, stream)
        return cells[:2], cells[2:]

    def reset_env(self, key: jax.Array, params: CoinGameParams) -> tuple[jax.Array, CoinGameState]:
        check_coin_game_payoff(params.payoff, "params.payoff")
        agents, coins = self._fresh_positions(key, 0)
        zero = jnp.zeros((), jnp.int32)
        state = CoinGameState(agents, coins, zero, zero)
        return self.observation_of(state, params), state

    def step_env(
        self, key: jax.Array, state: CoinGameState, action: Any, params: CoinGameParams
    ) -> StepOutput:
        payoff = check_coin_game_payoff(params.payoff, "params.payoff")
        action = jnp.asarray(action).astype(jnp.int32)
        action = jnp.where((action >= 0) & (action < NUM_ACTIONS), action, STAY)
        moves = jnp.asarray(_MOVES)
        agents = _wrap(state.agent_positions + moves[action])  # (2, 2)

        # took[i, c]: agent i's new cell holds coin c (0 red, 1 blue).
        took = jnp.all(agents[:, None, :] == state.coin_positions[None, :, :], -1)
        took_float = took.astype(jnp.float32)
        red_reward = (
            payoff[0, 0] * took_float[0, 0]
            + payoff[0, 1] * took_float[0, 1]
            + payoff[0, 2] * took_float[1, 0]
        )
        blue_reward = (
            payoff[1, 0] * took_float[1, 0]
            + payoff[1, 1] * took_float[1, 1]
            + payoff[1, 2] * took_float[0, 1]
        )
        reward = jnp.stack([red_reward, blue_reward])
        taken = took[0] | took[1]  # (2,) per coin
        respawn = _cells(key, 2, stream=0)
        coins = jnp.where(taken[:, None], respawn, state.coin_positions)

        time = state.time + 1
        inner_done = time >= params.num_inner_steps
        outer_time = state.outer_time + inner_done.astype(jnp.int32)
        episode_over = outer_time >= params.num_outer_steps
        if self.pax_quirks:
            reward = jnp.where(inner_done, 0.0, reward)

        # The next inner episode starts here (fresh positions) unless the episode is over,
        # which the reset wrapper handles.
        new_agents, new_coins = self._fresh_positions(key, 1)
        restart = inner_done & ~episode_over
        state = CoinGameState(
            agent_positions=jnp.where(restart, new_agents, agents),
            coin_positions=jnp.where(restart, new_coins, coins),
            time=jnp.where(restart, 0, time),
            outer_time=outer_time,
        )
        own = jnp.stack([took[0, 0], took[1, 1]]).astype(jnp.int32)
        other = jnp.stack([took[0, 1], took[1, 0]]).astype(jnp.int32)
        info = {
            "inner_episode_done": jnp.broadcast_to(inner_done, (2,)),
            "own_coins": own,
            "other_coins": other,
        }
        terminated = jnp.zeros((2,), jnp.bool_)
        truncated = jnp.broadcast_to(episode_over, (2,))
        return (
            self.observation_of(state, params),
            state,
            reward.astype(jnp.float32),
            terminated,
            truncated,
            info,
        )

    # Rendering -------------------------------------------------------------------------------

    def render(self, state: CoinGameState, params: CoinGameParams | None = None) -> jax.Array:
        """The torus, uint8 ``(208, 192, 3)``: 64-pixel cells, row 0 at the top.

        Players are large discs (red, blue), coins small discs with a dark rim in their
        colour; a player and a coin on one cell are both visible (the coin is drawn on top).
        The green bar at the bottom fills as the inner episode's steps pass.
        """
        check_one_state(self, state, "render")
        params = self.default_params if params is None else params
        cell, bar = 64, 16
        colors = ((215, 50, 45), (40, 90, 210))
        frame = rendering.cells_to_frame(jnp.full((SIZE, SIZE, 3), 240, jnp.uint8), cell, (190, 190, 190))
        frame = jnp.concatenate([frame, jnp.full((bar, SIZE * cell, 3), 255, jnp.uint8)], 0)
        for i in range(2):
            y = (state.agent_positions[i, 0] + 0.5) * cell
            # The two players side by side within a cell, so a shared cell shows both.
            x = (state.agent_positions[i, 1] + 0.35 + 0.3 * i) * cell
            frame = rendering.fill_circle(frame, x, y, cell * 0.27, colors[i])
        for c in range(2):
            y = (state.coin_positions[c, 0] + 0.5) * cell
            x = (state.coin_positions[c, 1] + 0.3 + 0.4 * c) * cell
            frame = rendering.fill_circle(frame, x, y, cell * 0.15, (30, 30, 30))
            frame = rendering.fill_circle(frame, x, y, cell * 0.11, colors[c])
        progress = jnp.clip(state.time / jnp.maximum(params.num_inner_steps, 1), 0.0, 1.0)
        top = SIZE * cell + 4
        frame = rendering.fill_rect(frame, 0, top, SIZE * cell, top + bar - 6, (220, 220, 220))
        return rendering.fill_rect(frame, 0, top, progress * SIZE * cell, top + bar - 6, (40, 160, 60))

    def __repr__(self) -> str:
        return (
            f"CoinGame(num_inner_steps={self._num_inner_steps}, num_outer_steps={self._num_outer_steps}, "
            f"egocentric={self.egocentric}, pax_quirks={self.pax_quirks})"
        )
