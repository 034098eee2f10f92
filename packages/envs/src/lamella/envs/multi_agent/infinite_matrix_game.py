"""The infinitely iterated matrix game between two memory-one policies, solved exactly.

A memory-one policy is five cooperation probabilities (probabilities of
action 0), in this order, from its owner's perspective (own action first):

==========  ========================================================
index       probability of playing 0 ("cooperate") ...
==========  ========================================================
0           in the first round (start)
1           after CC (both played 0)
2           after CD (I played 0, the other 1)
3           after DC (I played 1, the other 0)
4           after DD (both played 1)
==========  ========================================================

The order matches the observation of
:class:`~lamella.envs.multi_agent.matrix_game.IteratedMatrixGame` shifted by
one (there the start state is the last index 4). Examples: always cooperate
``[1, 1, 1, 1, 1]``, always defect ``[0, 0, 0, 0, 0]``, tit-for-tat
``[1, 1, 0, 1, 0]``.

Two such policies make the sequence of joint actions a Markov chain over the
four joint states CC, CD, DC, DD (player 0's perspective). With ``d0`` the
distribution of the first joint action, ``P`` the 4x4 transition matrix and
``r_i`` player ``i``'s payoff per joint state, the normalised discounted return

    V_i = (1 - gamma) * sum_t gamma^t E[r_i(s_t)] = (1 - gamma) * d0 (I - gamma P)^-1 r_i

is computed in closed form (one 4x4 linear solve). The ``(1 - gamma)`` factor,
as in Pax, puts the values on the scale of one round's payoff: a policy pair
that stays in CC forever in the prisoner's dilemma gets exactly ``-1``.
Pax's environment differs in two conventions: it takes logits (and applies a
sigmoid) and puts the start probability last; this one takes probabilities,
start first.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.envs import random as fast_random
from lamella.envs import rendering, spaces, struct
from lamella.envs._inputs import check_one_state, integer_setting
from lamella.envs.environment import Environment, StepOutput
from lamella.envs.multi_agent.matrix_game import PAYOFFS, check_payoff

__all__ = [
    "InfiniteMatrixGame",
    "InfiniteMatrixGameParams",
    "InfiniteMatrixGameState",
    "memory_one_values",
    "solve_dominant",
]

POLICY_SIZE = 5
# Player 1's own-perspective index of each joint state in player 0's order CC, CD, DC, DD.
_SWAP_ROLES = np.array([0, 2, 1, 3])


def solve_dominant(matrix: jax.Array, rhs: jax.Array) -> jax.Array:
    """Solve ``matrix @ x = rhs`` for a small strictly diagonally dominant ``matrix`` (by rows or
    by columns), ``(n, n)`` and ``(n,)``, without LAPACK.

    ``(I - gamma P)`` with ``P`` row-stochastic and ``gamma < 1`` is strictly
    diagonally dominant (by rows; its transpose by columns), so Gaussian
    elimination needs no pivoting and stays stable. Unrolled into a few dozen
    elementwise operations it compiles in milliseconds and batches under vmap,
    where ``jnp.linalg.solve`` makes a batched LU call into LAPACK per step: on
    the CPU about 8x slower for 4,000 4x4 systems (LOLA's update, jax 0.10.2),
    and with jaxlib 0.10.2 such calls can deadlock XLA's thread pool once the
    batch is large (M-FOS's RL runner on Pax's 4,000 games hung on 2 cores).
    Derivatives, of any order, are solves of the same kind
    (``jax.lax.custom_linear_solve``: the derivative of a solve is another solve),
    not derivatives of the elimination, which would compile about ten times slower.
    """
    return jax.lax.custom_linear_solve(
        lambda x: matrix @ x,
        rhs,
        solve=lambda _, b: _eliminate(matrix, b),
        transpose_solve=lambda _, b: _eliminate(matrix.T, b),
    )


def _eliminate(matrix: jax.Array, rhs: jax.Array) -> jax.Array:
    """``solve_dominant``'s primal: Gaussian elimination without pivoting, unrolled."""
    n = matrix.shape[-1]
    rows = [matrix[i] for i in range(n)]
    b = [rhs[i] for i in range(n)]
    for k in range(n):
        for i in range(k + 1, n):
            factor = rows[i][k] / rows[k][k]
            rows[i] = rows[i] - factor * rows[k]
            b[i] = b[i] - factor * b[k]
    x: list[jax.Array] = [jnp.zeros(())] * n
    for k in reversed(range(n)):
        known = sum((rows[k][j] * x[j] for j in range(k + 1, n)), jnp.zeros(()))
        x[k] = (b[k] - known) / rows[k][k]
    return jnp.stack(x)


def memory_one_values(
    policy_0: jax.typing.ArrayLike,
    policy_1: jax.typing.ArrayLike,
    payoff: jax.typing.ArrayLike,
    gamma: jax.typing.ArrayLike,
) -> jax.Array:
    """Exact normalised discounted returns of two memory-one policies.

    Pure, jit/vmap/grad-safe (differentiable in the policies, the payoff and gamma).

    Args:
        policy_0: float ``(5,)``, player 0's cooperation probabilities
            (start, CC, CD, DC, DD from player 0's perspective).
        policy_1: float ``(5,)``, player 1's, from player 1's perspective.
        payoff: float ``(2, 2, 2)``, ``payoff[a0, a1] = (r0, r1)``.
        gamma: discount in ``[0, 1)``.

    Raises:
        ValueError: a wrong policy shape or payoff, or a concrete policy entry outside
            ``[0, 1]`` (NaN included) or ``gamma`` outside ``[0, 1)``. Traced values (a sweep
            under jit or vmap, a gradient) are not read.

    Returns:
        float32 ``(2,)``: ``(1 - gamma) * sum_t gamma^t E[r_i(t)]`` for each
        player, rounds counted from the first (t = 0).
    """
    p = jnp.asarray(policy_0, jnp.float32)
    q = jnp.asarray(policy_1, jnp.float32)
    if p.shape != (POLICY_SIZE,) or q.shape != (POLICY_SIZE,):
        raise ValueError(
            f"memory_one_values: policies must have shape ({POLICY_SIZE},) "
            f"(start, CC, CD, DC, DD), got {p.shape} and {q.shape}."
        )
    payoff = check_payoff(payoff, "memory_one_values(payoff=...)")
    gamma = jnp.asarray(gamma, jnp.float32)
    _check_in_range(p, q, gamma)
    # Cooperation probability in the first round, then in each joint state (player 0's order).
    p_start, p_next = p[0], p[1:]
    q_start, q_next = q[0], q[1:][_SWAP_ROLES]

    def joint(pc: jax.Array, qc: jax.Array) -> jax.Array:
        # Distribution over CC, CD, DC, DD given both players' cooperation probabilities.
        return jnp.stack([pc * qc, pc * (1 - qc), (1 - pc) * qc, (1 - pc) * (1 - qc)], axis=-1)

    d0 = joint(p_start, q_start)  # (4,)
    transition = joint(p_next, q_next)  # (4, 4), rows: current state, columns: next state
    # Occupancy x = d0 (I - gamma P)^-1, i.e. (I - gamma P)^T x = d0.
    occupancy = solve_dominant((jnp.eye(4) - gamma * transition).T, d0)
    rewards = payoff.reshape(4, 2)  # rows CC, CD, DC, DD
    return ((1 - gamma) * occupancy @ rewards).astype(jnp.float32)


def _concrete(value: jax.Array) -> np.ndarray | None:
    """``value``'s numbers, or None while it is traced (under jit, vmap or grad: not known yet)."""
    try:
        return np.asarray(value, np.float64)
    except jax.errors.TracerArrayConversionError:
        return None


def _check_in_range(policy_0: jax.Array, policy_1: jax.Array, gamma: jax.Array) -> None:
    """``memory_one_values``' range checks of concrete inputs (a traced sweep passes unread)."""
    for name, policy in (("policy_0", policy_0), ("policy_1", policy_1)):
        values = _concrete(policy)
        if values is None:
            continue
        bad = np.flatnonzero(~((values >= 0) & (values <= 1)))  # NaN is outside too
        if bad.size:
            shown = np.round(values, 6)  # float32 inputs: 0.1, not 0.10000000149011612
            raise ValueError(
                f"memory_one_values: {name} must be cooperation probabilities in [0, 1] (start, CC, CD, "
                f"DC, DD), got {shown.tolist()}, out of range at entries {bad.tolist()}: "
                f"{shown[bad].tolist()}. InfiniteMatrixGame's step clips its actions to [0, 1] "
                "(jnp.clip(policy, 0, 1)); logits go through jax.nn.sigmoid first."
            )
    values = _concrete(gamma)
    if values is not None and not ((values >= 0) & (values < 1)).all():
        raise ValueError(
            "memory_one_values: gamma must be in [0, 1) (the infinite sum diverges at 1), "
            f"got {np.round(values, 6).tolist()}."
        )


class InfiniteMatrixGameState(struct.PyTreeNode):
    """State of :class:`InfiniteMatrixGame`.

    Attributes:
        policies: float32 ``(2, 5)``, the policies last played (random ones
            after reset), each from its owner's perspective.
        values: float32 ``(2,)``, their exact values (zeros after reset).
        time: int32 ``()``, outer steps taken in this episode.
    """

    policies: jax.Array
    values: jax.Array
    time: jax.Array


class InfiniteMatrixGameParams(struct.PyTreeNode):
    """Parameters of :class:`InfiniteMatrixGame` (all traced, all vmappable).

    Attributes:
        payoff: float32 ``(2, 2, 2)``, ``payoff[a0, a1] = (r0, r1)``.
        gamma: discount of the inner (infinite) game, in ``[0, 1)``.
        num_steps: outer steps per episode; the episode is truncated after it.
    """

    payoff: jax.Array = struct.field(default_factory=lambda: jnp.asarray(PAYOFFS["prisoners_dilemma"]))
    gamma: float = struct.field(default=0.96, bounds=(0.0, None), below=1.0)
    num_steps: int = struct.field(default=100, bounds=(1, None))


class InfiniteMatrixGame(Environment[InfiniteMatrixGameState, InfiniteMatrixGameParams]):
    """Each step, two memory-one policies play the infinitely repeated game; rewards are exact values.

    Meant as the inner game of meta-learning (the outer loop steps it, e.g.
    one naive-learner update per step); see the module docs for the policy
    layout and the closed-form value.

    Agents: 2 (leading agent axis on everything below).

    Observation: float32 ``(2, 10)``; row ``i`` is ``[policy_i, policy_other]``
    (each agent sees its own policy first), the policies of the last step
    clipped to ``[0, 1]``. After reset: two policies drawn uniformly from
    ``[0, 1)^5`` with the reset key.

    Action: Box(0, 1, shape ``(2, 5)``), float32: row ``i`` is player ``i``'s
    memory-one policy (start, CC, CD, DC, DD cooperation probabilities from
    its own perspective). Values outside ``[0, 1]`` are clipped.

    Reward: float32 ``(2,)``, :func:`memory_one_values` of the two policies:
    the exact discounted return normalised by ``(1 - gamma)``.

    Terminated: never (bool ``(2,)``, all False).

    Truncated: bool ``(2,)``, all True after ``num_steps`` steps.

    State: :class:`InfiniteMatrixGameState`.

    Params: :class:`InfiniteMatrixGameParams` (payoff, ``gamma``,
    ``num_steps``). The payoff's shape is fixed to ``(2, 2, 2)`` and checked
    at construction and when ``reset``/``step`` are traced.

    The step is deterministic (its key is ignored); the reset draws the first
    observation's policies from its key.

    Args:
        payoff: default payoff ``(2, 2, 2)``; the prisoner's dilemma when omitted.
        gamma: default discount, in ``[0, 1)``.
        num_steps: default episode length (>= 1).
    """

    num_agents = 2
    #: The agents do not form one team (multi-agent contract: a runner refuses a team reward here).
    cooperative = False
    stochastic_step = False

    def __init__(self, payoff: Any = None, gamma: float = 0.96, num_steps: int = 100):
        payoff = PAYOFFS["prisoners_dilemma"] if payoff is None else payoff
        self._payoff = np.asarray(check_payoff(payoff, f"{type(self).__name__}(payoff=...)"))
        if not 0.0 <= float(gamma) < 1.0:
            raise ValueError(
                f"{type(self).__name__}: gamma must be in [0, 1) (the infinite sum diverges at 1), "
                f"got {gamma}."
            )
        self._gamma = float(gamma)
        self._num_steps = integer_setting(num_steps, "num_steps", type(self).__name__, minimum=1)

    @property
    def default_params(self) -> InfiniteMatrixGameParams:
        return InfiniteMatrixGameParams(jnp.asarray(self._payoff), self._gamma, self._num_steps)

    @staticmethod
    def get_obs(policies: jax.Array) -> jax.Array:
        """Observations float32 ``(2, 10)`` from the policies ``(2, 5)``."""
        return jnp.concatenate([policies, policies[::-1]], axis=-1)

    def reset_env(
        self, key: jax.Array, params: InfiniteMatrixGameParams
    ) -> tuple[jax.Array, InfiniteMatrixGameState]:
        check_payoff(params.payoff, "params.payoff")
        policies = fast_random.uniform(key, (2, POLICY_SIZE))
        state = InfiniteMatrixGameState(policies, jnp.zeros((2,), jnp.float32), jnp.zeros((), jnp.int32))
        return self.get_obs(policies), state

    def step_env(
        self, key: jax.Array, state: InfiniteMatrixGameState, action: Any, params: InfiniteMatrixGameParams
    ) -> StepOutput:
        policies = jnp.asarray(action, jnp.float32)
        if policies.shape != (2, POLICY_SIZE):
            raise ValueError(
                f"{self.name}.step: action must have shape (2, {POLICY_SIZE}) (one memory-one policy "
                f"per player: start, CC, CD, DC, DD), got {policies.shape}."
            )
        policies = jnp.clip(policies, 0.0, 1.0)
        values = memory_one_values(policies[0], policies[1], params.payoff, params.gamma)
        state = InfiniteMatrixGameState(policies, values, state.time + 1)
        truncated = jnp.broadcast_to(state.time >= params.num_steps, (2,))
        terminated = jnp.zeros((2,), jnp.bool_)
        return self.get_obs(policies), state, values, terminated, truncated, {}

    def observation_space(self, params: InfiniteMatrixGameParams | None = None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (2, 2 * POLICY_SIZE), jnp.float32)

    def action_space(self, params: InfiniteMatrixGameParams | None = None) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (2, POLICY_SIZE), jnp.float32)

    def render(
        self, state: InfiniteMatrixGameState, params: InfiniteMatrixGameParams | None = None
    ) -> jax.Array:
        """The two policies as bar charts, uint8 ``(140, 130, 3)``.

        Top panel: player 0's five cooperation probabilities (start, CC, CD,
        DC, DD) as blue bars; bottom panel: player 1's in red. The green bar at
        the bottom fills as the episode's steps pass.
        """
        check_one_state(self, state, "render")
        params = self.default_params if params is None else params
        width, panel, bar, slot = 130, 64, 12, 26
        colors = ((40, 70, 200), (200, 50, 40))
        frame = rendering.canvas(2 * panel + bar, width, (255, 255, 255))
        for player in range(2):
            top = player * panel
            frame = rendering.fill_rect(frame, 0, top + panel - 1, width, top + panel, (0, 0, 0))
            for i in range(POLICY_SIZE):
                height = state.policies[player, i] * (panel - 6)
                x0 = i * slot + 4
                frame = rendering.fill_rect(
                    frame, x0, top + panel - 1 - height, x0 + slot - 8, top + panel - 1, colors[player]
                )
        progress = jnp.clip(state.time / jnp.maximum(params.num_steps, 1), 0.0, 1.0)
        frame = rendering.fill_rect(frame, 0, 2 * panel + 2, width, 2 * panel + bar, (220, 220, 220))
        return rendering.fill_rect(frame, 0, 2 * panel + 2, progress * width, 2 * panel + bar, (40, 160, 60))
