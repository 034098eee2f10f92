"""Helpers shared by the test files."""

import numpy as np
import pytest


def _framed_joint_actions(frames: np.ndarray) -> np.ndarray:
    """Which joint action each frame of an iterated matrix game's ``render`` frames (the cell with
    the thick black border: row = player 0's action, column = player 1's; 0 cooperate): bool
    ``(..., 2, 2)``, read from the pixel 3 px inside each 64 px cell's corner (black only there)."""
    corners = np.asarray(frames)[..., 3:128:64, 3:128:64, :]  # (..., row, column, RGB)
    return np.all(corners == 0, axis=-1)


@pytest.fixture
def framed_joint_actions():
    """:func:`_framed_joint_actions`: the joint actions an iterated matrix game's GIF shows."""
    return _framed_joint_actions


def _drawn_policies(frames: np.ndarray) -> np.ndarray:
    """The two policies the infinite matrix game's ``render`` draws (player 0's blue bars on top,
    player 1's red ones below), read back from the bars' heights: float ``(..., 2, 5)`` (start,
    CC, CD, DC, DD), to within one pixel of 58 (a bar's full height)."""
    columns = np.asarray(frames)[..., :, 13:130:26, :]  # the middle column of each of the five bars
    colors = np.array([[40, 70, 200], [200, 50, 40]])
    heights = [np.all(columns[..., 64 * p : 64 * p + 63, :, :] == colors[p], axis=-1).sum(-2) for p in (0, 1)]
    return np.stack(heights, axis=-2) / 58.0


@pytest.fixture
def drawn_policies():
    """:func:`_drawn_policies`: the policies an infinite matrix game's GIF shows."""
    return _drawn_policies


def _drawn_values(frames: np.ndarray) -> np.ndarray:
    """Each drawn pair's exact per-step values on Pax's IPD (discount 0.96), computed from the
    policies :func:`_drawn_policies` reads (clipped to [0.01, 0.99]): float ``(..., 2)``, player
    0's then player 1's."""
    import jax
    import jax.numpy as jnp

    from lamella.marl.shaping.exact import ExactGame, exact_values

    pairs = np.clip(_drawn_policies(frames), 0.01, 0.99)
    logits = jnp.asarray(np.log(pairs) - np.log1p(-pairs)).reshape(-1, 2, 5)
    game = ExactGame.prisoners_dilemma()
    values = jax.jit(jax.vmap(lambda pair: exact_values(pair[0], pair[1], game)))(logits)
    return np.asarray(values).reshape(*pairs.shape[:-2], 2)


@pytest.fixture
def drawn_values():
    """:func:`_drawn_values`: the values of the pairs an infinite IPD's GIF shows."""
    return _drawn_values
