"""The README runs as written: its Python blocks, its ``lamella`` commands, its sample output.

Blocks run in page order in one fresh directory (the API block writes the run logs the CLI
section aggregates). ``python`` blocks are executed; plain blocks are shell commands, each run
unless it is in ``NOT_RUN`` with its reason; ``text`` blocks are sample output, each checked
or in ``NOT_CHECKED`` with its reason. A block that fits none of these fails the test.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"

# Shell commands not run here, by prefix, and why.
NOT_RUN = {
    "pip install": "needs the package index; scripts/test_all.py installs the built wheel alone",
    "hatch test": "the test command itself",
    "hatch run bench:": "the benchmark (minutes); run by hand, its output is in the README",
}
# Sample output not compared, and why.
NOT_CHECKED = {
    "runs/x/metrics.json: run": "the form of a RunLogError message (test_runlog checks the messages)",
}


def _blocks(text: str) -> list[tuple[str, str]]:
    """``(info string, body)`` of every fenced block (indented ones too), in page order."""
    pattern = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.S | re.M)
    return [
        (m.group(2), "\n".join(line[len(m.group(1)) :] for line in m.group(3).splitlines()))
        for m in pattern.finditer(text)
    ]


def _commands(body: str) -> list[str]:
    return [line.strip() for line in body.replace("\\\n", " ").splitlines() if line.strip()]


def _run(command: str) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(command.split("#", 1)[0])
    if argv[0] == "lamella":
        argv = [sys.executable, "-m", "lamella.envs.cli", *argv[1:]]
    elif argv[:3] == ["python", "-m", "lamella.eval"]:
        argv = [sys.executable, *argv[1:]]
    else:
        raise AssertionError(f"README command {command!r} is neither run nor listed in NOT_RUN")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)


def test_readme_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = _blocks(README.read_text())
    kinds = [kind for kind, _ in blocks]
    assert kinds.count("python") == 2 and "" in kinds and "text" in kinds, kinds
    ran = []
    for kind, body in blocks:
        if kind == "python":
            exec(compile(body, f"{README}:python block", "exec"), {"__name__": "__main__"})
            ran.append("python")
        elif kind == "":
            for command in _commands(body):
                if any(command.startswith(prefix) for prefix in NOT_RUN):
                    continue
                done = _run(command)
                assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
                ran.append(command.split()[0:3])
        elif kind == "text":
            if any(body.startswith(prefix) for prefix in NOT_CHECKED):
                continue
            # The one checked sample: the aggregate command on a run log cut short.
            assert body.startswith("lamella eval aggregate: error: runs/ppo/metrics.json"), body
            path = tmp_path / "runs" / "ppo" / "metrics.json"
            text = path.read_text()
            path.write_text(text[:1000])
            done = _run(
                "lamella eval aggregate runs/ppo runs/dqn --metric mean_episode_return --out-dir eval"
            )
            path.write_text(text)
            assert done.returncode == 2 and done.stderr.strip() == body.strip(), done.stderr
            ran.append("sample")
        else:
            pytest.fail(f"README block of kind {kind!r}: mark it python, text, or a plain command block")
    # Both Python blocks, the aggregate and the checkpoints commands and the sample all ran.
    assert ran.count("python") == 2 and ran.count("sample") == 1
    assert ["lamella", "eval", "aggregate"] in ran and ["lamella", "eval", "checkpoints"] in ran
    assert ["lamella", "eval", "report"] in ran and (tmp_path / "report.html").stat().st_size > 1_000_000
    assert (tmp_path / "eval" / "aggregates.png").is_file() and (tmp_path / "results.csv").is_file()
