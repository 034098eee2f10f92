"""Fixed memory-one strategies for the iterated two-action games, one table for every game form.

A memory-one strategy is five cooperation probabilities, in the order of
:class:`~lamella.envs.multi_agent.InfiniteMatrixGame`'s policies and
:func:`~lamella.envs.multi_agent.infinite_matrix_game.memory_one_values`:
``(start, CC, CD, DC, DD)``, each joint state seen from the strategy's own
side (own action first). The same array serves

* the infinite (exact) game, as a policy (:func:`strategy`), and
* the finite iterated game :class:`~lamella.envs.multi_agent.IteratedMatrixGame`,
  as a lamella ``Agent`` that reads one player's one-hot observation
  (``CC, CD, DC, DD, START``) and samples cooperate (0) or defect (1)
  (:func:`make_memory_one_agent`).

>>> from lamella.marl.shaping import strategy, make_memory_one_agent
>>> strategy("tit_for_tat")          # start C, then copy the other's last move
array([1., 1., 0., 1., 0.], dtype=float32)
>>> agent = make_memory_one_agent("tit_for_tat")
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents.fixed import make_scripted_agent
from lamella.agents.protocol import Agent
from lamella.envs.multi_agent.matrix_game import NUM_STATES, PAYOFFS, check_payoff

__all__ = [
    "STRATEGIES",
    "check_strategy_fits",
    "make_memory_one_agent",
    "memory_one",
    "strategy",
    "zd_extortion",
]

POLICY_SIZE = 5  # start, CC, CD, DC, DD
# Observation index (CC=0, CD=1, DC=2, DD=3, START=4) -> policy index (start=0, CC=1, ...).
_OBS_TO_POLICY = np.array([1, 2, 3, 4, 0])


def memory_one(start: float, cc: float, cd: float, dc: float, dd: float) -> np.ndarray:
    """A memory-one strategy from its five cooperation probabilities (each in ``[0, 1]``)."""
    probs = np.array([start, cc, cd, dc, dd], np.float32)
    if not np.all(np.isfinite(probs)) or np.any(probs < 0) or np.any(probs > 1):
        raise ValueError(
            f"memory_one: cooperation probabilities must be in [0, 1], got {probs.tolist()} "
            "(order: start, CC, CD, DC, DD)."
        )
    return probs


def zd_extortion(
    chi: float = 3.0, phi: float | None = None, payoff: Any = None, start: float = 1.0
) -> np.ndarray:
    """Press and Dyson's zero-determinant extortion strategy for a prisoner's dilemma.

    It enforces ``s_self - P = chi * (s_other - P)`` on the long-run payoffs,
    so against any co-player it gets ``chi`` times the co-player's surplus over
    mutual defection. ``phi`` scales the strategy; it must lie in
    ``(0, 1 / ((P - S) + chi (T - P))]``, half the upper bound when omitted.

    Args:
        chi: extortion factor, ``> 1``.
        phi: the scale, see above.
        payoff: ``(2, 2, 2)`` payoff (lamella layout); the prisoner's dilemma
            ``R, S, T, P`` are read from player 0's rewards. Pax's IPD by default.
        start: cooperation probability in the first round.
    """
    # Eagerly, also under a trace: STRATEGIES below calls this when the module is imported, and a
    # runner built inside jax.jit may import it first (a tracer has no float to read).
    with jax.ensure_compile_time_eval():
        game = np.asarray(check_payoff(PAYOFFS["prisoners_dilemma"] if payoff is None else payoff, "payoff"))
    reward, sucker = float(game[0, 0, 0]), float(game[0, 1, 0])
    temptation, punishment = float(game[1, 0, 0]), float(game[1, 1, 0])
    if not temptation > reward > punishment > sucker:
        raise ValueError(
            "zd_extortion: the payoff is not a prisoner's dilemma for player 0 (need T > R > P > S), "
            f"got R={reward}, S={sucker}, T={temptation}, P={punishment}."
        )
    if not 1 < float(chi) < np.inf:  # NaN too
        raise ValueError(f"zd_extortion: chi must be > 1 and finite (chi = 1 is tit-for-tat), got {chi}.")
    bound = 1.0 / ((punishment - sucker) + chi * (temptation - punishment))
    phi = bound / 2 if phi is None else float(phi)
    if not 0 < phi <= bound:
        raise ValueError(f"zd_extortion: phi must be in (0, {bound:.4g}] for chi={chi}, got {phi}.")
    return memory_one(
        start,
        1 - phi * (chi - 1) * (reward - punishment),
        1 - phi * ((punishment - sucker) + chi * (temptation - punishment)),
        phi * ((temptation - punishment) + chi * (punishment - sucker)),
        0.0,
    )


STRATEGIES: dict[str, np.ndarray] = {
    "all_c": memory_one(1, 1, 1, 1, 1),
    "all_d": memory_one(0, 0, 0, 0, 0),
    "random": memory_one(0.5, 0.5, 0.5, 0.5, 0.5),
    "tit_for_tat": memory_one(1, 1, 0, 1, 0),
    "suspicious_tit_for_tat": memory_one(0, 1, 0, 1, 0),
    "generous_tit_for_tat": memory_one(1, 1, 1 / 3, 1, 1 / 3),
    # Defect forever once the other defected: from CD, DC or DD it defects, so CC never recurs.
    "grim_trigger": memory_one(1, 1, 0, 0, 0),
    "win_stay_lose_shift": memory_one(1, 1, 0, 0, 1),
    "zd_extortion": zd_extortion(),
}
# Pax's names for its fixed IPD agents.
STRATEGIES["altruistic"] = STRATEGIES["all_c"]
STRATEGIES["defect"] = STRATEGIES["all_d"]


def strategy(spec: str | Any) -> np.ndarray:
    """The cooperation probabilities ``(start, CC, CD, DC, DD)`` of a named strategy or of an array."""
    if isinstance(spec, str):
        key = spec.lower().replace("-", "_")
        if key not in STRATEGIES:
            raise ValueError(
                f"Unknown strategy {spec!r}; known: {', '.join(sorted(STRATEGIES))}, "
                "or pass five cooperation probabilities (start, CC, CD, DC, DD)."
            )
        return STRATEGIES[key].copy()
    try:
        probs = np.asarray(spec, np.float32)
    except (TypeError, ValueError):
        probs = None
    if probs is None or probs.shape != (POLICY_SIZE,):
        got = f"shape {probs.shape}" if probs is not None and probs.shape else f"{spec!r}"[:80]
        raise ValueError(
            f"A memory-one strategy is a name ({', '.join(sorted(STRATEGIES))}) or {POLICY_SIZE} cooperation "
            f"probabilities (start, CC, CD, DC, DD), got {got} ({type(spec).__name__})."
        )
    return memory_one(*probs.tolist())


def check_strategy_fits(observation_space: Any, who: str = "memory-one strategy") -> None:
    """Raise unless one player's observations are the iterated game's one-hot over 5 states."""
    shape = tuple(getattr(observation_space, "shape", ()))
    if shape[-1:] != (NUM_STATES,):
        raise ValueError(
            f"A {who} plays a two-action iterated matrix game whose per-player observation is a one-hot "
            f"over {NUM_STATES} states (CC, CD, DC, DD, START), as IteratedMatrixGame-v0's; this env's "
            f"observation space has shape {shape}. Use a learning agent for this game instead."
        )


def make_memory_one_agent(spec: str | Any, observation_space: Any = None) -> Agent:
    """A fixed memory-one strategy as a lamella ``Agent`` on one player's iterated-game observations.

    Args:
        spec: a name in :data:`STRATEGIES` or five cooperation probabilities.
        observation_space: if given, checked now with :func:`check_strategy_fits`.

    The agent takes a batch of one-hot observations ``(batch, 5)`` and returns
    int32 actions ``(batch,)``: 0 (cooperate) with the strategy's probability
    for the observed state, else 1 (defect).
    """
    if observation_space is not None:
        check_strategy_fits(observation_space)
    by_obs = jnp.asarray(strategy(spec)[_OBS_TO_POLICY])

    def act(key: jax.Array, obs: jax.Array) -> jax.Array:
        cooperate = obs @ by_obs
        defect = jax.random.uniform(key, cooperate.shape) >= cooperate
        return defect.astype(jnp.int32)

    return make_scripted_agent(act, batched=True, stochastic=True)
