"""The ``lamella`` command of lamella-envs: ``demo`` and ``animate``."""

from __future__ import annotations

import imageio.v3 as iio
import pytest

from lamella.envs import cli
from lamella.envs.errors import UserError


def test_animate_writes_one_gif_per_env(tmp_path):
    # The ids as arguments, or after --envs as `lamella demo` takes them.
    cli.main(["animate", "CartPole-v1", "--envs", "Catch-bsuite", "--out-dir", str(tmp_path)])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["CartPole-v1.gif", "Catch-bsuite.gif"]
    for env_id in ("CartPole-v1", "Catch-bsuite"):
        frames = iio.imread(tmp_path / f"{env_id}.gif")
        assert frames.ndim == 4 and frames.shape[0] >= 2 and frames.shape[-1] in (3, 4)


def test_demo_prints_a_row_per_env_and_writes_the_gif(tmp_path, capsys):
    rows = cli.demo(
        num_envs=8, num_steps=20, out_dir=str(tmp_path), env_ids=["CartPole-v1", "MountainCar-v0"]
    )
    assert [row["env"] for row in rows] == ["CartPole-v1", "MountainCar-v0"]
    assert all(row["steps_per_s"] > 0 for row in rows)
    assert rows[0]["mean_reward"] == pytest.approx(1.0)  # CartPole pays 1 per step
    assert rows[1]["mean_reward"] == pytest.approx(-1.0)  # MountainCar pays -1 per step
    assert (tmp_path / "CartPole-v1.gif").stat().st_size > 0
    assert "CartPole-v1" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["animate", "demo"])
def test_help_says_the_option_variants_are_left_out(command, capsys):
    # --all and demo's default walk registered(variants=False), not every registered id.
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "every registered env but the option variants" in help_text, help_text


def test_unknown_command_exits():
    with pytest.raises(SystemExit):
        cli.main(["no-such-command"])


@pytest.mark.parametrize(
    "command",
    [["animate", "CartPole-v1"], ["demo", "--envs", "CartPole-v1", "--num-envs", "2", "--num-steps", "2"]],
)
def test_an_out_dir_that_cannot_be_made_is_refused_before_anything_runs(tmp_path, command, capsys):
    (tmp_path / "a_file").write_text("")
    out_dir = tmp_path / "a_file" / "gifs"
    assert cli.main([*command, "--out-dir", str(out_dir)]) == 2
    assert "cannot be made" in capsys.readouterr().err
    with pytest.raises(UserError, match="--out-dir"):
        cli.main(["--debug", *command, "--out-dir", str(out_dir)])
