import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.envs as le
from lamella.envs import rendering

RED, BLACK = (255, 0, 0), (0, 0, 0)


def _painted(frame, color=RED):
    return np.all(np.asarray(frame) == color, axis=-1)


def test_canvas():
    frame = rendering.canvas(4, 6, (1, 2, 3))
    assert frame.shape == (4, 6, 3) and frame.dtype == jnp.uint8
    assert np.all(np.asarray(frame) == [1, 2, 3])


def test_fill_rect_pixels():
    # Pixel centres are at i + 0.5: the rectangle [1, 3] x [2, 4] covers columns 1, 2 and rows 2, 3.
    frame = rendering.fill_rect(rendering.canvas(6, 6), 3, 4, 1, 2, RED)
    expected = np.zeros((6, 6), bool)
    expected[2:4, 1:3] = True
    np.testing.assert_array_equal(_painted(frame), expected)
    assert np.all(np.asarray(frame)[~expected] == 255)


def test_fill_circle_pixels():
    frame = rendering.fill_circle(rendering.canvas(5, 5), 2.5, 2.5, 1.0, RED)
    expected = np.zeros((5, 5), bool)
    expected[2, 1:4] = expected[1:4, 2] = True  # the centre pixel and its 4 neighbours (distance 1)
    np.testing.assert_array_equal(_painted(frame), expected)


def test_draw_segment_pixels():
    frame = rendering.draw_segment(rendering.canvas(5, 8), 1.5, 2.5, 5.5, 2.5, 1.0, RED)
    expected = np.zeros((5, 8), bool)
    expected[2, 1:6] = True  # one pixel thick, from column 1 to column 5
    np.testing.assert_array_equal(_painted(frame), expected)


def test_fill_polygon_pixels():
    square = jnp.array([[1.0, 1.0], [4.0, 1.0], [4.0, 4.0], [1.0, 4.0]])
    frame = rendering.fill_polygon(rendering.canvas(6, 6), square, RED)
    expected = np.zeros((6, 6), bool)
    expected[1:4, 1:4] = True
    np.testing.assert_array_equal(_painted(frame), expected)
    triangle = jnp.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    painted = _painted(rendering.fill_polygon(rendering.canvas(6, 6), triangle, RED))
    # Pixel centre (x + .5, y + .5) is inside x + y < 6 - 1 (the centre sum x + y + 1 < 6).
    ys, xs = np.mgrid[0:6, 0:6]
    np.testing.assert_array_equal(painted, xs + ys + 1 < 6)


def test_primitives_under_jit_and_vmap():
    centres = jnp.array([1.5, 3.5, 5.5])
    frames = jax.jit(jax.vmap(lambda cx: rendering.fill_circle(rendering.canvas(4, 8), cx, 1.5, 0.5, RED)))(
        centres
    )
    assert frames.shape == (3, 4, 8, 3)
    for i, column in enumerate([1, 3, 5]):
        painted = _painted(frames[i])
        assert painted.sum() == 1 and painted[1, column]


@pytest.fixture(scope="module")
def episode():
    env, params = le.make("CartPole-v1", autoreset=False)
    keys = jax.random.split(jax.random.key(0), 6)
    _, states = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    return env, params, states


def test_frames_render_under_vmap(episode):
    env, params, states = episode
    frames = rendering.render_episode(env, params, states)
    assert frames.shape[0] == 6 and frames.shape[-1] == 3 and frames.dtype == np.uint8
    single = np.asarray(jax.jit(env.render)(jax.tree.map(lambda x: x[2], states), params))
    np.testing.assert_array_equal(frames[2], single)
    assert not np.all(frames == 255)  # something was drawn


def test_animate_writes_a_readable_gif(episode, tmp_path):
    iio = pytest.importorskip("imageio.v3")
    env, params, states = episode
    path = le.animate(env, params, states, tmp_path / "episode.gif", fps=10)
    assert path.endswith("episode.gif")
    frames = iio.imread(path, index=None)
    expected = rendering.render_episode(env, params, states)
    assert frames.shape[0] == 6 and frames.shape[1:3] == expected.shape[1:3]
    # GIF palettes are lossy in general; these frames have few colours, so they survive closely.
    assert np.abs(frames[..., :3].astype(int) - expected.astype(int)).mean() < 2.0
    assert [p.name for p in tmp_path.iterdir()] == ["episode.gif"]  # no temporary file left


def test_animate_refuses_bad_suffix(episode, tmp_path):
    env, params, states = episode
    with pytest.raises(ValueError, match=r"\.gif or \.mp4"):
        le.animate(env, params, states, tmp_path / "episode.png")
    assert not list(tmp_path.iterdir())
