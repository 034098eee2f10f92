"""Exact-gradient learners on the infinitely iterated matrix game: naive learner, LOLA, fixed strategies.

A learner's parameters are five logits ``theta`` (start, CC, CD, DC, DD, each
joint state from the learner's own side); ``sigmoid(theta)`` is its memory-one
policy, the probability of cooperating (action 0).
:func:`~lamella.envs.multi_agent.infinite_matrix_game.memory_one_values` gives
both players' exact normalised discounted values ``V`` (:func:`exact_values`
computes the same formula in a form that differentiates cheaply), and learners
follow the gradients of the unnormalised returns ``R = V / (1 - gamma)``
(:func:`discounted_returns`, the scale of M-FOS's and LOLA's exact baselines):

* :func:`make_naive_learner`: ``theta += lr * grad_theta R_self(theta, theta_other)``.
* :func:`make_lola_learner`: exact LOLA (Foerster et al., 2018) in the variant
  M-FOS's baselines use: gradient ascent on the first-order look-ahead
  ``R_self + lookahead_lr * <grad_other R_other, grad_other R_self>``,
  differentiated through *both* factors of the correction term.
* :func:`make_fixed_learner`: a fixed strategy from
  :mod:`lamella.marl.shaping.strategies` as logits that never change.

Every learner is an :class:`ExactLearner`, two pure functions, so any two
compose (:func:`make_exact_play` plays a batch of games between them, jit and
vmap safe)::

    import jax
    from lamella.marl.shaping import exact

    play = exact.make_exact_play(exact.make_lola_learner(), exact.make_naive_learner(), batch_size=256)
    out = jax.jit(play)(jax.random.key(0), exact.ExactGame.prisoners_dilemma())
    out["reward"].mean(axis=(0, 1))  # mean per-step reward of (LOLA, NL)

The defaults follow the exact-gradient setup of M-FOS's baselines: ``theta ~ N(0, 1)``,
learning rate 1, simultaneous updates, one warm-up update before the first
recorded step, discount 0.96.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lamella.agents.config import is_swept
from lamella.envs.multi_agent.infinite_matrix_game import solve_dominant
from lamella.envs.multi_agent.matrix_game import PAYOFFS, check_payoff
from lamella.marl.shaping.strategies import strategy

__all__ = [
    "ExactGame",
    "ExactLearner",
    "discounted_returns",
    "exact_values",
    "make_exact_play",
    "make_fixed_learner",
    "make_lola_learner",
    "make_naive_learner",
    "swap_roles",
]

POLICY_SIZE = 5
# Player 1's own-side index of each joint state in player 0's order CC, CD, DC, DD.
_SWAP_ROLES = np.array([0, 2, 1, 3])
#: Logit magnitude of a deterministic fixed strategy (as Pax writes tit-for-tat, ``20 * [1, -1, ...]``).
FIXED_LOGIT = 20.0


def swap_roles(payoff: jax.typing.ArrayLike) -> jax.Array:
    """The payoff seen from player 1: ``swapped[a1, a0] = (r1, r0)`` for ``payoff[a0, a1] = (r0, r1)``."""
    payoff = check_payoff(payoff, "swap_roles(payoff=...)")
    return jnp.transpose(payoff, (1, 0, 2))[..., ::-1]


class ExactGame(NamedTuple):
    """The infinite game from one player's side (a pytree of traced values; vmappable).

    Build it with :meth:`make` (or :meth:`prisoners_dilemma`), which checks the payoff and
    ``gamma``; a game built with the bare constructor is checked where it is used
    (:func:`exact_values`, the learners' ``update``, :func:`make_exact_play`'s ``play``) while its
    values are concrete. A traced game (passed into ``jit``, a sweep under ``vmap``) is not read.

    Attributes:
        payoff: float32 ``(2, 2, 2)``, ``payoff[a_self, a_other] = (r_self, r_other)``.
        gamma: float32 ``()``, discount of the infinite game, in ``[0, 1)``.
    """

    payoff: jax.Array
    gamma: jax.Array

    @classmethod
    def make(cls, payoff: Any = None, gamma: float = 0.96) -> ExactGame:
        """Check and build a game; ``payoff`` defaults to Pax's prisoner's dilemma.

        Raises:
            ValueError: a payoff that is not ``(2, 2, 2)`` finite numbers, or a concrete ``gamma``
                (a Python, NumPy or JAX number) outside ``[0, 1)``; a traced one is not checked.
        """
        payoff = PAYOFFS["prisoners_dilemma"] if payoff is None else payoff
        checked = check_payoff(payoff, "ExactGame.make(payoff=...)")
        _check_gamma(gamma, "ExactGame.make")
        return cls(checked, jnp.asarray(gamma, jnp.float32))

    @classmethod
    def prisoners_dilemma(cls, gamma: float = 0.96) -> ExactGame:
        """Pax's IPD: CC (-1, -1), CD (-3, 0), DC (0, -3), DD (-2, -2)."""
        return cls.make(PAYOFFS["prisoners_dilemma"], gamma)

    def swapped(self) -> ExactGame:
        """The same game from the other player's side."""
        return ExactGame(swap_roles(self.payoff), self.gamma)


def _check_gamma(gamma: Any, where: str, fix: str = "") -> None:
    """Raise unless a concrete ``gamma`` (a Python, NumPy or JAX number; any shape, as a batch of
    games has) is in ``[0, 1)``. A traced one (a sweep under jit or vmap) cannot be read here and
    is not checked."""
    if isinstance(gamma, (str, bytes)):
        raise TypeError(f"{where}: gamma must be a number in [0, 1), got {_value_text(gamma)}.")
    try:
        values = np.asarray(gamma, np.float64)
    except jax.errors.TracerArrayConversionError:
        return
    except (TypeError, ValueError):
        raise TypeError(f"{where}: gamma must be a number in [0, 1), got {_value_text(gamma)}.") from None
    if not ((values >= 0) & (values < 1)).all():  # NaN is outside too
        shown = np.round(values, 6)
        raise ValueError(
            f"{where}: gamma must be in [0, 1) (the infinite sum diverges at 1), "
            f"got {shown.item() if shown.ndim == 0 else shown.tolist()}.{fix}"
        )


def _check_game(game: ExactGame, where: str) -> None:
    """What :meth:`ExactGame.make` checks, for a game built with the bare constructor
    (``ExactGame(payoff, 1.0)``) where it is used; traced values pass unread."""
    check_payoff(game.payoff, f"{where}(game.payoff)")
    _check_gamma(
        game.gamma,
        where,
        " Build games with ExactGame.make(payoff, gamma), which checks both when it is called.",
    )


def _joint(coop_0: jax.Array, coop_1: jax.Array) -> jax.Array:
    # Distribution over CC, CD, DC, DD from both players' cooperation probabilities.
    return jnp.stack(
        [coop_0 * coop_1, coop_0 * (1 - coop_1), (1 - coop_0) * coop_1, (1 - coop_0) * (1 - coop_1)], axis=-1
    )


def exact_values(theta_self: jax.Array, theta_other: jax.Array, game: ExactGame) -> jax.Array:
    """``(V_self, V_other)``, float32 ``(2,)``: exact normalised values of two logit policies.

    ``theta_self`` and ``theta_other`` are float ``(5,)`` logits (start, CC,
    CD, DC, DD from each owner's side); ``game`` is seen from ``self``'s side.
    The formula is :func:`~lamella.envs.multi_agent.infinite_matrix_game.memory_one_values`'s,
    ``(1 - gamma) d0 (I - gamma P)^-1 r``, with the 4x4 system solved by
    :func:`~lamella.envs.multi_agent.infinite_matrix_game.solve_dominant`: the
    learners differentiate it up to three times (LOLA), and each derivative is
    another solve of the same kind, with no call into LAPACK.

    Raises:
        ValueError: a logit shape other than ``(5,)``, or a concrete ``game`` that
            :meth:`ExactGame.make` would have refused (``gamma`` outside ``[0, 1)``, a payoff
            that is not ``(2, 2, 2)`` finite numbers).
    """
    p = jax.nn.sigmoid(jnp.asarray(theta_self, jnp.float32))
    q = jax.nn.sigmoid(jnp.asarray(theta_other, jnp.float32))
    if p.shape != (POLICY_SIZE,) or q.shape != (POLICY_SIZE,):
        raise ValueError(
            f"exact_values: logits must have shape ({POLICY_SIZE},) (start, CC, CD, DC, DD), "
            f"got {p.shape} and {q.shape}."
        )
    _check_game(game, "exact_values")
    payoff = jnp.asarray(game.payoff, jnp.float32)
    gamma = jnp.asarray(game.gamma, jnp.float32)
    start = _joint(p[0], q[0])  # (4,)
    # The other's CD and DC swap: its own-side CD is this player's DC.
    transition = _joint(p[1:], q[1:][_SWAP_ROLES])  # (4, 4), rows: current state, columns: next
    occupancy = solve_dominant((jnp.eye(4) - gamma * transition).T, start)
    return (1 - gamma) * occupancy @ payoff.reshape(4, 2)


def discounted_returns(theta_self: jax.Array, theta_other: jax.Array, game: ExactGame) -> jax.Array:
    """``exact_values / (1 - gamma)``: the unnormalised discounted returns the learners ascend.

    M-FOS's and LOLA's exact-gradient baselines take their steps on this scale
    (with learning rate 1), so a learning rate here means what it means there.
    """
    return exact_values(theta_self, theta_other, game) / (1 - jnp.asarray(game.gamma, jnp.float32))


class ExactLearner(NamedTuple):
    """A learner on the exact game, as pure functions (jit, vmap and grad safe).

    Attributes:
        init: ``init(key) -> theta``, float32 ``(5,)`` logits.
        update: ``update(theta_self, theta_other, game) -> theta_self``: one
            learning step against the other's current logits, ``game`` from
            this learner's side (:meth:`ExactGame.swapped` for player 1).
    """

    init: Callable[[jax.Array], jax.Array]
    update: Callable[[jax.Array, jax.Array, ExactGame], jax.Array]


def _check_lr(name: str, value: Any) -> None:
    """Raise unless ``value`` is a finite number >= 0: a Python or NumPy number or a concrete 0-d
    array. A traced value (a sweep over learning rates under jit or vmap) cannot be read here and
    is not checked: the caller keeps it in range."""
    if isinstance(value, (str, bytes, bool, np.bool_)) or np.ndim(value) != 0:
        raise TypeError(f"{name} must be one number, e.g. 1.0, got {_value_text(value)}.")
    try:
        if is_swept(value):
            return
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be one number, e.g. 1.0, got {_value_text(value)}.") from None
    if not np.isfinite(number) or number < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {number}.")


def _check_count(name: str, value: Any, minimum: int) -> None:
    """Raise unless ``value`` is a whole number >= ``minimum`` (``int(2.5)`` would run 2 steps)."""
    whole = not isinstance(value, (str, bytes, bool, np.bool_)) and np.ndim(value) == 0
    try:
        whole = whole and float(value).is_integer()  # False for NaN and inf
    except (TypeError, ValueError):
        whole = False
    if not whole:
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {_value_text(value)}.")
    if int(value) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}.")


def _value_text(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"[:120]


def _normal_init(init_scale: float) -> Callable[[jax.Array], jax.Array]:
    def init(key: jax.Array) -> jax.Array:
        return init_scale * jax.random.normal(key, (POLICY_SIZE,), jnp.float32)

    return init


def make_naive_learner(lr: float = 1.0, init_scale: float = 1.0) -> ExactLearner:
    """Naive learner: gradient ascent on its own exact return, the other held fixed.

    Args:
        lr: step size of ``theta += lr * grad R_self``, ``R`` the unnormalised
            discounted return (:func:`discounted_returns`).
        init_scale: ``theta ~ N(0, init_scale^2)`` at ``init``.

    Raises:
        TypeError: ``lr`` or ``init_scale`` is not a number.
        ValueError: either is negative, infinite or NaN (a traced value is not checked).
    """
    _check_lr("make_naive_learner: lr", lr)
    _check_lr("make_naive_learner: init_scale", init_scale)

    def update(theta: jax.Array, other: jax.Array, game: ExactGame) -> jax.Array:
        grad = jax.grad(lambda t: discounted_returns(t, other, game)[0])(theta)
        return theta + lr * grad

    return ExactLearner(_normal_init(init_scale), update)


def make_lola_learner(
    lr: float = 1.0, lookahead_lr: float | None = None, init_scale: float = 1.0
) -> ExactLearner:
    """Exact LOLA: ascend ``R_self`` after the other's anticipated naive step (first order).

    The objective is ``R_self + lookahead_lr * <grad_o R_other, grad_o R_self>``
    (``R`` the unnormalised discounted returns, :func:`discounted_returns`;
    gradients with respect to the other's logits ``o``), whose gradient in
    ``theta`` is taken through both inner gradients, as in M-FOS's LOLA
    baseline. (Foerster et al.'s ``train_exact`` holds ``grad_o V_self`` fixed
    instead.)

    Learning rates may be traced (one compiled program for a sweep, or for
    NL and LOLA at once: ``lookahead_lr=0`` is the naive learner).

    Args:
        lr: step size of the learner's own update.
        lookahead_lr: the step size it assumes for the other's naive update
            (default: ``lr``).
        init_scale: ``theta ~ N(0, init_scale^2)`` at ``init``.

    Raises:
        TypeError: ``lr``, ``lookahead_lr`` or ``init_scale`` is not a number.
        ValueError: one is negative, infinite or NaN (a traced value is not checked).
    """
    _check_lr("make_lola_learner: lr", lr)
    lookahead = lr if lookahead_lr is None else lookahead_lr
    _check_lr("make_lola_learner: lookahead_lr", lookahead)
    _check_lr("make_lola_learner: init_scale", init_scale)

    def lookahead_value(theta: jax.Array, other: jax.Array, game: ExactGame) -> jax.Array:
        own = jax.grad(lambda o: discounted_returns(theta, o, game)[0])(other)
        theirs = jax.grad(lambda o: discounted_returns(theta, o, game)[1])(other)
        return discounted_returns(theta, other, game)[0] + lookahead * jnp.dot(theirs, own)

    def update(theta: jax.Array, other: jax.Array, game: ExactGame) -> jax.Array:
        return theta + lr * jax.grad(lookahead_value)(theta, other, game)

    return ExactLearner(_normal_init(init_scale), update)


def make_fixed_learner(spec: str | Any) -> ExactLearner:
    """A fixed memory-one strategy (a name in :data:`~lamella.marl.shaping.STRATEGIES` or 5 probabilities).

    Its logits are ``logit(p)`` clipped to ``+-20`` (probabilities 0 and 1 become
    ``-20`` and ``20``); ``update`` returns them unchanged.
    """
    probs = np.asarray(strategy(spec), np.float64)
    with np.errstate(divide="ignore"):
        logits = np.log(probs) - np.log1p(-probs)
    theta = jnp.asarray(np.clip(logits, -FIXED_LOGIT, FIXED_LOGIT), jnp.float32)

    def init(key: jax.Array) -> jax.Array:
        return theta

    def update(theta_self: jax.Array, theta_other: jax.Array, game: ExactGame) -> jax.Array:
        return theta_self

    return ExactLearner(init, update)


def make_exact_play(
    learner_0: ExactLearner,
    learner_1: ExactLearner,
    num_steps: int = 100,
    batch_size: int = 1,
    warmup_updates: int = 1,
) -> Callable[[jax.Array, ExactGame], dict[str, jax.Array]]:
    """``play(key, game) -> metrics``: a batch of ``batch_size`` games between two learners.

    Each game draws both learners' ``init`` from its own key, takes
    ``warmup_updates`` simultaneous updates, then records ``num_steps`` steps:
    the exact values of the current pair, then both update simultaneously
    (each against the other's logits before the step).

    ``play`` is pure (jit it, vmap it over keys or games); ``game`` is player 0's side.

    Returns:
        ``reward``: float32 ``(num_steps, batch_size, 2)``, per-step values of
        players 0 and 1; ``policy``: float32 ``(num_steps, batch_size, 2, 5)``,
        the cooperation probabilities played.

    Raises:
        TypeError: a learner that is not an :class:`ExactLearner` (a name, an uncalled factory).
        ValueError: ``num_steps`` or ``batch_size`` below 1, ``warmup_updates`` below 0, or one
            of them not a whole number.
    """
    for name, learner in (("learner_0", learner_0), ("learner_1", learner_1)):
        if not (callable(getattr(learner, "init", None)) and callable(getattr(learner, "update", None))):
            # A factory passed uncalled reads best by its name (make_lola_learner, not <function ...>).
            shown = getattr(learner, "__name__", None) if callable(learner) else None
            raise TypeError(
                f"make_exact_play: {name} must be an ExactLearner (init, update), got "
                f"{shown or repr(learner)[:80]} ({type(learner).__name__}); build one with "
                "make_naive_learner(), make_lola_learner() or make_fixed_learner(name)."
            )
    for name, value, minimum in (
        ("num_steps", num_steps, 1),
        ("batch_size", batch_size, 1),
        ("warmup_updates", warmup_updates, 0),
    ):
        _check_count(f"make_exact_play: {name}", value, minimum)

    def both_update(thetas: tuple[jax.Array, jax.Array], game: ExactGame) -> tuple[jax.Array, jax.Array]:
        theta_0, theta_1 = thetas
        if learner_0 is learner_1:
            # One learner on both sides: one copy of its update, vmapped over the two players.
            games = jax.tree.map(lambda a, b: jnp.stack([a, b]), game, game.swapped())
            new = jax.vmap(learner_0.update)(
                jnp.stack([theta_0, theta_1]), jnp.stack([theta_1, theta_0]), games
            )
            return new[0], new[1]
        return learner_0.update(theta_0, theta_1, game), learner_1.update(theta_1, theta_0, game.swapped())

    def one_game(key: jax.Array, game: ExactGame) -> dict[str, jax.Array]:
        key_0, key_1 = jax.random.split(key)
        thetas = (learner_0.init(key_0), learner_1.init(key_1))

        def step(
            thetas: tuple[jax.Array, jax.Array], _: None
        ) -> tuple[tuple[jax.Array, jax.Array], dict[str, jax.Array]]:
            values = exact_values(thetas[0], thetas[1], game)
            policy = jax.nn.sigmoid(jnp.stack(thetas))
            return both_update(thetas, game), {"reward": values, "policy": policy}

        # The warm-up updates run in the same scan (one copy of the update in the compiled
        # program instead of two); their records are dropped.
        _, out = jax.lax.scan(step, thetas, None, length=int(num_steps) + int(warmup_updates))
        return jax.tree.map(lambda x: x[int(warmup_updates) :], out)

    def play(key: jax.Array, game: ExactGame) -> dict[str, jax.Array]:
        _check_game(game, "play")
        keys = jax.random.split(key, int(batch_size))
        out = jax.vmap(one_game, in_axes=(0, None))(keys, game)
        return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), out)

    return play
