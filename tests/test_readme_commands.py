"""Every shell command of the READMEs and docs runs, and every sample output is what it prints.

``tests/test_docs.py`` runs the pages' Python blocks; this file runs their shell side. For each
page, its shell blocks run in page order in one fresh directory (a later command may read what an
earlier one wrote, as ``lamella eval aggregate runs/*`` reads the training runs above it):

- a ``bash`` / ``sh`` block holds commands, one a line (``\\`` continues a line, ``#`` starts a
  comment, ``a && b`` runs both);
- a ``console`` block holds ``$ command`` lines, each followed by what it prints;
- any other block that is not code (``python``, ``toml``, ``json``) says what it is on the line
  before its fence: ``<!-- output of: COMMAND -->`` (the sample output of ``COMMAND``, a command
  of an earlier shell block of the page) or ``<!-- illustration: why -->``. An untagged block
  holding commands therefore fails until it is tagged.

Every command is classified by prefix: in ``RUN`` (run, with the budget override appended that
the table states with its reason) or in ``NOT_RUN`` (with the reason); a command in neither fails
the test. A ``lamella train`` command trains for real (shortened) when the page shows its sample
output or a later command of the page reads its run (a ``--resume``, an ``eval aggregate``, an
``eval checkpoints``); every other one gets ``--dry-run`` appended: its config, env, runner and
devices are checked and its three programs traced and lowered, nothing compiled or trained, and
its reason names the package test that compiles and trains the same algorithm. Each page that
trains keeps at least one command that trains for real. ``lamella ...`` and ``hatch run lamella ...`` run as ``python -m lamella.envs.cli ...``
(the ``lamella`` script of lamella-envs' ``pyproject.toml``) with this interpreter, in one
child interpreter per page that imports the CLI once (``tests/lamella_server.py``: each command
still gets its own argv, working directory, exit status and output, as from its own process);
shell globs (``runs/*``) are expanded as the shell would.

Sample outputs are compared exactly, except that a line ``...`` (or ``...`` inside a line) stands
for elided text, and, for the commands in ``NUMBERS_VARY`` (with the reason), every number is a
wildcard and consecutive sample lines that differ only in numbers may repeat any number of times
(a progress line printed every 10 s).
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from lamella_server import LamellaServer

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "packages").glob("*/README.md"),
        *(ROOT / "packages").glob("*/docs/*.md"),
    ],
    key=lambda p: str(p.relative_to(ROOT)),
)
# Pages whose own test runs their shell commands and checks their sample output: page -> test.
RUN_BY_THEIR_OWN_TEST = {"packages/eval/README.md": "packages/eval/tests/test_readme.py"}

CODE = {"python", "toml", "json"}
SHELL = {"bash", "sh"}
MARKER = re.compile(r"<!--\s*(illustration|output of):\s*(\S.*?)\s*-->")

# Off-policy runs cut to a few hundred steps: one rollout of 100 steps per env after 100 random
# steps, two evaluation episodes.
_OFFPOLICY_SHORT = (
    "total_timesteps=400 rollout_steps=100 num_envs=2 learning_starts=100 batch_size=32 "
    "buffer_size=400 eval_episodes=2"
)
_OFFPOLICY_WHY = "the preset trains 20,000-50,000 steps (minutes); a few hundred steps run the same code"
_PPO_SHORT = "total_timesteps=2048 num_envs=4 num_steps=64 eval_episodes=2"
_PPO_WHY = "the preset trains 200,000+ steps (a minute or more); 2,048 steps run the same code"

_MARL_WHY = (
    "the preset trains 4,096,000 steps per seed (about 15 minutes for three seeds on 2 cores); "
    "2,048 steps run the same code"
)

# A dry run (``lamella train ... --dry-run``): config, env, runner and devices checked and the
# three programs traced and lowered, nothing compiled, trained or written (a few seconds, where
# a short run compiles for 20-60 s on 2 cores). For a command without a sample output that no
# later command of its page reads; the reason names the package test that compiles and trains
# the same algorithm.
DRY = "--dry-run"


def _dry(test: str) -> str:
    return f"dry run: no sample output, nothing later reads its run; {test} compiles and trains it"


# Commands run, by prefix (the longest matching prefix of RUN and NOT_RUN wins):
# prefix -> (arguments appended, why). An appended key=value replaces the one written (the CLI
# refuses a key given twice); an appended option replaces it too (argparse keeps the last).
RUN: dict[str, tuple[str, str]] = {
    "lamella train ppo": (_PPO_SHORT, _PPO_WHY),
    "lamella train ppo --env CartPole-v1 num_envs=32": (
        DRY,
        _dry("packages/agents/tests/test_ppo.py (test_ppo_solves_cartpole_for_three_seeds)"),
    ),
    "lamella train ppo --env Acrobot-v1": (
        DRY,
        _dry(
            "packages/agents/tests/test_ppo.py (test_ppo_solves_cartpole_for_three_seeds: the same program)"
        ),
    ),
    "lamella train ppo --preset MemoryChain-bsuite": (
        DRY,
        _dry(
            "packages/agents/tests/test_ppo.py (test_recurrent_ppo_solves_memory_chain_where_feedforward_cannot, "
            "with the preset's settings for 1.5e5 of its 2.5e5 steps)"
        ),
    ),
    "lamella train ppo --seeds 4 --out-dir runs/long": (
        _PPO_SHORT + " --chunk-iterations 2 --max-chunks 1",
        _PPO_WHY + "; stopped after one of its four chunks so that the --resume below continues it",
    ),
    "lamella train ppo --resume": (
        "",
        "the config comes from the checkpoint (a config given here would be refused)",
    ),
    "lamella train ppo --print-config": ("", "prints the config, trains nothing"),
    "lamella train ppo lr=": ("", "a wrong key, refused before anything compiles"),
    "lamella train ppo num_envs=many": ("", "a wrong value, refused before anything compiles"),
    "lamella train --help": ("", "prints the help"),
    "lamella train --list": ("", "lists the algorithms"),
    "lamella train ippo": (_PPO_SHORT, _MARL_WHY),
    "lamella train mappo": (_PPO_SHORT, _MARL_WHY),
    "lamella train mfos_es": (
        DRY,
        _dry("packages/marl/tests/test_shaping_evolution.py (test_es_meta_agent_extorts_a_naive_learner)"),
    ),
    "lamella train mfos_rl": (
        DRY,
        _dry("packages/marl/tests/test_shaping_mfos.py (test_mfos_extorts_a_naive_learner)"),
    ),
    "lamella train shaping": (
        DRY,
        _dry(
            "packages/marl/tests/test_shaping_runner.py, test_shaping_coin_game.py, test_shaping_in_the_matrix.py, "
            "test_shaping_cnn.py"
        ),
    ),
    "lamella train rec_ippo": (_PPO_SHORT, _MARL_WHY),
    "lamella train rec_mappo": (
        DRY,
        _dry("packages/marl/tests/test_continuous.py (test_rec_mappo_with_continuous_actions_learns_...)"),
    ),
    "lamella train mappo --env Foraging-5x5-2p-1f-coop-v3": (
        DRY,
        _dry("packages/marl/tests/test_recording.py (mappo with its vault and GIF)"),
    ),
    "lamella train idqn": (_OFFPOLICY_SHORT, _OFFPOLICY_WHY),
    "lamella train idqn --env Foraging-8x8-2p-2f-coop-v3": (
        DRY,
        _dry(
            "packages/marl/tests/test_offpolicy_learning.py (test_idqn_learns_foraging_well_above_random_...)"
        ),
    ),
    "lamella train idqn --resume": (
        "",
        "the config comes from the checkpoint (a config given here would be refused)",
    ),
    "lamella train isac": (
        DRY,
        _dry("packages/marl/tests/test_offpolicy_learning.py (test_isac_learns_speaker_listener_...)"),
    ),
    "lamella train lola": (
        DRY,
        _dry(
            "packages/marl/tests/test_shaping_dice.py (test_lamella_train_lola_logs_checkpoints_and_resumes_exactly)"
        ),
    ),
    "lamella train meta_es": (
        DRY,
        _dry("packages/marl/tests/test_shaping_meta.py (test_meta_agent_shapes_a_learning_co_player)"),
    ),
    "lamella train dqn": (DRY, _dry("packages/agents/tests/test_offpolicy_learning.py (test_dqn_cartpole)")),
    "lamella train sac": (_OFFPOLICY_SHORT, _OFFPOLICY_WHY),
    "lamella train sac --env GMazeGoalDubinsWalls-v0 --her --seeds 3 --eval-episodes": (
        _OFFPOLICY_SHORT.replace("eval_episodes=2", "--eval-episodes 2"),
        _OFFPOLICY_WHY + " (--eval-episodes as written, shortened; a key given twice is refused)",
    ),
    "lamella train td3": (_OFFPOLICY_SHORT, _OFFPOLICY_WHY),
    "lamella train sac --env GMazeGoalDubins-v0": (
        DRY,
        _dry("packages/gcrl/tests/test_goal_learning.py (test_her_makes_sac_reach_dubins_goals)"),
    ),
    "lamella train sac --env GMazeGoalDubinsWalls-v0 --her": (
        DRY,
        _dry("packages/gcrl/tests/test_goal_learning.py (test_her_beats_no_her_in_the_dubins_maze)"),
    ),
    "lamella train sac --preset GMazeGoalDubinsWalls-v0-frontier": (
        DRY,
        _dry(
            "packages/gcrl/tests/test_goal_learning.py (test_her_beats_no_her_in_the_dubins_maze; "
            "test_frontier_goals.py: the frontier setter in the loop)"
        ),
    ),
    "lamella train td3 --env PointRobotGoal-v0": (
        DRY,
        _dry("packages/gcrl/tests/test_devices.py (TD3 with her_strategy=final, on 1 and 4 devices)"),
    ),
    "lamella demo": (
        "--envs CartPole-v1 Pendulum-v1 --num-envs 8 --num-steps 20",
        "compiles a rollout of every registered env (minutes); two ids run the same code, GIF included",
    ),
    "lamella animate": ("", "one short episode per env family (about 20 s)"),
    "lamella animate Breakout-MinAtar Pong-misc": ("", "two short episodes"),
    # lamella-ued (packages/ued/README.md)
    "lamella train plr": (
        DRY,
        _dry("packages/ued/tests/test_learning.py (test_students_beat_a_random_policy[plr])"),
    ),
    "lamella train parallel_plr": (
        DRY,
        _dry("packages/ued/tests/test_learning.py (test_parallel_plr_and_accel_beat_a_random_policy)"),
    ),
    "lamella train parallel_accel": (
        DRY,
        _dry("packages/ued/tests/test_learning.py (test_parallel_plr_and_accel_beat_a_random_policy)"),
    ),
    "lamella train parallel_accel --env AMaze-13x13-v0": (
        DRY,
        _dry("packages/ued/tests/test_parallel.py (paccel) and test_devices.py"),
    ),
    "lamella train accel": (
        DRY,
        _dry("packages/ued/tests/test_learning.py (test_accel_beats_a_random_policy)"),
    ),
    "lamella train paired": (
        DRY,
        _dry("packages/ued/tests/test_learning.py (test_paired_protagonist_learns_on_the_teachers_levels)"),
    ),
    "lamella train minimax": (DRY, _dry("packages/ued/tests/test_paired.py (minimax_runs)")),
    "lamella train population_paired": (DRY, _dry("packages/ued/tests/test_devices.py (on 1 and 4 devices)")),
    "lamella train dr --preset ci --seeds 2 --out-dir runs/dr-ci": (
        "total_timesteps=256 num_envs=4 num_steps=32 eval_episodes=1",
        "the ci preset trains 204,800 steps per seed; two iterations of 4 envs run the same code (and "
        "write the checkpoints lamella eval checkpoints reads below)",
    ),
    "lamella train dr": (
        DRY,
        _dry(
            "packages/ued/tests/test_learning.py (test_students_beat_a_random_policy[dr]) and test_foraging.py"
        ),
    ),
    "lamella sweep ppo --env CartPole-v1": (_PPO_SHORT, _PPO_WHY + " (each of the 4 configs)"),
    "lamella eval aggregate": ("--reps 200", "2,000 bootstrap replicates by default; 200 run the same code"),
    "lamella eval checkpoints": ("--episodes 4", "100 greedy episodes per seed and env; 4 run the same code"),
}
# Commands not run, by prefix, and why.
NOT_RUN: dict[str, str] = {
    "lamella eval checkpoints runs/maze-dr": (
        "reads the 300-update run above (21 minutes on one core; its train command gets --dry-run); the "
        "same suite evaluation of a DR checkpoint runs in `lamella eval checkpoints runs/dr-ci --suite "
        "minimax-13x13` above and in tests/test_ued_eval.py"
    ),
    "lamella train meta_es --preset shaper_v_ppo_in_the_matrix": (
        "compiles the program that packages/marl/tests/test_shaping_in_the_matrix.py runs through this "
        "command (a minute of compiling on 2 cores)"
    ),
    "pip install": "needs the package index; CI installs the workspace (and scripts/test_all.py the envs wheel alone)",
    "python -m venv": "a benchmark's own virtual environment, from the package index",
    "git clone": "a benchmark peer's source, from the network (not run by tests)",
    "/tmp/xpagvenv/bin/pip install": "needs the package index (a benchmark-only dependency)",
    "JAX_PLATFORMS=cpu /tmp/xpagvenv/bin/python benchmarks/": "a benchmark (minutes, needs xpag); its figures are in the README",
    "lamella sweep ppo --grid learning_rate=1e-3,2.5e-3 num_envs=4,8 --seeds 4 --ray": (
        "needs a Ray cluster at that address; packages/agents/tests/test_sweep.py runs --ray against a local head"
    ),
    "python scripts/test_all.py": "the whole CI run (this test is part of it)",
    "lamella animate --all": (
        "one episode of each of the 70 registered envs: 70 compiles, 4-7 minutes on 2 cores; `lamella "
        "animate` (run) takes the same path on one env of every family, and check_env renders every env"
    ),
    "hatch -e hatch-test.py3.11-envs run python benchmarks/brax_backends.py": (
        "a benchmark (minutes, needs brax, in the envs test env that has it); its figures are in the README"
    ),
    "hatch -e hatch-test.py3.11-envs run python benchmarks/mpe_throughput.py": (
        "a benchmark (minutes, needs mpe2, in the envs test env that has it); its figures are in the README"
    ),
    "hatch -e hatch-test.py3.11-gcrl run python benchmarks/her_brax_reacher.py": (
        "a learning run on a Brax body (about 17 minutes on this CPU, needs brax, in the gcrl test env "
        "that has it); its figures are in the README, packages/gcrl/tests/test_brax_her.py runs HER on it"
    ),
    "hatch -e hatch-test.py3.11-agents run python benchmarks/brax_training.py": (
        "a benchmark (minutes, needs brax, in the agents test env that has it); its figures are in the README"
    ),
    "hatch -e hatch-test.py3.11-agents run python benchmarks/brax_pendulum_linear_gains.py": (
        "a probe of the Brax pendulum (compiling its physics costs 30+ s of CI, needs brax, in the agents "
        "test env that has it); its figures are in the README"
    ),
    "lamella train ppo --env brax:": (
        "a Brax body (compiling its physics costs 30+ s of CI); packages/agents/tests/test_brax.py "
        "runs lamella train ppo and sac on brax:inverted_pendulum@spring"
    ),
    "lamella train sac --env brax:": (
        "a Brax body (compiling its physics costs 30+ s of CI); packages/agents/tests/test_brax.py "
        "runs lamella train ppo and sac on brax:inverted_pendulum@spring"
    ),
    "lamella train es --env brax:": (
        "a Brax body (compiling its physics costs 30+ s of CI); packages/agents/tests/test_brax.py "
        "runs lamella train es on brax:inverted_pendulum@spring with its preset"
    ),
    "hatch test": "the test command itself",
    "LAMELLA_SMAX_PARITY=all hatch test": "the test command itself, with the slow parity sweep over seven SMAX maps (minutes)",
    "hatch run bench:": "a benchmark (minutes); its figures are in the README",
    "JAX_PLATFORMS=cuda": "a benchmark on a GPU (the CI machine has none); its figures are in the README",
    "JAX_PLATFORMS=cuda,cpu": "a benchmark on a GPU (the CI machine has none); its figures are in the README",
    "taskset -c 0 hatch run bench:": "a benchmark pinned to one core (minutes); its figures are in the README",
    "taskset -c 1 hatch run bench:": "a benchmark pinned to the second core (minutes); its figures are in the README",
    "taskset -c 0 hatch -e hatch-test.py3.11-agents run python benchmarks/": (
        "a benchmark pinned to one core (minutes per seed); its figures are in the README"
    ),
    "taskset -c 1 hatch -e hatch-test.py3.11-agents run python benchmarks/": (
        "a benchmark pinned to the second core (minutes per seed); its figures are in the README"
    ),
    "lamella eval aggregate runs/rware20m": (
        "reads the four RWARE runs above (an hour each on one core); the command itself runs in "
        "packages/eval/tests/test_readme.py"
    ),
    "lamella eval aggregate runs/smax10m": (
        "reads the two SMAX runs above (about 1.5 hours each on one core); the command itself runs in "
        "packages/eval/tests/test_readme.py"
    ),
    "hatch run bench-marl:": "a benchmark (minutes, needs Jumanji); its figures are in the README",
    "uv venv /tmp/jaxmarl-venv": "a benchmark's own virtual environment",
    "uv pip install --python /tmp/jaxmarl-venv/bin/python": "needs the package index (benchmark-only dependencies)",
    "/tmp/jaxmarl-venv/bin/python benchmarks/": "a benchmark (minutes, needs JaxMARL); its figures are in the README",
    "hatch run bench-jaxmarl:": "a benchmark (minutes, needs JaxMARL); its figures are in the README",
    "git -C /tmp/mava_src checkout": "a benchmark peer's source at the commit measured (after its git clone)",
    "uv venv /tmp/mava-venv": "a benchmark's own virtual environment (Mava pins jax 0.4.30)",
    "uv pip install --python /tmp/mava-venv/bin/python": (
        "needs the package index and GitHub (Mava's pinned and git dependencies)"
    ),
    "hatch run bench-amaze:": "a benchmark (minutes, needs JaxUED and minimax's own environment); its figures are in the README",
    "hatch run release:": (
        "a real release (needs a token); tests/test_release.py runs scripts/release.py against a local index"
    ),
    "hatch run release:compat": (
        "needs a release tag (this repository has none yet); tests/test_release.py runs scripts/compat.py "
        "both ways on a copy of the tree with tags made by the test"
    ),
    "hatch run full:": "the full test matrix (every package on three Pythons: hours)",
    "hatch run +py=3.13 +pkg=agents full:": "a package's whole suite on Python 3.13 (10 to 25 minutes)",
    "hatch run min-deps:": "every package against its lowest dependencies (hours)",
    "hatch run +pkg=agents min-deps:": "a package's whole suite against its lowest dependencies (10 to 25 minutes)",
}
# Sample outputs whose numbers vary from run to run (and with the budget override): (page,
# command) -> why. Every other sample output is compared exactly.
NUMBERS_VARY: dict[tuple[str, str], str] = {
    ("packages/agents/README.md", "lamella train ppo --seeds 4"): (
        "returns, speeds, times, step counts (shortened here) and the run directory's time stamp vary"
    ),
}


@dataclass
class Block:
    kind: str  # "shell", "console", "output", "illustration", "code", or "untagged"
    body: str
    line: int  # the page's line number of the fence
    note: str = ""  # the command of an "output", the reason of an "illustration"


def blocks(text: str) -> list[Block]:
    """Every fenced block of a page (indented ones too), classified, in page order."""
    lines = text.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^( *)```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        indent, language = fence.group(1), fence.group(2)
        end = i + 1
        while end < len(lines) and not lines[end].startswith(indent + "```"):
            end += 1
        body = "\n".join(line[len(indent) :] for line in lines[i + 1 : end])
        previous = next((line for line in reversed(lines[:i]) if line.strip()), "")
        marker = MARKER.search(previous)
        if language in CODE:
            block = Block("code", body, i + 1)
        elif language in SHELL:
            block = Block("shell", body, i + 1)
        elif language == "console":
            block = Block("console", body, i + 1)
        elif marker:
            block = Block(
                "output" if marker.group(1) == "output of" else "illustration", body, i + 1, marker.group(2)
            )
        else:
            block = Block("untagged", body, i + 1, language)
        found.append(block)
        i = end + 1
    return found


def commands(body: str) -> list[str]:
    """The commands of a shell block: continuations joined, comments dropped, ``&&`` split."""
    found = []
    for line in body.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        part: list[str] = []
        for word in [*words, "&&"]:
            if word == "&&":
                found.append(shlex.join(part))
                part = []
            else:
                part.append(word)
    return found


def normalise(command: str) -> str:
    """``hatch run lamella ...`` -> ``lamella ...`` (the same program, run here without hatch)."""
    return command.removeprefix("hatch run ") if command.startswith("hatch run lamella ") else command


def classify(command: str) -> tuple[str, str, str]:
    """``("run", appended arguments, why)`` or ``("skip", "", why)``; fails on a command in neither table."""
    command = normalise(command)
    # A prefix matches whole words, or any continuation where it ends in "=", ":" or "/".
    matches = [
        p
        for p in [*RUN, *NOT_RUN]
        if command == p or command.startswith(p if p.endswith(("=", ":", "/")) else p + " ")
    ]
    if not matches:
        pytest.fail(
            f"command {command!r} is in neither RUN nor NOT_RUN of tests/test_readme_commands.py: "
            "add its prefix to one of them, with the reason (and a budget override if it runs long)"
        )
    prefix = max(matches, key=len)
    if prefix in NOT_RUN:
        return "skip", "", NOT_RUN[prefix]
    return "run", *RUN[prefix]


# What every command runs with.
COMMAND_ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg", "COLUMNS": "80"}


def run(
    command: str, appended: str, cwd: Path, server: LamellaServer | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one command as written plus ``appended``, globs expanded in ``cwd``; stdout and stderr
    together. A ``lamella`` command runs in ``server`` when one is given."""
    extra = shlex.split(appended)
    replaced = {word.split("=", 1)[0] for word in extra if "=" in word and not word.startswith("-")}
    written = [
        w for w in shlex.split(normalise(command)) if w.startswith("-") or w.split("=", 1)[0] not in replaced
    ]
    argv = []
    for word in written + extra:
        expanded = sorted(glob.glob(word, root_dir=cwd)) if any(c in word for c in "*?[") else []
        argv.extend(expanded or [word])
    if argv[0] == "lamella" and server is not None:
        return server.run(argv[1:], cwd, timeout=600)
    if argv[0] == "lamella":
        argv = [sys.executable, "-m", "lamella.envs.cli", *argv[1:]]
    elif argv[:2] == ["python", "-m"]:
        argv = [sys.executable, *argv[1:]]
    else:
        pytest.fail(f"command {command!r} is in RUN but is neither `lamella ...` nor `python -m ...`")
    return subprocess.run(
        argv,
        cwd=cwd,
        env=COMMAND_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )


_NUMBER = r"\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?"


def _line_pattern(line: str, numbers_vary: bool) -> str:
    if line.strip() == "...":
        return r"(?:.*\n)*?"
    parts = []
    for piece in re.split(r"(\.\.\.)", line):
        if piece == "...":
            parts.append(r".*?")
        elif numbers_vary:
            # Numbers (and the padding before them), the progress bar and the ETA ("?" before an
            # estimate exists) vary.
            tokens = re.split(rf"(ETA (?:\?|[\d:]+)|{_NUMBER}|\[[#-]+\])", piece)
            for j, token in enumerate(tokens):
                if j % 2 == 0:  # text, its runs of spaces (padding of the numbers) any length
                    parts.append(" +".join(re.escape(word) for word in re.split(r" +", token)))
                elif token.startswith("["):
                    parts.append(r"\[[#-]+\]")
                elif token.startswith("ETA"):
                    parts.append(rf"ETA (?:\?|{_NUMBER}(?::\d+)*)")
                else:
                    parts.append(rf"{_NUMBER}(?::\d+)*")
        else:
            parts.append(re.escape(piece))
    return "".join(parts) + r"\n"


def sample_pattern(sample: str, numbers_vary: bool) -> re.Pattern[str]:
    """The regex a command's whole output must match for this sample (see the module docstring)."""
    patterns = [_line_pattern(line.rstrip(), numbers_vary) for line in sample.strip("\n").splitlines()]
    pieces: list[str] = []
    for pattern in patterns:
        if numbers_vary and pieces and pieces[-1] == f"(?:{pattern})+":
            continue
        pieces.append(f"(?:{pattern})+" if numbers_vary else pattern)
    return re.compile("".join(pieces))


def test_sample_pattern_elides_and_lets_numbers_vary() -> None:
    assert sample_pattern("a 1\n...\nb\n", False).fullmatch("a 1\nx\ny\nb\n")
    assert not sample_pattern("a 1\nb\n", False).fullmatch("a 2\nb\n")
    progress = (
        "run [#---] 5% 10/200 ETA ?  elapsed 0:31\nrun [####] 100% 200/200 done  elapsed 0:52\nend 491.3\n"
    )
    pattern = sample_pattern(progress, True)
    assert pattern.fullmatch(
        "run [##--]  50% 1,024/2,048 ETA 0:06  elapsed 0:04\nrun [####] 100% 2,048/2,048 done  elapsed 0:05\nend 50\n"
    )
    assert pattern.fullmatch(
        "run [#---] 5% 1/2 ETA ?  elapsed 0:01\nrun [##--] 50% 1/2 ETA 0:01  elapsed 0:02\n"
        "run [####] 100% 2/2 done  elapsed 0:03\nend 1e+03\n"
    )
    assert not pattern.fullmatch("run [####] 100% 2/2 done  elapsed 0:03\nend 50\n")  # no progress line
    assert not pattern.fullmatch(
        "run [#---] 5% 1/2 ETA ?  elapsed 0:01\nrun [####] 100% 2/2 done  elapsed 0:03\nfin 50\n"
    )


def test_block_parser_and_command_splitter() -> None:
    page = (
        "```bash\npip install hatch && hatch run lamella train ppo --seeds 4   # main\n"
        "lamella eval aggregate runs/* \\\n  --metric m\n```\n"
        "<!-- output of: lamella train ppo --seeds 4 -->\n```\nout\n```\n"
        "<!-- illustration: a tree -->\n```\nruns/\n```\n```\nlamella demo\n```\n"
        "```console\n$ lamella x\nerr\n```\n```python\nx = 1\n```\n"
    )
    found = blocks(page)
    assert [b.kind for b in found] == ["shell", "output", "illustration", "untagged", "console", "code"]
    assert found[1].note == "lamella train ppo --seeds 4" and found[2].note == "a tree"
    assert commands(found[0].body) == [
        "pip install hatch",
        "hatch run lamella train ppo --seeds 4",
        "lamella eval aggregate 'runs/*' --metric m",
    ]
    assert classify("hatch run lamella train ppo --seeds 4") == ("run", _PPO_SHORT, _PPO_WHY)
    assert classify("lamella train ppo lr=3e-4")[0] == "run"
    assert classify("pip install 'lamella-envs[render]'")[0] == "skip"
    assert classify("lamella animate")[1] == ""
    with pytest.raises(pytest.fail.Exception, match="neither RUN nor NOT_RUN"):
        classify("rm -rf runs")


def console_pairs(body: str) -> list[tuple[str, str]]:
    """``(command, expected output)`` of each ``$ command`` of a console block."""
    pairs: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            pairs.append((line[2:].strip(), []))
        elif not pairs:
            pytest.fail(f"console block starts with {line!r}, not a `$ ` command")
        else:
            pairs[-1][1].append(line)
    return [(command, "\n".join(output)) for command, output in pairs]


PAGES_CHECKED = [p for p in PAGES if str(p.relative_to(ROOT)) not in RUN_BY_THEIR_OWN_TEST]


def test_pages_run_elsewhere_are_run_there() -> None:
    for page, test in RUN_BY_THEIR_OWN_TEST.items():
        assert (ROOT / page).is_file(), page
        assert Path(page).name in (ROOT / test).read_text(), f"{test} does not read {page}"


@pytest.mark.parametrize("page", PAGES_CHECKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_commands_run_and_print_their_samples(page: Path, tmp_path: Path) -> None:
    with LamellaServer(COMMAND_ENV) as server:
        check_page(page, tmp_path, server)


def check_page(page: Path, tmp_path: Path, server: LamellaServer) -> None:
    """Run the page's commands in order in ``tmp_path``; compare what they print to its samples."""
    name = str(page.relative_to(ROOT))
    outputs: dict[str, str] = {}  # command as written -> what it printed
    for block in blocks(page.read_text()):
        where = f"{name}:{block.line}"
        if block.kind == "untagged":
            pytest.fail(
                f"{where}: a ```{block.note} block: tag it bash (commands), console ($ commands and "
                "what they print), or mark the line before it <!-- output of: COMMAND --> or "
                "<!-- illustration: why -->"
            )
        elif block.kind == "shell":
            for command in commands(block.body):
                action, appended, _ = classify(command)
                if action == "run":
                    done = run(command, appended, tmp_path, server)
                    assert done.returncode == 0, (
                        f"{where}: `{command}` (+ `{appended}`) exits {done.returncode}:\n{done.stdout[-4000:]}"
                    )
                    outputs[command] = done.stdout
        elif block.kind == "console":
            for command, expected in console_pairs(block.body):
                action, appended, why = classify(command)
                assert action == "run", f"{where}: `{command}` shows its output but is not run ({why})"
                done = run(command, appended, tmp_path, server)
                assert sample_pattern(expected, False).fullmatch(done.stdout.rstrip("\n") + "\n"), (
                    f"{where}: `{command}` prints\n{done.stdout}\nnot what the page shows:\n{expected}"
                )
        elif block.kind == "output":
            assert block.note in outputs, (
                f"{where}: sample output of `{block.note}`, not a command run above it"
            )
            vary = (name, block.note) in NUMBERS_VARY
            printed = outputs[block.note]
            assert sample_pattern(block.body, vary).fullmatch(printed.rstrip("\n") + "\n"), (
                f"{where}: `{block.note}` (+ `{classify(block.note)[1]}`) prints\n{printed}\n"
                f"not what the page shows{' (numbers aside)' if vary else ''}:\n{block.body}"
            )
    # Every sample output whose numbers vary is on its page and was checked.
    for page_name, command in NUMBERS_VARY:
        if page_name == name:
            assert command in outputs, f"NUMBERS_VARY names `{command}`, which {name} does not run"
    if name == "README.md":
        # The root README's block works in order: aggregate found the training runs and skipped
        # the demo's and animate's directories.
        assert (tmp_path / "eval").is_dir() and (tmp_path / "checkpoint_results.csv").is_file()
