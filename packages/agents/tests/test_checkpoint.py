"""Checkpoints: round trips (typed keys included), structure checks, atomic writes, no code on load."""

from __future__ import annotations

import os
import pickle
from typing import NamedTuple

import jax
import jax.numpy as jnp
import msgpack
import numpy as np
import pytest

from lamella.agents import _files
from lamella.agents.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    read_metadata,
    save_checkpoint,
)


class Inner(NamedTuple):
    count: jax.Array
    flags: jax.Array


def make_state(seed: int = 0):
    key = jax.random.key(seed)
    return {
        "params": {"w": jax.random.normal(key, (3, 4)), "b": jnp.arange(4, dtype=jnp.float32)},
        "half": jnp.linspace(0, 1, 5, dtype=jnp.bfloat16),
        "inner": Inner(jnp.asarray(7, jnp.int32), jnp.array([True, False])),
        "key": jax.random.split(key, 3),  # typed keys with a batch axis
        "rbg_key": jax.random.key(seed, impl="rbg"),
        "legacy_key": jax.random.PRNGKey(seed),  # raw uint32 data, no key type
        "big": jnp.asarray([2**40], jnp.int64) if jax.config.jax_enable_x64 else jnp.asarray([7], jnp.uint8),
    }


def assert_same(a, b):
    leaves_a, tree_a = jax.tree_util.tree_flatten(a)
    leaves_b, tree_b = jax.tree_util.tree_flatten(b)
    assert tree_a == tree_b
    for x, y in zip(leaves_a, leaves_b):
        assert x.dtype == y.dtype and x.shape == y.shape
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            assert jax.random.key_impl(x) == jax.random.key_impl(y)
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_round_trip_with_typed_keys(tmp_path):
    state = make_state()
    metadata = {"config": {"lr": 0.1, "sizes": [64, 64]}, "iteration": 5, "note": "ok", "none": None}
    path = save_checkpoint(tmp_path, state, metadata, step=5)
    assert os.path.basename(path) == "checkpoint_000000005.msgpack"
    restored, meta = load_checkpoint(path, jax.eval_shape(lambda: make_state(1)))
    assert_same(state, restored)
    assert meta == metadata
    assert read_metadata(path) == metadata
    # The restored keys draw the same numbers as the originals.
    np.testing.assert_array_equal(
        jax.random.normal(restored["key"][1], (4,)), jax.random.normal(state["key"][1], (4,))
    )
    np.testing.assert_array_equal(
        jax.random.uniform(restored["rbg_key"], (3,)), jax.random.uniform(state["rbg_key"], (3,))
    )
    # A concrete target works as well as an abstract one.
    restored_again, _ = load_checkpoint(path, make_state(2))
    assert_same(state, restored_again)


def test_a_folder_loads_its_newest_checkpoint(tmp_path):
    """A run directory (checkpoints in its checkpoints/) or the checkpoints folder itself; before,
    IsADirectoryError."""
    state = make_state()
    folder = tmp_path / "run" / "checkpoints"
    save_checkpoint(folder, state, {"iteration": 1}, step=1)
    save_checkpoint(folder, state, {"iteration": 2}, step=2)
    shapes = jax.eval_shape(lambda: make_state(1))
    for given in (tmp_path / "run", folder):
        restored, meta = load_checkpoint(given, shapes)
        assert meta == {"iteration": 2} and read_metadata(given) == {"iteration": 2}
        assert_same(state, restored)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"is a folder without a checkpoint \(checkpoint_\*\.msgpack"):
        load_checkpoint(tmp_path / "empty", shapes)
    with pytest.raises(CheckpointError, match=r"^No checkpoint at .*nope\.msgpack: give a checkpoint file"):
        read_metadata(tmp_path / "nope.msgpack")


def test_a_damaged_checkpoint_names_the_one_before_it(tmp_path):
    """A cut or emptied newest checkpoint (a copy that stopped, a full disk) names the checkpoint
    before it, from which the run resumes; before, the message ended at msgpack's words."""
    folder = tmp_path / "run" / "checkpoints"
    for step in (1, 2, 3):
        save_checkpoint(folder, make_state(), {"iteration": step}, step=step)
    newest = folder / "checkpoint_000000003.msgpack"
    before = str(folder / "checkpoint_000000002.msgpack")
    for damaged in (newest.read_bytes()[:50], b""):
        newest.write_bytes(damaged)
        for given in (tmp_path / "run", newest):
            with pytest.raises(CheckpointError) as info:
                read_metadata(given)
            message = str(info.value)
            assert "checkpoint_000000003.msgpack is not a readable lamella checkpoint" in message
            assert f"The checkpoint before it: {before} (resume from it: --resume {before})." in message
    # The oldest has none before it: the message says nothing of one.
    oldest = folder / "checkpoint_000000001.msgpack"
    oldest.write_bytes(b"")
    with pytest.raises(CheckpointError) as info:
        read_metadata(oldest)
    assert "before it" not in str(info.value)


def test_structure_mismatches_are_reported(tmp_path):
    state = make_state()
    path = save_checkpoint(tmp_path, state, {}, step=0)
    wrong_shape = dict(state, params={"w": jnp.zeros((3, 5)), "b": state["params"]["b"]})
    with pytest.raises(CheckpointError, match=r"\['params'\]\['w'\].*target float32\[3, 5\]"):
        load_checkpoint(path, wrong_shape)
    wrong_dtype = dict(state, half=state["half"].astype(jnp.float32))
    with pytest.raises(CheckpointError, match=r"\['half'\]"):
        load_checkpoint(path, wrong_dtype)
    missing = dict(state, extra=jnp.zeros(()))
    with pytest.raises(CheckpointError, match=r"missing.*extra"):
        load_checkpoint(path, missing)
    key_as_numbers = dict(state, key=jnp.zeros((3, 2), jnp.uint32))
    with pytest.raises(CheckpointError, match="holds PRNG keys"):
        load_checkpoint(path, key_as_numbers)
    numbers_as_key = dict(state, legacy_key=jax.random.key(0))
    with pytest.raises(CheckpointError, match="target is a PRNG key"):
        load_checkpoint(path, numbers_as_key)


def test_non_array_leaf_is_refused(tmp_path):
    with pytest.raises(TypeError, match=r"\['name'\].*str"):
        save_checkpoint(tmp_path, {"name": "x", "a": jnp.zeros(())}, {}, step=0)


def test_loading_runs_no_code(tmp_path):
    # A pickle that would run code if it were unpickled: the loader must refuse it, not run it.
    class Boom:
        def __reduce__(self):
            return (os.makedirs, (str(tmp_path / "pwned"),))

    bad = tmp_path / "checkpoint_000000001.msgpack"
    bad.write_bytes(pickle.dumps(Boom()))
    with pytest.raises(CheckpointError):
        load_checkpoint(bad, {"a": jnp.zeros(())})
    assert not (tmp_path / "pwned").exists()
    # msgpack extension types stay inert data; the header check refuses the file.
    other = tmp_path / "other.msgpack"
    other.write_bytes(msgpack.packb({"format": msgpack.ExtType(1, b"os.system")}, use_bin_type=True))
    with pytest.raises(CheckpointError, match="not a lamella checkpoint"):
        read_metadata(other)
    wrong_version = tmp_path / "v9.msgpack"
    wrong_version.write_bytes(msgpack.packb({"format": "lamella-checkpoint", "format_version": 9}))
    with pytest.raises(CheckpointError, match="version 9"):
        read_metadata(wrong_version)


def test_keep_last_k(tmp_path):
    state = {"x": jnp.zeros(())}
    for step in [1, 2, 10, 11, 30]:
        save_checkpoint(tmp_path, {"x": jnp.asarray(float(step))}, {"step": step}, step=step, keep=3)
    names = [os.path.basename(p) for p in list_checkpoints(tmp_path)]
    assert names == [
        "checkpoint_000000010.msgpack",
        "checkpoint_000000011.msgpack",
        "checkpoint_000000030.msgpack",
    ]
    restored, meta = load_checkpoint(latest_checkpoint(tmp_path), state)
    assert float(restored["x"]) == 30.0 and meta["step"] == 30
    save_checkpoint(tmp_path, state, {}, step=31, keep=None)
    assert len(list_checkpoints(tmp_path)) == 4
    assert latest_checkpoint(tmp_path / "nowhere") is None


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_crash_mid_write_leaves_the_old_file(tmp_path, monkeypatch, failing):
    path = save_checkpoint(tmp_path, {"x": jnp.asarray(1.0)}, {"v": 1}, step=3)
    before = open(path, "rb").read()

    def crash(*args, **kwargs):
        raise OSError("disk died")

    monkeypatch.setattr(_files.os, failing, crash)
    with pytest.raises(OSError, match="disk died"):
        save_checkpoint(tmp_path, {"x": jnp.asarray(2.0)}, {"v": 2}, step=3)
    monkeypatch.undo()
    assert open(path, "rb").read() == before
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask  # the mode a plain open() gives
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_000000003.msgpack"]  # no temporary file left
    restored, meta = load_checkpoint(path, {"x": jnp.zeros(())})
    assert float(restored["x"]) == 1.0 and meta == {"v": 1}


def test_crash_while_writing_bytes_leaves_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "metrics.json"
    _files.atomic_write_text(target, "old")
    real_fdopen = os.fdopen

    class Broken:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()
            return False

        def write(self, data):
            self.handle.write(data[: len(data) // 2])
            raise KeyboardInterrupt  # the process is stopped half way through the write

    monkeypatch.setattr(_files.os, "fdopen", lambda fd, mode: Broken(real_fdopen(fd, mode)))
    with pytest.raises(KeyboardInterrupt):
        _files.atomic_write_text(target, "new content that is long")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["metrics.json"]
