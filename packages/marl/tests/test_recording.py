"""Around IPPO/MAPPO: Vault recording through the driver, the offline reader, the episode GIF, and
the command line's bad input; the independent off-policy learners' recording.

One tiny MAPPO config is compiled once (the recording chunk, evaluation and GIF programs) and run
twice: straight through, and stopped, "killed" before a checkpoint, then resumed.
"""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import pytest

from lamella.agents.config import ConfigError
from lamella.agents.driver import RunSpec, run, run_experiment
from lamella.envs.cli import main
from lamella.marl import MAPPOConfig, make_mappo_runner
from lamella.marl.offpolicy import IDQNConfig, ISACConfig
from lamella.marl.rec_iql import RecIQLConfig
from lamella.marl.recording import read_offline

LBF = "Foraging-5x5-2p-1f-coop-v3"
NUM_ENVS, NUM_STEPS, ITERATIONS = 4, 16, 6
CONFIG = MAPPOConfig(
    env_id=LBF,
    total_timesteps=ITERATIONS * NUM_ENVS * NUM_STEPS,
    num_envs=NUM_ENVS,
    num_steps=NUM_STEPS,
    hidden_sizes=(16,),
    eval_episodes=2,
)
OPTIONS = dict(seeds=2, chunk_iterations=2, progress=False, plot=False, record_vault=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("recording")
    whole = run_experiment(CONFIG, out_dir=root / "whole", gif=True, **OPTIONS)
    # Stopped after two chunks; the second chunk's checkpoint is removed, as if the process had
    # been killed after recording the chunk and before checkpointing it.
    run_experiment(CONFIG, out_dir=root / "split", max_chunks=2, **OPTIONS)
    checkpoints = sorted((root / "split" / "checkpoints").iterdir())
    assert [p.name for p in checkpoints][-1].endswith("04.msgpack")
    checkpoints[-1].unlink()
    stopped = read_offline(root / "split" / "vault", run="seed_1")
    resumed = run_experiment(CONFIG, out_dir=root / "split", resume=True, **{**OPTIONS, "record_vault": None})
    return whole, resumed, stopped, root


def test_vault_holds_every_collected_step_per_seed_in_og_marl_layout(runs):
    whole, _, _, root = runs
    assert json.loads((root / "whole" / "config.json").read_text())["record_vault"] == str(
        root / "whole" / "vault"
    )
    steps = ITERATIONS * NUM_STEPS
    for seed in (0, 1):
        data = read_offline(root / "whole" / "vault", task=LBF, run=f"seed_{seed}")
        assert data.observations.shape[:3] == (NUM_ENVS, steps, 2)
        assert data.actions.shape == data.rewards.shape == data.terminals.shape == (NUM_ENVS, steps, 2)
        assert data.legals.shape == (NUM_ENVS, steps, 2, 6) and data.state.shape[:2] == (NUM_ENVS, steps)
        np.testing.assert_array_equal(data.dones, data.terminals | data.truncations)
        # Every recorded action was legal under its recorded mask, and episodes do end.
        chosen = np.take_along_axis(data.legals, data.actions[..., None], -1)[..., 0]
        assert chosen.all() and data.dones.any()
        assert data.agent(1)["rewards"].shape == (NUM_ENVS, steps)
    # The vault is aligned with training: each chunk's mean reward per agent is the run log's.
    log = json.loads((root / "whole" / "metrics.json").read_text())["multi_agent"][LBF]["mappo"]
    data = read_offline(root / "whole" / "vault", run="seed_1")
    chunk_steps = 2 * NUM_STEPS
    for chunk in range(ITERATIONS // 2):
        logged = log["seed_1"][f"step_{chunk + 1}"]
        recorded = data.rewards[:, chunk * chunk_steps : (chunk + 1) * chunk_steps].mean((0, 1))
        for agent in (0, 1):
            np.testing.assert_allclose(recorded[agent], logged[f"train_reward_agent_{agent}"][0], rtol=1e-5)


# Each env runs 64 steps in 2 chunks: LBF's and MPE's episodes end (50 and 25 steps) in the vault.
OFFPOLICY_STEPS = 64
OFFPOLICY = {
    "idqn": IDQNConfig(
        total_timesteps=2 * OFFPOLICY_STEPS, num_envs=2, rollout_steps=16, learning_starts=32, batch_size=8,
        buffer_size=2 * OFFPOLICY_STEPS, hidden_sizes=(8,), eval_episodes=1,
    ),
    "isac": ISACConfig(
        total_timesteps=2 * OFFPOLICY_STEPS, num_envs=2, rollout_steps=16, learning_starts=32, batch_size=8,
        buffer_size=2 * OFFPOLICY_STEPS, hidden_sizes=(8,), eval_episodes=1,
    ),
    "rec_iql": RecIQLConfig(
        env_id=LBF, total_timesteps=2 * OFFPOLICY_STEPS, num_envs=2, rollout_length=16, epochs=1,
        buffer_size=OFFPOLICY_STEPS, min_buffer_size=8, sample_batch_size=4, sample_sequence_length=4, burn_in=2,
        hidden_sizes=(8,), post_torso_sizes=(8,), rnn_hidden_size=8, eval_episodes=1,
    ),
}  # fmt: skip


@pytest.mark.parametrize("algorithm", sorted(OFFPOLICY))
def test_offpolicy_learners_record_what_they_store_for_replay(algorithm, tmp_path):
    config = OFFPOLICY[algorithm]
    result = run_experiment(config, out_dir=tmp_path, **{**OPTIONS, "seeds": 1})
    assert result.finished
    data = read_offline(tmp_path / "vault", run="seed_0")
    n = 2
    assert data.rewards.shape == data.terminals.shape == data.truncations.shape == (2, OFFPOLICY_STEPS, n)
    assert data.dones.any(axis=1).all()  # every env's recorded steps include an episode's end
    # The replay buffer holds every step of the run: the vault is the replay data, step for step
    # (random warm-up actions first, then the learners' own).
    buffer = result.state.buffer_state
    stored = buffer.trajectory.experience if algorithm != "rec_iql" else buffer.experience
    stored = jax.tree.map(lambda x: np.asarray(x[0])[:, :OFFPOLICY_STEPS], stored)  # seed 0, steps taken
    np.testing.assert_array_equal(data.observations, stored.obs["obs"])
    np.testing.assert_array_equal(data.actions, stored.action)
    np.testing.assert_array_equal(data.rewards, stored.reward)
    np.testing.assert_array_equal(data.terminals, stored.terminated)
    if algorithm == "isac":  # continuous actions, no masks
        assert data.actions.dtype == np.float32 and data.legals is None
    else:
        np.testing.assert_array_equal(data.legals, stored.obs["action_mask"])
        assert data.actions.dtype == np.int32 and data.legals.shape == (2, OFFPOLICY_STEPS, n, 6)
        # After the warm-up every action is legal under the recorded mask (both learners honour it).
        legal = np.take_along_axis(data.legals, data.actions[..., None], -1)[..., 0]
        assert legal[:, 32 // 2 :].all()


def test_interrupted_recording_is_readable_and_resume_rewrites_from_the_checkpoint(runs):
    _, resumed, stopped, root = runs
    assert resumed.finished
    # Killed after recording chunk 2 without its checkpoint: the vault was readable, 4 iterations long.
    assert stopped.actions.shape[1] == 4 * NUM_STEPS
    for seed in (0, 1):
        a = read_offline(root / "whole" / "vault", run=f"seed_{seed}")
        b = read_offline(root / "split" / "vault", run=f"seed_{seed}")
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)  # the resumed run's vault is the uninterrupted one's


def test_gif_of_the_trained_team(runs):
    whole, _, _, root = runs
    import imageio.v3 as iio

    frames = iio.imread(whole.gif_path, index=None)
    assert whole.gif_path == str(root / "whole" / "episode.gif")
    assert frames.ndim == 4 and 2 <= frames.shape[0] <= 51  # one LBF episode (at most 50 steps) + reset
    assert frames.std(axis=0).max() > 0  # agents move: the frames differ


def test_recording_bad_input_is_refused_before_training(runs, tmp_path):
    _, _, _, root = runs
    with pytest.raises(ConfigError, match="records to"):
        run_experiment(CONFIG, out_dir=root / "whole", resume=True, **{**OPTIONS, "record_vault": tmp_path})
    with pytest.raises(FileExistsError, match="already holds vaults"):
        run_experiment(
            CONFIG, out_dir=tmp_path / "new", **{**OPTIONS, "record_vault": root / "whole" / "vault"}
        )
    runner = make_mappo_runner(CONFIG)._replace(record_step=None, render_episode=None)
    with pytest.raises(ConfigError, match="record_step"):
        run(runner, RunSpec("custom"), out_dir=tmp_path / "a", record_vault=True, progress=False)
    with pytest.raises(ConfigError, match="render_episode"):
        run(runner, RunSpec("custom"), out_dir=tmp_path / "b", gif=True, progress=False)
    assert not os.path.exists(tmp_path / "new") and not os.path.exists(tmp_path / "a")


def _cli(capsys, argv):
    try:
        status = main(argv)
    except SystemExit as exit:  # argparse's error exit
        status = exit.code
    return status, capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["train", "nope"], ["Unknown algorithm 'nope'", "ippo"]),
        (["train", "ippo", "--env", "Nope-v0"], ["Unknown environment id 'Nope-v0'"]),
        (["train", "ippo", "--env", "MPE-simple_tag-v3"], ["team_reward=false", "MPE-simple_tag-v3"]),
        (["train", "mappo", "--env", "MPE-simple_adversary-v3"], ["team_reward=false"]),
        (
            ["train", "isac", "--env", "Foraging-8x8-2p-2f-coop-v3"],
            ["isac needs continuous actions", "no continuous_actions switch", "idqn"],
        ),
        (
            ["train", "idqn", "--env", "MPE-simple_spread-v3", "env_kwargs=continuous_actions=true"],
            ["idqn needs discrete actions", "isac"],
        ),
    ],
)
def test_command_line_bad_input_is_one_line_and_status_2(capsys, tmp_path, argv, words):
    status, err = _cli(capsys, [*argv, "--out-dir", str(tmp_path / "run")])
    errors = [line for line in err.splitlines() if "error:" in line]
    assert status == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert all(word in errors[0] for word in words), errors[0]
    assert not (tmp_path / "run").exists()


def test_resuming_a_two_agent_run_on_a_three_agent_env_is_refused(runs, capsys):
    _, _, _, root = runs
    argv = ["train", "mappo", "--resume", str(root / "whole"), "--env", "Foraging-5x5-3p-1f-coop-v3"]
    overrides = [
        f"{k}={v}" for k, v in (("num_envs", NUM_ENVS), ("num_steps", NUM_STEPS), ("eval_episodes", 2))
    ]
    overrides += [f"total_timesteps={CONFIG.total_timesteps}", "hidden_sizes=[16]"]
    before = sorted(os.listdir(root / "whole" / "checkpoints"))
    status, err = _cli(capsys, [*argv, *overrides])
    errors = [line for line in err.splitlines() if "error:" in line]
    assert status == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert "env_id" in errors[0] and "2p" in errors[0] and "3p" in errors[0], errors[0]
    assert sorted(os.listdir(root / "whole" / "checkpoints")) == before
