"""Iterated two-player matrix games: the prisoner's dilemma and friends.

Payoff layout, used everywhere in this package: an array of shape ``(2, 2, 2)``
with ``payoff[action_0, action_1] = (reward_0, reward_1)``, where ``action_i``
is player ``i``'s action (0 or 1). For the social dilemmas action 0 is
"cooperate" (C) and action 1 is "defect" (D), so the four joint actions are
CC = ``payoff[0, 0]``, CD = ``payoff[0, 1]``, DC = ``payoff[1, 0]`` and
DD = ``payoff[1, 1]`` (first letter player 0, second letter player 1).
Pax stores the same numbers as a ``(4, 2)`` array with rows CC, CD, DC, DD;
``payoff.reshape(4, 2)`` converts ours to it.

Presets (:data:`PAYOFFS`):

================================  ===========  ===========  ===========  ===========
game                              CC / 00      CD / 01      DC / 10      DD / 11
================================  ===========  ===========  ===========  ===========
``prisoners_dilemma`` (Pax)       (-1, -1)     (-3, 0)      (0, -3)      (-2, -2)
``matching_pennies`` (Pax)        (1, -1)      (-1, 1)      (-1, 1)      (1, -1)
``stag_hunt``                     (4, 4)       (1, 3)       (3, 1)       (2, 2)
``chicken``                       (0, 0)       (-1, 1)      (1, -1)      (-10, -10)
``battle_of_the_sexes``           (3, 2)       (0, 0)       (0, 0)       (2, 3)
================================  ===========  ===========  ===========  ===========

The prisoner's dilemma and matching pennies values are the ones Pax uses for
its iterated games (``IPD`` and ``IMP`` configs). Pax has no presets for the
other three; their values are common textbook choices: stag hunt with action 0
= stag, 1 = hare (R > T >= P > S: 4 > 3 > 2 > 1); chicken with 0 = swerve,
1 = straight (T > R > S > P: 1 > 0 > -1 > -10); battle of the sexes with
action 0 = the event player 0 prefers, 1 = the event player 1 prefers.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import rendering, spaces, struct
from lamella.envs._inputs import check_one_state
from lamella.envs.environment import Environment, StepOutput

__all__ = [
    "PAYOFFS",
    "PAYOFF_SHAPE",
    "START_STATE",
    "IteratedMatrixGame",
    "IteratedMatrixGameParams",
    "IteratedMatrixGameState",
    "check_payoff",
    "joint_state",
]

PAYOFF_SHAPE = (2, 2, 2)
START_STATE = 4  # observation index before the first round
NUM_STATES = 5  # CC, CD, DC, DD (from the observer's perspective) and start

PAYOFFS: dict[str, np.ndarray] = {
    "prisoners_dilemma": np.array([[[-1, -1], [-3, 0]], [[0, -3], [-2, -2]]], np.float32),
    "matching_pennies": np.array([[[1, -1], [-1, 1]], [[-1, 1], [1, -1]]], np.float32),
    "stag_hunt": np.array([[[4, 4], [1, 3]], [[3, 1], [2, 2]]], np.float32),
    "chicken": np.array([[[0, 0], [-1, 1]], [[1, -1], [-10, -10]]], np.float32),
    "battle_of_the_sexes": np.array([[[3, 2], [0, 0]], [[0, 0], [2, 3]]], np.float32),
}
for _payoff in PAYOFFS.values():
    _payoff.flags.writeable = False


def _describe(payoff: Any) -> str:
    shape = getattr(payoff, "shape", None)
    dtype = getattr(payoff, "dtype", None)
    if shape is None:
        try:
            array = np.asarray(payoff)
            shape, dtype = array.shape, array.dtype
        except Exception:  # an object numpy cannot read: name its type
            return f"a {type(payoff).__name__}"
    return f"shape {tuple(shape)} and dtype {dtype}"


def check_payoff(payoff: Any, where: str = "payoff") -> jax.Array:
    """Validate a payoff matrix and return it as float32 ``(2, 2, 2)``.

    Works on concrete values and on tracers (only shape and dtype are looked
    at, both static), so it runs at construction and at trace time.

    Args:
        payoff: array-like of shape ``(2, 2, 2)``, ``payoff[a0, a1] = (r0, r1)``,
            with a real (integer or floating) dtype; integers are cast to float32.
        where: what to call the value in the error message.

    Raises:
        ValueError: wrong shape, or a dtype that is not a real number (bool,
            complex, strings, objects). The message shows the expected shape
            ``(2, 2, 2)`` and what was given.
    """
    expected = (
        f"expected a real-valued array of shape {PAYOFF_SHAPE} laid out as "
        "payoff[action_0, action_1] = (reward_0, reward_1)"
    )
    hint = " A Pax-style (4, 2) matrix with rows CC, CD, DC, DD converts with .reshape(2, 2, 2)."
    return check_real_array(payoff, PAYOFF_SHAPE, where, expected, {(4, 2): hint})


def check_real_array(
    value: Any,
    shape: tuple[int, ...],
    where: str,
    expected: str,
    hints: dict[tuple[int, ...], str] | None = None,
) -> jax.Array:
    """``value`` as float32 of ``shape``, or a ``ValueError`` saying ``{where}: {expected}, got
    ...`` (plus ``hints[shape given]`` where a known wrong shape has a known fix). The payoff
    checks of every multi-agent game use it.

    Works on concrete values and on tracers (only shape and dtype are looked at, both static;
    concrete values must also be finite); integers are cast to float32, and bool, complex,
    strings and objects are refused.
    """
    array: Any
    if isinstance(value, jax.Array):
        array = value
    else:
        try:
            array = np.asarray(value)
        except Exception as error:
            raise ValueError(f"{where}: {expected}, got {_describe(value)}.") from error
    dtype = array.dtype
    # jnp.issubdtype also knows bfloat16 and friends; bool is not an integer type here.
    real = jnp.issubdtype(dtype, jnp.integer) or jnp.issubdtype(dtype, jnp.floating)
    if tuple(array.shape) != tuple(shape) or not real:
        hint = (hints or {}).get(tuple(array.shape), "")
        raise ValueError(f"{where}: {expected}, got shape {tuple(array.shape)} and dtype {dtype}.{hint}")
    try:  # concrete values: a NaN or inf makes every return NaN or inf
        finite = np.isfinite(np.asarray(array, np.float64))
    except jax.errors.TracerArrayConversionError:  # traced (a swept payoff): its values are not known yet
        finite = None
    if finite is not None and not finite.all():
        index = tuple(int(i) for i in np.argwhere(~finite)[0])
        raise ValueError(
            f"{where}: every entry must be a finite number, got {np.asarray(array)[index]} at "
            f"[{', '.join(map(str, index))}] (a NaN or inf payoff makes every return NaN or inf)."
        )
    return jnp.asarray(array, jnp.float32)


def joint_state(action_self: jax.Array, action_other: jax.Array) -> jax.Array:
    """Index of a joint action seen by one player: CC=0, CD=1, DC=2, DD=3 (own action first)."""
    return (2 * action_self + action_other).astype(jnp.int32)


class IteratedMatrixGameState(struct.PyTreeNode):
    """State of :class:`IteratedMatrixGame`.

    Attributes:
        last_actions: int32 ``(2,)``, the previous round's actions (player 0,
            player 1); zeros before the first round.
        time: int32 ``()``, rounds played in this episode.
    """

    last_actions: jax.Array
    time: jax.Array


class IteratedMatrixGameParams(struct.PyTreeNode):
    """Parameters of :class:`IteratedMatrixGame` (all traced, all vmappable).

    Attributes:
        payoff: float32 ``(2, 2, 2)``, ``payoff[a0, a1] = (r0, r1)``.
        num_inner_steps: int, rounds per episode; the episode is truncated after it.
    """

    payoff: jax.Array = struct.field(default_factory=lambda: jnp.asarray(PAYOFFS["prisoners_dilemma"]))
    num_inner_steps: int = struct.field(default=100, bounds=(1, None))


class IteratedMatrixGame(Environment[IteratedMatrixGameState, IteratedMatrixGameParams]):
    """Two players play a 2x2 matrix game for ``num_inner_steps`` rounds.

    Agents: 2 (leading agent axis on everything below).

    Observation: float32 ``(2, 5)``; row ``i`` is player ``i``'s one-hot of the
    previous joint action *from its own perspective*: index 0 = both played 0
    (CC), 1 = I played 0 and the other 1 (CD), 2 = I played 1 and the other 0
    (DC), 3 = both played 1 (DD), 4 = start (no round played yet). Player 1
    sees the joint action with the roles swapped, as in Pax: after player 0
    cooperates and player 1 defects, player 0 observes CD (index 1) and
    player 1 observes DC (index 2).

    Action: MultiDiscrete([2, 2]), int32 ``(2,)``: player ``i``'s action in
    entry ``i`` (0 = cooperate / row or column 0, 1 = defect / row or column 1).

    Reward: float32 ``(2,)``, ``params.payoff[a0, a1]``.

    Terminated: never (bool ``(2,)``, all False).

    Truncated: bool ``(2,)``, all True once ``num_inner_steps`` rounds were played.

    State: :class:`IteratedMatrixGameState` (previous actions, round counter).

    Params: :class:`IteratedMatrixGameParams` (payoff, ``num_inner_steps``).
    The payoff is a traced array, so a batch of different games is one
    ``jax.vmap`` over params. Its shape is fixed to ``(2, 2, 2)``: another
    shape or a non-real dtype is rejected at construction and, for params
    built by hand, when ``reset``/``step`` are traced.

    Reset and step are deterministic (the keys are ignored).

    Args:
        payoff: default payoff of the params, ``(2, 2, 2)``; the prisoner's
            dilemma when omitted.
        num_inner_steps: default episode length (>= 1).
    """

    num_agents = 2
    #: The agents do not form one team (multi-agent contract: a runner refuses a team reward here).
    cooperative = False
    stochastic_step = False

    def __init__(self, payoff: Any = None, num_inner_steps: int = 100):
        payoff = PAYOFFS["prisoners_dilemma"] if payoff is None else payoff
        self._payoff = np.asarray(check_payoff(payoff, f"{type(self).__name__}(payoff=...)"))
        if int(num_inner_steps) < 1:
            raise ValueError(
                f"{type(self).__name__}: num_inner_steps must be >= 1 (rounds per episode), "
                f"got {num_inner_steps}."
            )
        self._num_inner_steps = int(num_inner_steps)

    @property
    def default_params(self) -> IteratedMatrixGameParams:
        return IteratedMatrixGameParams(jnp.asarray(self._payoff), self._num_inner_steps)

    def get_obs(self, state: IteratedMatrixGameState) -> jax.Array:
        """Both players' observations, float32 ``(2, 5)``."""
        a0, a1 = state.last_actions[0], state.last_actions[1]
        started = state.time > 0
        index = jnp.stack([joint_state(a0, a1), joint_state(a1, a0)])
        index = jnp.where(started, index, START_STATE)
        return jax.nn.one_hot(index, NUM_STATES, dtype=jnp.float32)

    def reset_env(
        self, key: jax.Array, params: IteratedMatrixGameParams
    ) -> tuple[jax.Array, IteratedMatrixGameState]:
        check_payoff(params.payoff, "params.payoff")
        state = IteratedMatrixGameState(jnp.zeros((2,), jnp.int32), jnp.zeros((), jnp.int32))
        return self.get_obs(state), state

    def step_env(
        self, key: jax.Array, state: IteratedMatrixGameState, action: Any, params: IteratedMatrixGameParams
    ) -> StepOutput:
        payoff = check_payoff(params.payoff, "params.payoff")
        action = jnp.asarray(action)
        if action.shape != (2,):
            raise ValueError(
                f"{self.name}.step: action must have shape (2,) (one action per player), got {action.shape}."
            )
        action = jnp.clip(action.astype(jnp.int32), 0, 1)
        reward = payoff[action[0], action[1]]
        state = IteratedMatrixGameState(action, state.time + 1)
        truncated = jnp.broadcast_to(state.time >= params.num_inner_steps, (2,))
        terminated = jnp.zeros((2,), jnp.bool_)
        return self.get_obs(state), state, reward, terminated, truncated, {}

    def observation_space(self, params: IteratedMatrixGameParams | None = None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (2, NUM_STATES), jnp.float32)

    def action_space(self, params: IteratedMatrixGameParams | None = None) -> spaces.MultiDiscrete:
        return spaces.MultiDiscrete([2, 2])

    def render(
        self, state: IteratedMatrixGameState, params: IteratedMatrixGameParams | None = None
    ) -> jax.Array:
        """The payoff grid, uint8 ``(140, 128, 3)``.

        Row = player 0's action, column = player 1's action. Each cell's left
        half is shaded by player 0's payoff (blue, darker = higher), the right
        half by player 1's (red). The previous joint action has a thick black
        frame; the green bar at the bottom fills as the episode's rounds pass.
        """
        check_one_state(self, state, "render")
        params = self.default_params if params is None else params
        payoff = check_payoff(params.payoff, "params.payoff")
        size, bar, margin, cell = 128, 12, 4, 64
        low, high = jnp.min(payoff), jnp.max(payoff)
        level = (payoff - low) / jnp.maximum(high - low, 1e-6)  # (2, 2, 2) in [0, 1]
        light = jnp.array([235.0, 235.0, 235.0])
        dark = jnp.array([[40.0, 70.0, 200.0], [200.0, 50.0, 40.0]])  # player 0 blue, player 1 red
        frame = rendering.canvas(size + bar, size, (255, 255, 255))
        a0, a1 = state.last_actions[0], state.last_actions[1]
        for row in range(2):
            for col in range(2):
                x0, y0 = col * cell, row * cell
                chosen = (state.time > 0) & (a0 == row) & (a1 == col)
                border = jnp.where(chosen, margin + 2.0, 1.0)
                frame = rendering.fill_rect(frame, x0, y0, x0 + cell, y0 + cell, (0, 0, 0))
                for player in range(2):
                    # A traced colour: rendering paints with any uint8 (3,) array.
                    color: Any = light + level[row, col, player] * (dark[player] - light)
                    left = x0 + border + player * (cell / 2.0 - border)
                    frame = rendering.fill_rect(
                        frame,
                        left,
                        y0 + border,
                        left + cell / 2.0 - border,
                        y0 + cell - border,
                        color.astype(jnp.uint8),
                    )
        progress = jnp.clip(state.time / jnp.maximum(params.num_inner_steps, 1), 0.0, 1.0)
        frame = rendering.fill_rect(frame, 0, size + 2, size, size + bar, (220, 220, 220))
        return rendering.fill_rect(frame, 0, size + 2, progress * size, size + bar, (40, 160, 60))
