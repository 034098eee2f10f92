"""The driver's Vault recording with single-agent runners (PPO, the off-policy loop's DQN):
``Runner.record_step`` is generic.

lamella-marl's tests cover recording in depth (interrupted runs, resume, the offline reader);
this checks that PPO's and DQN's experience reaches the vault whole and in order.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from lamella.agents.driver import run_experiment
from lamella.agents.offpolicy.configs import DQNTrainConfig
from lamella.agents.ppo import PPOConfig
from lamella.agents.recording import read_recording, recorded_runs

NUM_ENVS, NUM_STEPS, ITERATIONS = 2, 16, 3


def test_ppo_records_every_step_to_one_vault_per_seed(tmp_path):
    config = PPOConfig(
        env_id="CartPole-v1",
        total_timesteps=ITERATIONS * NUM_ENVS * NUM_STEPS,
        num_envs=NUM_ENVS,
        num_steps=NUM_STEPS,
        num_minibatches=2,
        hidden_sizes=(8,),
        eval_episodes=2,
    )
    result = run_experiment(
        config,
        seeds=[0, 3],
        out_dir=tmp_path / "run",
        chunk_iterations=2,
        record_vault=tmp_path / "vaults",
        progress=False,
        plot=False,
    )
    assert result.finished
    assert recorded_runs(tmp_path / "vaults") == [("CartPole-v1", "seed_0"), ("CartPole-v1", "seed_3")]
    data = read_recording(tmp_path / "vaults", run="seed_3")
    steps = ITERATIONS * NUM_STEPS
    assert sorted(data) == ["actions", "observations", "rewards", "terminals", "truncations"]
    assert data["observations"].shape == (NUM_ENVS, steps, 4) and data["actions"].shape == (NUM_ENVS, steps)
    np.testing.assert_array_equal(data["rewards"], 1.0)  # CartPole pays 1 for every step
    # One env's time series is continuous: a step's observation follows from the previous one's
    # (the cart position moves by at most tau * |velocity|), except after an episode's end.
    x, x_dot = data["observations"][..., 0], data["observations"][..., 1]
    ended = data["terminals"] | data["truncations"]
    moved = np.abs(x[:, 1:] - x[:, :-1] - 0.02 * x_dot[:, :-1])
    assert np.all(moved[~ended[:, :-1]] < 1e-4)
    # The run's training episodes are the vault's: the log's episode count per chunk matches.
    log = json.loads((tmp_path / "run" / "metrics.json").read_text())
    run_log = log["classic_control"]["CartPole-v1"]["ppo"]["seed_3"]
    chunk_ends = ended[:, : 2 * NUM_STEPS].sum()
    np.testing.assert_allclose(run_log["step_1"]["train_episodes"][0] * 2, chunk_ends)


def test_dqn_records_every_step_it_stores_in_its_replay_buffer(tmp_path):
    # The buffer holds every step of the run (capacity >= steps per env), so the vault must
    # equal the replay data: the random warm-up steps, then the epsilon-greedy ones.
    rollout_steps, iterations = 8, 4
    config = DQNTrainConfig(
        env_id="CartPole-v1",
        total_timesteps=iterations * NUM_ENVS * rollout_steps,
        num_envs=NUM_ENVS,
        rollout_steps=rollout_steps,
        learning_starts=2 * NUM_ENVS * rollout_steps,
        batch_size=8,
        buffer_size=NUM_ENVS * iterations * rollout_steps,
        hidden_sizes=(8,),
        eval_episodes=1,
    )
    result = run_experiment(
        config,
        seeds=2,
        out_dir=tmp_path / "run",
        chunk_iterations=2,
        record_vault=True,
        progress=False,
        plot=False,
    )
    assert result.finished
    assert recorded_runs(tmp_path / "run" / "vault") == [("CartPole-v1", "seed_0"), ("CartPole-v1", "seed_1")]
    steps = iterations * rollout_steps
    for member in (0, 1):
        data = read_recording(tmp_path / "run" / "vault", run=f"seed_{member}")
        assert sorted(data) == ["actions", "observations", "rewards", "terminals", "truncations"]
        assert data["observations"].shape == (NUM_ENVS, steps, 4) and data["actions"].shape == (
            NUM_ENVS,
            steps,
        )
        stored = result.state.buffer_state.trajectory.experience  # (members, envs, capacity, ...)
        for key, field in [("observations", "obs"), ("actions", "action"), ("rewards", "reward"),
                           ("terminals", "terminated"), ("truncations", "truncated")]:  # fmt: skip
            np.testing.assert_array_equal(data[key], np.asarray(getattr(stored, field)[member]), err_msg=key)
        # Episodes ended in the recorded steps (CartPole's random policy ends them within ~20 steps).
        ended = data["terminals"] | data["truncations"]
        assert ended.any()
        log = json.loads((tmp_path / "run" / "metrics.json").read_text())
        run_log = log["classic_control"]["CartPole-v1"]["dqn"][f"seed_{member}"]
        np.testing.assert_allclose(
            run_log["step_1"]["train_episodes"][0] * 2, ended[:, : 2 * rollout_steps].sum()
        )
    # The run directory reads its vault/ folder (it was "holds vaults of []; pass task="); a
    # folder without a recording names what to give.
    np.testing.assert_array_equal(read_recording(tmp_path / "run", run="seed_1")["actions"], data["actions"])
    with pytest.raises(
        FileNotFoundError,
        match=r"^No recorded vault in .*checkpoints'\. Give the recording folder: the run directory's vault/",
    ):
        read_recording(tmp_path / "run" / "checkpoints")
    # A run directory moved (or copied) elsewhere resumes recording into its own vault/: it
    # used to resume into the old place's (a copy wrote into the original's vault, a move was
    # refused as "missing").
    moved = tmp_path / "moved"
    os.rename(tmp_path / "run", moved)
    (moved / "checkpoints" / "checkpoint_000000004.msgpack").unlink()  # stopped after 2 iterations
    resumed = run_experiment(config, seeds=2, out_dir=moved, resume=True, progress=False, plot=False)
    assert resumed.finished and not (tmp_path / "run").exists()
    np.testing.assert_array_equal(read_recording(moved, run="seed_1")["actions"], data["actions"])


def test_record_vault_takes_an_optional_folder_on_the_command_line():
    from lamella.agents.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["ppo", "--record-vault", "num_envs=8"])  # an override, not a folder
    assert args.record_vault is True and args.overrides == ["num_envs=8"]
    args = parser.parse_args(["ppo", "num_envs=8", "--record-vault", "runs/vaults", "--gif"])
    assert args.record_vault == "runs/vaults" and args.gif and args.overrides == ["num_envs=8"]
    assert parser.parse_args(["ppo"]).record_vault is None


def _recorder(directory, config, algorithm="ppo"):
    """A recorder of one seed's vault, 2 envs x 4 steps an iteration of a 3-float observation."""
    import jax
    import jax.numpy as jnp

    from lamella.agents.recording import VaultRecorder

    experience = {"observations": jax.ShapeDtypeStruct((1, 1, 4, 2, 3), jnp.float32)}
    metadata = {"algorithm": algorithm, "config": {"env_id": "CartPole-v1", "hidden_sizes": (8,), **config}}
    return VaultRecorder(str(directory), "CartPole-v1", ["seed_0"], experience, metadata)


def test_a_resumed_run_appends_only_to_its_own_vault(tmp_path):
    from lamella.agents.config import ConfigError

    first = _recorder(tmp_path, {"gamma": 0.99})
    first.open(0, fresh=True)
    first.write({"observations": np.ones((1, 1, 4, 2, 3), np.float32)}, length=1, first_iteration=0)
    path = first.path("seed_0")
    # The same run resumed from its checkpoint at iteration 1: its own vault, one iteration long.
    _recorder(tmp_path, {"gamma": 0.99}).open(1, fresh=False)
    # Another run's vault at that place (another gamma, another algorithm): refused, each
    # difference named, before anything is written (was: appended to, mixing two runs' steps).
    with pytest.raises(ConfigError, match=r"written by another run \(gamma=0\.99 there, 0\.9 here\)"):
        _recorder(tmp_path, {"gamma": 0.9}).open(1, fresh=False)
    with pytest.raises(ConfigError, match=r"algorithm 'ppo' there, 'a2c' here.*Start a new run to record"):
        _recorder(tmp_path, {"gamma": 0.99}, algorithm="a2c").open(1, fresh=False)
    # A config field this run has and the vault's run did not (a newer lamella's) is no difference.
    _recorder(tmp_path, {"gamma": 0.99, "new_field": 1}).open(1, fresh=False)
    # The existing refusals: the vault holds fewer steps than the checkpoint recorded, or is gone.
    with pytest.raises(ConfigError, match=r"holds 4 steps per env, the checkpoint at iteration 2 needs 8"):
        _recorder(tmp_path, {"gamma": 0.99}).open(2, fresh=False)
    with pytest.raises(FileExistsError, match=r"already holds a vault"):
        _recorder(tmp_path, {"gamma": 0.99}).open(0, fresh=True)
    os.rename(path, path + ".moved")
    with pytest.raises(ConfigError, match=r"is missing \(the run recorded there\)"):
        _recorder(tmp_path, {"gamma": 0.99}).open(1, fresh=False)
