"""Recording experience with flashbax's Vault and reading it back, in a temporary folder."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lamella.buffers as lb

NUM_ENVS, T, CHUNK, CHUNKS = 2, 6, 4, 4  # 16 steps through a 6-slot buffer: wraps around


def goal_obs(x):
    return {
        "observation": x[..., None] * jnp.ones(3),
        "achieved_goal": x[..., None],
        "desired_goal": -x[..., None],
    }


def stream():
    steps = CHUNK * CHUNKS
    rng = np.random.default_rng(0)
    code = np.arange(steps, dtype=np.float32) + 100 * np.arange(NUM_ENVS, dtype=np.float32)[:, None]
    x = jnp.asarray(code)
    return lb.Transition(
        obs=goal_obs(x),
        action=jnp.asarray(rng.integers(0, 5, (NUM_ENVS, steps)), jnp.int32),
        reward=jnp.asarray(rng.normal(size=(NUM_ENVS, steps)), jnp.float32),
        terminated=jnp.asarray(rng.random((NUM_ENVS, steps)) < 0.2),
        truncated=jnp.asarray(rng.random((NUM_ENVS, steps)) < 0.2),
        next_obs=goal_obs(x + 0.5),
        extras={"is_success": jnp.asarray(rng.random((NUM_ENVS, steps)) < 0.5)},
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    directory = tmp_path_factory.mktemp("vaults")
    data = stream()
    buffer = lb.make_episode_buffer(num_envs=NUM_ENVS, max_length_time_axis=T, sample_batch_size=8)
    state = buffer.init(jax.tree.map(lambda x: x[0, 0], data))
    vault = lb.open_vault(directory, "demo", buffer_state=state, metadata={"env": "Test-v0"})
    add = jax.jit(buffer.add)
    written = []
    for c in range(CHUNKS):  # the host driver records between compiled chunks
        state = add(state, jax.tree.map(lambda x: x[:, c * CHUNK : (c + 1) * CHUNK], data))
        written.append(lb.record(vault, state))
    return directory, data, buffer, state, written


def test_round_trip_is_identical(recorded):
    directory, data, _, state, written = recorded
    assert written == [CHUNK] * CHUNKS
    reopened = lb.open_vault(directory, "demo", buffer_state=state)
    back = lb.read_vault(reopened)
    assert type(back) is lb.Transition and jax.tree.structure(back) == jax.tree.structure(data)
    jax.tree.map(np.testing.assert_array_equal, back, data)
    jax.tree.map(lambda a, b: assert_dtype(a, b), back, data)
    last = lb.read_vault(reopened, timesteps=3)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b[:, -3:]), last, data)


def assert_dtype(a, b):
    assert a.dtype == b.dtype


def test_read_without_structure_gives_dicts(recorded):
    directory = recorded[0]
    back = lb.read_vault(lb.open_vault(directory, "demo"))
    assert isinstance(back, dict) and set(back) >= {"obs", "reward", "next_obs", "extras"}


def logical_view(state):
    """Stored steps in time order, and each step's episode bounds relative to the oldest stored step."""
    n = int(state.steps_added)
    times = np.arange(max(n - T, 0), n)
    env = np.arange(NUM_ENVS)[:, None]
    experience = jax.tree.map(lambda x: np.asarray(x)[env, times % T], state.trajectory.experience)
    slot = np.asarray(state.episode_id)[env, times % T] % T
    start = np.maximum(np.asarray(state.episode_start)[env, slot], times[0]) - times[0]
    end = np.minimum(np.asarray(state.episode_end)[env, slot], n - 1) - times[0]
    return experience, start, end


def test_offline_buffer_matches_online_one(recorded):
    directory, _, buffer, online, _ = recorded
    back = lb.read_vault(lb.open_vault(directory, "demo", buffer_state=online))
    offline = lb.load_episode_buffer(buffer, back)
    jax.tree.map(np.testing.assert_array_equal, logical_view(offline), logical_view(online))


def test_missing_vault_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="buffer_state="):
        lb.open_vault(tmp_path, "nothing")
    with pytest.raises(TypeError, match="EpisodeBufferState"):
        lb.record(None, {"not": "a state"})


def test_write_experience_appends_rewrites_from_an_index_and_refuses_gaps(tmp_path):
    """What a resumed training run does: append chunks, then rewrite from a checkpoint's step."""
    from flashbax.buffers.trajectory_buffer import TrajectoryBufferState

    def chunk(start, length):  # leaves (batch 2, time, ...): values name their step
        steps = np.arange(start, start + length, dtype=np.float32)
        return {"x": np.stack([steps, -steps]), "flag": {"done": np.stack([steps % 3 == 0] * 2)}}

    example = TrajectoryBufferState(
        experience=chunk(0, 1), current_index=np.int32(0), is_full=np.bool_(False)
    )
    vault = lb.open_vault(tmp_path, "run", uid="seed_0", buffer_state=example)
    assert not [p for p in (tmp_path / "run").iterdir() if p.name.startswith(".tmp")]  # created by a rename
    assert lb.write_experience(vault, chunk(0, 4)) == 4
    assert lb.write_experience(vault, chunk(4, 4)) == 4
    # A resume from step 4 rewrites steps 4.. with what the resumed run collects, and ends there.
    assert lb.write_experience(vault, chunk(4, 2), at=4) == 2
    with pytest.raises(ValueError, match="without gaps"):
        lb.write_experience(vault, chunk(9, 1), at=9)
    back = lb.read_vault(lb.open_vault(tmp_path, "run", uid="seed_0"))  # a fresh reader: the stored length
    np.testing.assert_array_equal(back["x"], chunk(0, 6)["x"])
    np.testing.assert_array_equal(back["flag"]["done"], chunk(0, 6)["flag"]["done"])


@pytest.fixture(scope="module")
def episode_buffer():
    buffer = lb.make_episode_buffer(num_envs=NUM_ENVS, max_length_time_axis=T, sample_batch_size=8)
    return buffer, jax.jit(buffer.add)


def add_chunks(buffer, add, state, data, sizes, vault=None):
    """Add ``sizes`` steps of ``data`` in turn (recording after each into ``vault`` if given)."""
    done, written = int(state.steps_added), []
    for size in sizes:
        state = add(state, jax.tree.map(lambda x, a=done, b=done + size: x[:, a:b], data))
        done += size
        if vault is not None:
            written.append(lb.record(vault, state))
    return state, written


def test_record_writes_a_whole_buffer_of_new_steps(tmp_path, episode_buffer):
    """T new steps fill every slot: all are written (flashbax's write alone would write none)."""
    buffer, add = episode_buffer
    data = stream()
    state = buffer.init(jax.tree.map(lambda x: x[0, 0], data))
    vault = lb.open_vault(tmp_path, "full", buffer_state=state)
    _, written = add_chunks(buffer, add, state, data, [T, 3, T, 1], vault)
    assert written == [T, 3, T, 1]
    back = lb.read_vault(vault)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b[:, : 2 * T + 4]), back, data)


def test_record_refuses_to_lose_steps(tmp_path, episode_buffer):
    buffer, add = episode_buffer
    data = stream()
    state = buffer.init(jax.tree.map(lambda x: x[0, 0], data))
    vault = lb.open_vault(tmp_path, "lossy", buffer_state=state)
    state, _ = add_chunks(buffer, add, state, data, [CHUNK], vault)
    state, _ = add_chunks(buffer, add, state, data, [CHUNK, CHUNK])  # 8 > T = 6 without a record
    with pytest.raises(
        ValueError,
        match=rf"8 steps per env .* only its newest {T}: 2 steps were overwritten.*every {T} steps",
    ):
        lb.record(vault, state)
    assert vault.vault_index == CHUNK  # nothing written
    with pytest.raises(ValueError, match=r"fewer than the .* recorded from it into this vault"):
        lb.record(vault, buffer.init(jax.tree.map(lambda x: x[0, 0], data)))


def test_record_into_a_reopened_vault_continues_after_its_steps(tmp_path, episode_buffer):
    """A resumed run: the vault is opened again (a new Vault object) with the buffer restored;
    ``record`` writes only the steps added after the vault's last one."""
    buffer, add = episode_buffer
    data = stream()
    state = buffer.init(jax.tree.map(lambda x: x[0, 0], data))
    vault = lb.open_vault(tmp_path, "resumed", buffer_state=state)
    state, _ = add_chunks(buffer, add, state, data, [CHUNK, CHUNK], vault)
    reopened = lb.open_vault(tmp_path, "resumed", buffer_state=state)
    state, written = add_chunks(buffer, add, state, data, [3], reopened)
    assert written == [3]
    back = lb.read_vault(reopened)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b[:, : 2 * CHUNK + 3]), back, data)


def test_record_of_a_plain_flashbax_state_catches_its_first_wrap(tmp_path):
    buffer = lb.make_trajectory_buffer(
        num_envs=NUM_ENVS, max_length_time_axis=T, sample_batch_size=2, sample_sequence_length=1
    )
    example = {"x": jnp.zeros((), jnp.float32)}
    state = buffer.init(example)
    vault = lb.open_vault(tmp_path, "plain", buffer_state=state)
    for size in (CHUNK, 3):  # 7 > T steps before the first record
        state = buffer.add(state, {"x": jnp.ones((NUM_ENVS, size))})
    with pytest.raises(ValueError, match=r"at least 7 steps per env .* at least 1 steps were overwritten"):
        lb.record(vault, state)


def small_experience(batch=2, time=3, trailing=(3,), dtype=np.float32, **fields):
    return {
        "x": np.zeros((batch, time, *trailing), dtype),
        "flag": {"done": np.zeros((batch, time), bool)},
        **fields,
    }


@pytest.mark.parametrize(
    ("experience", "match"),
    [
        (
            small_experience(y=np.zeros((2, 3), np.float32)),
            r"field 'y' is in the structure given but not in the vault",
        ),
        (
            {"x": np.zeros((2, 3, 3), np.float32)},
            r"field 'flag\.done' is in the vault but not in the structure given",
        ),
        (small_experience(dtype=np.int32), r"field 'x' has dtype int32 given, float32 in the vault"),
        (small_experience(trailing=(5,)), r"field 'x' has shape \(2, 3, 5\) given, \(2, 4, 3\) in the vault"),
        (small_experience(batch=3), r"field 'flag\.done' has shape \(3, 3\) given, \(2, 4\) in the vault"),
    ],
    ids=["extra field", "missing field", "dtype", "trailing shape", "batch"],
)
def test_open_vault_refuses_another_experience_structure(tmp_path, experience, match):
    lb.open_vault(tmp_path, "run", experience=small_experience(time=4))
    with pytest.raises(
        ValueError, match=rf"another experience structure: .*{match}.*Open it with the structure"
    ):
        lb.open_vault(tmp_path, "run", experience=experience)
    lb.open_vault(tmp_path, "run", experience=small_experience(time=7))  # only the time axis may differ


@pytest.mark.parametrize(
    ("experience", "match"),
    [  # batch 1 into a batch-2 vault used to write one env's row and leave the other's stale
        (small_experience(batch=1), r"field 'x' has shape \(1, 3, 3\) given, \(2, 4, 3\) in the vault"),
        (small_experience(trailing=(5,)), r"field 'x' has shape \(2, 3, 5\) given"),  # a tensorstore error
    ],
    ids=["batch", "trailing shape"],
)
def test_write_experience_refuses_another_experience_structure(tmp_path, experience, match):
    vault = lb.open_vault(tmp_path, "run", experience=small_experience(time=4))
    with pytest.raises(
        ValueError, match=rf"write_experience: the vault at .* another experience structure: .*{match}"
    ):
        lb.write_experience(vault, experience)
    assert vault.vault_index == 0
    assert lb.write_experience(vault, small_experience()) == 3


def test_open_vault_refuses_a_folder_that_is_not_a_vault(tmp_path):
    (tmp_path / "run" / "0").mkdir(parents=True)
    (tmp_path / "run" / "0" / "notes.txt").write_text("mine")
    for kwargs in ({}, {"experience": small_experience()}):  # a FileNotFoundError for metadata.json before
        with pytest.raises(
            FileExistsError, match=r"exists but is not a vault .*another directory, name or uid"
        ):
            lb.open_vault(tmp_path, "run", **kwargs)
    with pytest.raises(ValueError, match=r"uid must be one folder name.* got 'seed/0'"):
        lb.open_vault(tmp_path, "run", uid="seed/0", experience=small_experience())  # an os.replace error
    with pytest.raises(ValueError, match=r"name must be one folder name.* got ''"):
        lb.open_vault(tmp_path, "", experience=small_experience())  # created a vault in tmp_path/0


def test_reading_more_steps_than_recorded_is_a_clear_error(tmp_path, episode_buffer):
    vault = lb.open_vault(tmp_path, "run", experience=small_experience())
    lb.write_experience(vault, small_experience())
    with pytest.raises(ValueError, match=r"timesteps=5 .* holds 3 steps per env"):  # an IndexError before
        lb.read_vault(vault, timesteps=5)
    with pytest.raises(ValueError, match=r"timesteps=-1"):
        lb.read_vault(vault, timesteps=-1)
    buffer, _ = episode_buffer
    empty = jax.tree.map(lambda x: x[:, :0], stream())
    with pytest.raises(ValueError, match=r"load_episode_buffer: experience holds no steps"):
        lb.load_episode_buffer(buffer, empty)


@pytest.mark.parametrize("key", ["version", "structure_shape", "structure_dtype"])
def test_open_vault_refuses_metadata_that_would_replace_the_vaults_own(tmp_path, key):
    # flashbax merges metadata over its own keys: the vault was created broken (a TypeError or an
    # AssertionError on every later open, or its structure replaced).
    with pytest.raises(ValueError, match=rf"metadata key '{key}' is the vault's own .*rename it"):
        lb.open_vault(tmp_path, "run", experience=small_experience(), metadata={key: "0.3.1", "env": "x"})
    assert not (tmp_path / "run").exists()
    with pytest.raises(TypeError, match=r"metadata must be a dict .* got list"):
        lb.open_vault(tmp_path, "run", experience=small_experience(), metadata=["env"])
    assert not (tmp_path / "run").exists()


def test_opening_a_missing_vault_names_the_vaults_there(tmp_path):
    """Reading a training run's recording: its vaults are ``<env id>/seed_<n>``, not uid "0"."""
    for uid in ("seed_0", "seed_1"):
        lb.open_vault(tmp_path, "CartPole-v1", uid=uid, experience=small_experience())
    with pytest.raises(FileNotFoundError, match=r"CartPole-v1/0.* uids there: 'seed_0', 'seed_1'"):
        lb.open_vault(tmp_path, "CartPole-v1")
    with pytest.raises(
        FileNotFoundError, match=r"no vault named 'Pendulum-v1' .* names there: 'CartPole-v1'"
    ):
        lb.open_vault(tmp_path, "Pendulum-v1", uid="seed_0")


def test_read_vault_refuses_a_timesteps_that_is_not_an_int(tmp_path):
    vault = lb.open_vault(tmp_path, "run", experience=small_experience())
    lb.write_experience(vault, small_experience())
    for timesteps in (2.5, True):  # a TypeError from slicing; True read 1 step
        with pytest.raises(TypeError, match=r"read_vault: timesteps must be an int or None"):
            lb.read_vault(vault, timesteps=timesteps)
    assert lb.read_vault(vault, timesteps=np.int64(2))["x"].shape == (2, 2, 3)


def test_load_episode_buffer_explains_a_training_runs_recording(episode_buffer):
    buffer, _ = episode_buffer
    recorded = {  # what `lamella train ... --record-vault` writes (OG-MARL's names), read as dicts
        "observations": np.zeros((2, 3, 4), np.float32),
        "actions": np.zeros((2, 3), np.int32),
        "rewards": np.zeros((2, 3), np.float32),
        "terminals": np.zeros((2, 3), bool),
        "truncations": np.zeros((2, 3), bool),
    }
    with pytest.raises(
        TypeError,
        match=r"fields \['actions', .*'truncations'\].*--record-vault.*no next observation.*read_recording",
    ):
        lb.load_episode_buffer(buffer, recorded)


def test_record_into_a_reopened_vault_refuses_a_buffer_behind_it(tmp_path, episode_buffer):
    """A script run again into the same vault: the new buffer has added fewer steps than the vault
    holds (the message used to say to open the vault again, which is what was done)."""
    buffer, add = episode_buffer
    data = stream()
    state = buffer.init(jax.tree.map(lambda x: x[0, 0], data))
    vault = lb.open_vault(tmp_path, "run", buffer_state=state)
    add_chunks(buffer, add, state, data, [CHUNK, CHUNK], vault)
    again = lb.open_vault(tmp_path, "run", buffer_state=state)
    fresh, _ = add_chunks(buffer, add, state, data, [3])
    with pytest.raises(
        ValueError,
        match=rf"already holds {2 * CHUNK} steps per env, but buffer_state has added 3.*another uid.*write_experience",
    ):
        lb.record(again, fresh)
    assert again.vault_index == 2 * CHUNK
