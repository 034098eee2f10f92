"""Run every check of the workspace and report them all (never stop at the first failure).

Usage: ``python scripts/test_all.py [--fast] [--jobs N]``. The first step flags a package changed
without a new CHANGELOG entry (``scripts/check_changelogs.py``). Needs only ``hatch`` on PATH;
every environment is created from scratch by Hatch. The test steps run ``--jobs`` at a time
(default 2, longest first), each printed whole when it ends. The last line sums the pytest counts:
``total: N passed, N failed, N skipped``. A skipped test counts as failed unless its file and
reason are in ``ALLOWED_SKIPS`` (a check that did not run is not a check that passed).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# In layer order; a package is tested once its tests/ holds a test file.
PACKAGES = [
    name
    for name in ["envs", "buffers", "agents", "marl", "ued", "gcrl", "eval"]
    if any((ROOT / "packages" / name / "tests").glob("test_*.py"))
]
WHEEL_ALONE = ["envs", "eval"]  # packages whose built wheel must install and import alone
# One cell of each other axis of the test matrix (root README, "Test matrix"; the rest of it runs
# outside CI): the smallest package's tests against the lowest versions its pyproject allows
# (uv's lowest-direct resolution) and on the highest Python the workspace supports.
MATRIX_PACKAGE = "buffers"
HIGHEST_PYTHON = "3.13"
MATRIX_CELLS = {  # step key -> Hatch command
    f"min-deps.{MATRIX_PACKAGE}": ["hatch", "run", f"+pkg={MATRIX_PACKAGE}", "min-deps:test"],
    f"full.py{HIGHEST_PYTHON}-{MATRIX_PACKAGE}": [
        "hatch",
        "run",
        f"+py={HIGHEST_PYTHON}",
        f"+pkg={MATRIX_PACKAGE}",
        "full:test",
    ],
}
STEP_PYTHON = {f"full.py{HIGHEST_PYTHON}-{MATRIX_PACKAGE}": HIGHEST_PYTHON}  # step key -> Python it needs
# The order the test steps start in, longest first (each step's CPU seconds in a full run from a
# fresh clone, 2026-11-30, idle 2-core x86_64), so that the last step to start is a short one; a
# step not listed starts last.
STEP_SECONDS = {"marl": 864, "agents": 856, "envs": 746, "integration": 701, "ued": 488, "gcrl": 321}
# XLA flags added for one step's tests only. Tests that mostly compile run the same checks on less
# CPU time without XLA's newer CPU fusion emitters (the older elemental emitters), measured
# 2026-11-29 by running each step's tests in one process with and without the flag
# (lamella-envs, six test files run side by side: 363 -> 255 CPU-s; the whole steps of envs 916,
# marl 683, ued 319, gcrl 217 CPU-s of tests on an idle machine before -> 551, 513, 254, 194 with
# it, every test passing). Programs then run slower (a PPO CartPole run 1.6x) and their float
# results differ in the last bits from XLA's default (every learning test of these steps passed
# with it), so lamella-agents' learning tests (training-heavy: with the flag its TD3 and DDPG
# Pendulum learning tests missed their thresholds, 2026-11-29) keep XLA's default emitters
# (SLOW_APART_XLA_FLAGS, below). The integration step (the README pages' Python blocks and shell
# commands, the JaxMARL, release and UED evaluation tests) gets the flag too: every sample output
# the pages show still matches with it, and the pages' shell commands
# (tests/test_readme_commands.py, run with and without the flag back to back, 2026-11-30, jax
# 0.10.2, 2-core x86 shared with other jobs) cost 227.4 -> 176.0 CPU-s. A persistent compilation
# cache (JAX_COMPILATION_CACHE_DIR) shared by a step's processes was measured too and does not
# pay (docs/testing.md).
# They reach the step as LAMELLA_OPTIONAL_XLA_FLAGS: the root conftest.py adds each to XLA_FLAGS
# only where the step's XLA has it (jax 0.12, on Python >= 3.12, dropped this one, and an unknown
# flag in XLA_FLAGS aborts the process).
_OLD_EMITTERS = "--xla_cpu_use_fusion_emitters=false"
OPTIONAL_XLA_FLAGS = "LAMELLA_OPTIONAL_XLA_FLAGS"  # read by the root conftest.py
TEST_XLA_LEVEL = "LAMELLA_TEST_XLA_LEVEL"  # the level this script set; read by tests/test_docs.py
# Every step: the tests' simulated-device children (lamella.agents.testing, 4 CPU devices) run
# their devices' threads on 2 cores shared with another step, and XLA's CPU collectives end the
# process when one device's thread is 40 s late to a rendezvous (its default). A full run of
# 2026-11-30 on a slower 2-core host (Intel Xeon, 2.1 GHz) lost lamella-ued's whole device child
# that way ("Expected 4 threads to join the rendezvous, but only 3 of them arrived on time"):
# late is not wrong here, so the tests wait up to 10 minutes. Optional, as the flags above.
_COLLECTIVE_TIMEOUT = "--xla_cpu_collective_call_terminate_timeout_seconds=600"
# The steps that get the older emitters also compile each program's LLVM module in one piece
# (XLA splits it into parts compiled on parallel threads by default): less CPU time in all, and
# both cores are busy with other processes anyway. Measured 2026-12-05 (jax 0.10.2, 2-core Intel
# Xeon, each pair run at once, one pinned to each core, then swapped): lamella-envs' whole test
# folder in one process 504.0 -> 448.9 CPU-s of tests; lamella-ued's test_runners.py,
# test_paired.py and test_parallel.py 82.4 -> 75.8 and 80.0 -> 76.6. The split changes how
# LLVM contracts multiplies and adds, so float results may differ in the last bit, as with the
# emitters (one check_env comparison now allows 2 ulps; lamella.envs.testing, _assert_kept).
_ONE_CODEGEN_SPLIT = "--xla_cpu_parallel_codegen_split_count=1"
_COMPILE_LESS = f"{_OLD_EMITTERS} {_ONE_CODEGEN_SPLIT}"
STEP_XLA_FLAGS = {name: _COMPILE_LESS for name in ("envs", "marl", "ued", "gcrl", "integration")}
# Steps whose tests marked ``slow`` (learning tests that train for minutes) keep XLA's default
# flags while the step's other tests get these flags: the step runs pytest twice, the marked
# tests first. lamella-agents' learning tests are training-heavy (above), its other tests mostly
# compile: the test files of the driver, protocol, off-policy agents and PPO without their
# `slow` tests, run in one process with and without the flag, 2026-11-30 (jax 0.10.2, 2-core
# x86 shared with other jobs, load 9-14): 309.5 -> 173.2 CPU-s, every test passing.
SLOW_APART_XLA_FLAGS = {"agents": _COMPILE_LESS}

# A skipped test is a failed check unless it is listed here: (test file, reason pattern) -> why the
# skip is legitimate. A missing reference package is never a reason: declare it in pyproject.toml.
ALLOWED_SKIPS: dict[tuple[str, str], str] = {}

SUMMARY = re.compile(r"^=+ .*(passed|failed|error|skipped|no tests ran).* =+$")
# pytest -ra: "SKIPPED [2] packages/envs/tests/test_misc.py:26: could not import 'gymnax': ..."
SKIP_LINE = re.compile(r"^SKIPPED \[(\d+)\] ([^:]+):(\d+): (.*)$")


@dataclasses.dataclass
class StepResult:
    name: str
    code: int
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # user + system time of the step and every process it waited for
    skips: list[tuple[int, str, str]] = dataclasses.field(default_factory=list)  # (count, file, reason)

    def unallowed_skips(
        self, allowed: dict[tuple[str, str], str] | None = None
    ) -> list[tuple[int, str, str]]:
        allowed = ALLOWED_SKIPS if allowed is None else allowed
        return [
            (count, path, reason)
            for count, path, reason in self.skips
            if not any(
                path.rsplit(":", 1)[0].endswith(file) and re.search(pattern, reason)
                for file, pattern in allowed
            )
        ]

    def ok(self, allowed: dict[tuple[str, str], str] | None = None) -> bool:
        unlisted = sum(count for count, *_ in self.unallowed_skips(allowed))
        # A skip pytest counted but -ra did not explain is unlisted too.
        unexplained = self.skipped - sum(count for count, *_ in self.skips)
        return self.code == 0 and unlisted == 0 and unexplained <= 0


_PRINT = threading.Lock()


def run(
    name: str,
    command: list[str],
    results: list[StepResult],
    env: dict[str, str] | None = None,
    live: bool = True,
) -> StepResult:
    """Run one step; its output goes to stdout as it comes (``live``) or whole when it ends."""
    header = f"\n=== {name}: {' '.join(command)}\n"
    if live:
        print(header, end="", flush=True)
    else:
        with _PRINT:
            print(f"=== started: {name}", flush=True)
    start = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    assert process.stdout is not None
    result = StepResult(name, 0)
    held = [header]
    for line in process.stdout:
        if live:
            sys.stdout.write(line)
            sys.stdout.flush()
        else:
            held.append(line)
        stripped = line.strip()
        if SUMMARY.match(stripped):
            result.passed += sum(int(n) for n in re.findall(r"(\d+) passed", stripped))
            result.failed += sum(int(n) for n in re.findall(r"(\d+) (?:failed|errors?)\b", stripped))
            result.skipped += sum(int(n) for n in re.findall(r"(\d+) skipped", stripped))
        elif skip := SKIP_LINE.match(stripped):
            result.skips.append((int(skip.group(1)), f"{skip.group(2)}:{skip.group(3)}", skip.group(4)))
    # wait4, not wait: its rusage holds the CPU time of the step's whole process tree (hatch,
    # pytest, its xdist workers and their children), the figure that a loaded machine does not
    # inflate the way it inflates wall time.
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = result.code = os.waitstatus_to_exitcode(status)
    result.seconds = time.perf_counter() - start
    result.cpu_seconds = usage.ru_utime + usage.ru_stime
    with _PRINT:
        if not live:
            sys.stdout.write("".join(held))
        results.append(result)
        for count, where, reason in result.unallowed_skips():
            print(
                f"!!! {name}: {count} skipped at {where} ({reason}): not in ALLOWED_SKIPS, counted as failed"
            )
        sys.stdout.flush()
    return result


def wheel_installs_alone(package: str) -> list[str]:
    """Build the package's wheel and import it in a fresh venv holding nothing else (removed after)."""
    out = tempfile.mkdtemp(prefix=f"lamella-{package}-wheel-")
    script = (
        f"trap 'rm -rf {out}' EXIT; set -e; uv build --wheel --out-dir {out} packages/{package};"
        f" uv venv --quiet {out}/venv; VIRTUAL_ENV={out}/venv uv pip install --quiet {out}/*.whl;"
        f" {out}/venv/bin/python -c 'import lamella.{package} as m; print(\"imported\", m.__name__, m.__version__)';"
        f" VIRTUAL_ENV={out}/venv uv pip list"
    )
    return ["bash", "-c", script]


def hatch_data_dir() -> Path:
    """Where Hatch keeps this run's environments: one folder per content of every pyproject.toml.

    Hatch installs the workspace members once, when it creates an environment, and never again:
    an entry point or a dependency added to a member later is missing from an environment it made
    before (a CI machine that keeps ``~/.local/share/hatch`` between runs then fails with
    "Unknown algorithm"). Keying the folder by the pyproject files makes every change to them
    give fresh environments, while runs on unchanged metadata reuse the ones already built.
    """
    digest = hashlib.sha256()
    for path in sorted([ROOT / "pyproject.toml", *ROOT.glob("packages/*/pyproject.toml")]):
        digest.update(path.relative_to(ROOT).as_posix().encode())
        digest.update(path.read_bytes())
    return Path(tempfile.gettempdir()) / "lamella-hatch" / digest.hexdigest()[:16]


def allow_bytecode(environ: MutableMapping[str, str], data_dir: Path) -> None:
    """Let the test processes cache compiled Python: drop ``PYTHONDONTWRITEBYTECODE`` from
    ``environ`` and, where it was set, put the bytecode under ``data_dir`` (``PYTHONPYCACHEPREFIX``,
    unless one is set) instead of in ``__pycache__`` folders in the tree.

    With it set (this project's 2-core machines set it), every Python process compiles every
    module it imports from source: jax, flax, optax and scipy again in each pytest worker, each
    README command and each device child. Measured 2026-11-30 (2-core x86, jax 0.10.2): ``import
    lamella.marl`` 6.3 -> 1.8 CPU-s; collecting lamella-envs' tests 29.2 -> 13.9 CPU-s; the tests of
    ``test_driver.py`` without the slow ones 41-44 -> 30-32 CPU-s (cached bytecode, second run).
    """
    if environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None and not environ.get("PYTHONPYCACHEPREFIX"):
        environ["PYTHONPYCACHEPREFIX"] = str(data_dir / "pycache")


def prune_bytecode(prefix: Path) -> int:
    """Remove the bytecode under ``prefix`` (a ``PYTHONPYCACHEPREFIX``, which mirrors each source
    folder's absolute path) whose source folder no longer exists; return how many folders went.

    The run's throw-away virtual environments (the wheel steps', the release tests' compatibility
    environments), pytest's temporary folders and removed clones leave their sources' bytecode
    there; without this the prefix grew by about 0.5 GB a run on a machine that keeps it.
    """
    removed = 0
    for folder, subfolders, _ in os.walk(prefix):
        kept = []
        for name in subfolders:
            cached = Path(folder) / name
            if Path("/", cached.relative_to(prefix)).exists():
                kept.append(name)
            else:
                shutil.rmtree(cached, ignore_errors=True)
                removed += 1
        subfolders[:] = kept  # os.walk descends only into the folders kept
    return removed


def step_env(key: str) -> dict[str, str] | None:
    """The environment of step ``key``: ours, with its ``STEP_XLA_FLAGS`` and, for a matrix cell
    on another Python, what makes that Python runnable (None: ours as is).

    The flags go in ``LAMELLA_OPTIONAL_XLA_FLAGS``, not in ``XLA_FLAGS``: the root ``conftest.py``
    moves each into ``XLA_FLAGS`` where the step's XLA has it, and leaves a flag the user's
    ``XLA_FLAGS`` already sets as the user set it.
    """
    env = dict(os.environ)
    extra = STEP_XLA_FLAGS.get(key, "").split()
    if extra:
        env[OPTIONAL_XLA_FLAGS] = " ".join([env.get(OPTIONAL_XLA_FLAGS, ""), *extra]).strip()
    if key in STEP_PYTHON:
        env.update(python_on_path(STEP_PYTHON[key], env))
    return None if env == dict(os.environ) else env


def python_on_path(version: str, environ: Mapping[str, str]) -> dict[str, str]:
    """What to add to ``environ`` so that ``python<version>`` runs, for Hatch to find it: nothing
    where it already runs; where pyenv has that version installed but not selected (this
    project's machines: pyenv's 3.11, 3.12 and 3.13, only 3.11 selected), ``PYENV_VERSION`` with
    it appended. Where neither holds, nothing: Hatch then fails the step, naming the Python."""

    def runs(env: Mapping[str, str]) -> bool:
        try:
            command = [f"python{version}", "-c", ""]
            return subprocess.run(command, env=dict(env), capture_output=True).returncode == 0
        except OSError:
            return False

    if runs(environ):
        return {}
    try:
        listed = subprocess.run(
            ["pyenv", "versions", "--bare"], env=dict(environ), capture_output=True, text=True, check=True
        ).stdout.split()
        selected = subprocess.run(
            ["pyenv", "version-name"], env=dict(environ), capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {}
    installed = [name for name in listed if re.fullmatch(rf"{re.escape(version)}\.\d+", name)]
    if not installed:
        return {}
    added = {"PYENV_VERSION": ":".join([*selected.split(":"), installed[-1]])}
    return added if runs({**environ, **added}) else {}


def package_step(package: str, fast: bool) -> list[str]:
    """The command that tests ``package``: ``hatch test`` on the package's environment, without
    the tests marked ``slow`` where ``fast``. For a package in ``SLOW_APART_XLA_FLAGS``: a shell
    that runs its ``slow`` tests with our XLA flags, then (also where ``fast``) the others with
    the package's flags added to ``LAMELLA_OPTIONAL_XLA_FLAGS``; it fails if either run fails."""
    test = ["hatch", "test", "-i", f"pkg={package}", "--parallel"]
    # Arguments after "--" replace the environment's default-args (its tests folder): name it.
    tests = ["--", f"packages/{package}/tests"]
    rest = [*test, *tests, "-m", "not slow and not research"]
    if package not in SLOW_APART_XLA_FLAGS:
        return rest if fast else test
    flags = SLOW_APART_XLA_FLAGS[package]
    others = f'{OPTIONAL_XLA_FLAGS}="${{{OPTIONAL_XLA_FLAGS}:-}} {flags}" {shlex.join(rest)}'
    if fast:
        return ["bash", "-c", others]
    slow = shlex.join([*test, *tests, "-m", "slow and not research"])
    return ["bash", "-c", f"{slow}; slow=$?; {others}; others=$?; exit $(( slow || others ))"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fast", action="store_true", help="skip tests marked slow")
    parser.add_argument(
        "--jobs",
        type=int,
        default=2,
        help="test steps run at once (each is itself pytest on 2 workers: two steps keep both "
        "cores busy while the other waits for its last test); 1 streams each step's output live",
    )
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, not {args.jobs}")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if "HATCH_DATA_DIR" not in os.environ:
        os.environ["HATCH_DATA_DIR"] = str(hatch_data_dir())
        print(f"Hatch environments: {os.environ['HATCH_DATA_DIR']}", flush=True)
    allow_bytecode(os.environ, Path(os.environ["HATCH_DATA_DIR"]))
    # The 30 tests of every step that cost the most CPU time, printed at its end: where the CI
    # minutes go (the root conftest.py's --cpu-durations; wall times mislead on a loaded machine).
    os.environ.setdefault("PYTEST_ADDOPTS", "--cpu-durations=30")
    # Every step's programs compile with LLVM at -O1 instead of XLA's default -O2: the tests are
    # mostly compiling, and -O1 runs the same checks on less CPU time (measured back to back on an
    # idle 2-core machine: the marl README's Python blocks 126.6 -> 99.9 CPU-s; three agents
    # learning tests, training included, 181.6 -> 172.6). -O0 costs more than it saves where tests
    # train (lamella-gcrl's step 277 -> 386 CPU-s). An XLA_FLAGS that already sets the level wins;
    # other XLA_FLAGS are kept.
    # The level goes in TEST_XLA_LEVEL too, so that a test may tell it from a level the user set
    # (tests/test_docs.py compiles the README pages' Python blocks at -O0 instead).
    flags = os.environ.get("XLA_FLAGS", "")
    if "--xla_backend_optimization_level" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_backend_optimization_level=1".strip()
        os.environ[TEST_XLA_LEVEL] = "1"
    else:
        os.environ.pop(TEST_XLA_LEVEL, None)
    os.environ[OPTIONAL_XLA_FLAGS] = " ".join(
        [os.environ.get(OPTIONAL_XLA_FLAGS, ""), _COLLECTIVE_TIMEOUT]
    ).strip()
    results: list[StepResult] = []
    # A package whose src/ or pyproject.toml changed since its last release tag (or the merge base
    # with main) needs a new [Unreleased] entry in its CHANGELOG (scripts/check_changelogs.py).
    run("changelog entries", [sys.executable, "scripts/check_changelogs.py"], results)
    steps: list[tuple[str, str, list[str]]] = [  # (key in STEP_SECONDS, step name, command)
        (package, f"tests lamella-{package}", package_step(package, args.fast)) for package in PACKAGES
    ]
    steps.append(
        (
            "integration",
            "tests integration",
            ["hatch", "run", "integration:test", *(["-m", "not slow and not research"] if args.fast else [])],
        )
    )
    steps.extend(
        (f"wheel {package}", f"wheel lamella-{package} installs alone", wheel_installs_alone(package))
        for package in WHEEL_ALONE
    )
    marks = ["-m", "not slow and not research"] if args.fast else []
    steps.extend((key, f"matrix {key}", [*command, *marks]) for key, command in MATRIX_CELLS.items())
    # Lint and types (mypy: about 40 s on one core) go with the short steps at the end, where one
    # core would otherwise wait for the last long step, not before every test step.
    steps += [
        ("lint", "lint", ["hatch", "run", "lint:check"]),
        ("types", "types", ["hatch", "run", "types:check"]),
    ]
    steps.sort(key=lambda step: -STEP_SECONDS.get(step[0], 0))  # stable: the rest in order
    if args.jobs == 1:
        for key, name, command in steps:
            run(name, command, results, step_env(key))
    else:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for done in [
                pool.submit(run, name, command, results, step_env(key), False) for key, name, command in steps
            ]:
                done.result()
    order = [name for _, name, _ in steps]
    results.sort(key=lambda result: order.index(result.name) if result.name in order else -1)

    prefix = os.environ.get("PYTHONPYCACHEPREFIX")
    if prefix and Path(prefix).is_relative_to(os.environ["HATCH_DATA_DIR"]):  # ours, not the user's
        if removed := prune_bytecode(Path(prefix)):
            print(f"\nbytecode of {removed} removed source folders pruned from {prefix}", flush=True)

    print("\n=== summary")
    total_passed = total_failed = total_skipped = 0
    for result in results:
        status = "ok" if result.ok() else f"FAILED (exit {result.code})"
        unlisted = sum(count for count, *_ in result.unallowed_skips())
        if result.code == 0 and not result.ok():
            status = f"FAILED ({max(unlisted, result.skipped)} skipped, not allowed)"
        counts = (
            f" ({result.passed} passed, {result.failed} failed, {result.skipped} skipped)"
            if result.passed or result.failed or result.skipped
            else ""
        )
        print(
            f"  {result.name:<40} {status}{counts} in {result.seconds:.0f}s ({result.cpu_seconds:.0f} CPU-s)"
        )
        total_passed += result.passed
        total_skipped += result.skipped
        # A step that failed without a pytest count (lint, types, wheel) counts as one failure;
        # a skip that is not allowed counts as a failure.
        total_failed += result.failed + (0 if result.ok() or result.failed else max(unlisted, 1))
    print(f"total: {total_passed} passed, {total_failed} failed, {total_skipped} skipped", flush=True)
    return 0 if all(result.ok() for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
