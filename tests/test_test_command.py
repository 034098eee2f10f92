"""The test command (scripts/test_all.py) fails a run whose checks were skipped."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _test_all():
    spec = importlib.util.spec_from_file_location("test_all", ROOT / "scripts" / "test_all.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["test_all"] = module  # dataclasses resolves the module's annotations through it
    spec.loader.exec_module(module)
    return module


PYTEST = [sys.executable, "-m", "pytest", "-ra", "-p", "no:cacheprovider", "-p", "no:xdist"]


def test_a_removed_reference_package_fails_the_run(tmp_path: Path) -> None:
    # gymnax is the reference of test_misc.py's parity tests; shadow it with a package that
    # cannot be imported, as if it had never been installed.
    (tmp_path / "gymnax").mkdir()
    (tmp_path / "gymnax" / "__init__.py").write_text("raise ImportError('gymnax removed by the test')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    test_all = _test_all()
    result = test_all.run(
        "envs without gymnax", [*PYTEST, "packages/envs/tests/test_misc.py", "-x", "-q"], [], env=env
    )
    assert not result.ok(), f"the run without gymnax passed: {result}"
    assert result.passed == 0, f"parity tests ran without their reference package: {result}"


def test_skips_fail_unless_allowed(tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "import pytest\n\n"
        "def test_runs():\n    assert True\n\n"
        "def test_needs_a_gpu():\n    pytest.skip('needs a GPU')\n"
    )
    test_all = _test_all()
    # The probe lies outside the workspace: without its root conftest.py, the --cpu-durations
    # that scripts/test_all.py puts in PYTEST_ADDOPTS would be an unknown option.
    env = {name: value for name, value in os.environ.items() if name != "PYTEST_ADDOPTS"}
    result = test_all.run("probe", [*PYTEST, str(probe)], [], env=env)
    assert (result.code, result.passed, result.skipped) == (0, 1, 1), result
    assert [reason for _, _, reason in result.skips] == ["needs a GPU"]
    assert not result.ok(allowed={})
    assert result.ok(allowed={("test_probe.py", "needs a GPU"): "no GPU on CI"})
    assert not result.ok(allowed={("test_probe.py", "needs a TPU"): "wrong reason"})


def test_steps_run_together_print_whole(capsys) -> None:
    # Two steps at once (the default --jobs 2): each step's output is printed in one piece when
    # it ends, never interleaved line by line with the other's.
    from concurrent.futures import ThreadPoolExecutor

    test_all = _test_all()
    talk = "import sys, time\nfor i in range(5):\n    print('{0}', i, flush=True); time.sleep(0.05)\n"
    results: list = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        steps = [
            pool.submit(test_all.run, name, [sys.executable, "-c", talk.format(name)], results, None, False)
            for name in ["first", "second"]
        ]
        for step in steps:
            step.result()
    printed = [
        line for line in capsys.readouterr().out.splitlines() if line.startswith(("first ", "second "))
    ]
    assert len(printed) == 10, printed
    assert printed in (
        [f"first {i}" for i in range(5)] + [f"second {i}" for i in range(5)],
        [f"second {i}" for i in range(5)] + [f"first {i}" for i in range(5)],
    ), printed
    assert sorted(result.name for result in results) == ["first", "second"]
    assert all(result.code == 0 for result in results)


def test_step_xla_flags_are_added_for_their_step_only(monkeypatch) -> None:
    test_all = _test_all()
    monkeypatch.setattr(test_all, "STEP_XLA_FLAGS", {"envs": "--xla_cpu_use_fusion_emitters=false"})
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=1")
    monkeypatch.delenv("LAMELLA_OPTIONAL_XLA_FLAGS", raising=False)
    env = test_all.step_env("envs")
    assert env is not None
    # Optional: the root conftest.py adds it where the step's XLA has it (next test).
    assert env["LAMELLA_OPTIONAL_XLA_FLAGS"] == "--xla_cpu_use_fusion_emitters=false"
    assert env["XLA_FLAGS"] == "--xla_backend_optimization_level=1"
    assert env["PATH"] == os.environ["PATH"]  # the rest of the environment is ours
    assert test_all.step_env("marl") is None  # no flags of its own: our environment as it is


def test_the_matrix_cells_find_their_python_through_pyenv(tmp_path: Path) -> None:
    test_all = _test_all()
    # A pyenv with 3.11 selected and two 3.77 releases installed, whose python3.77 shim runs only
    # where PYENV_VERSION selects one of them (as pyenv's shims do).
    (tmp_path / "pyenv").write_text(
        '#!/bin/sh\ncase "$1" in versions) printf "3.11.7\\n3.77.0\\n3.77.1\\n3.770.1\\n";;'
        " version-name) echo 3.11.7;; esac\n"
    )
    (tmp_path / "python3.77").write_text(
        '#!/bin/sh\ncase ":$PYENV_VERSION:" in *:3.77.*) exit 0;; esac\nexit 127\n'
    )
    for name in ("pyenv", "python3.77"):
        (tmp_path / name).chmod(0o755)
    env = {"PATH": f"{tmp_path}{os.pathsep}/usr/bin{os.pathsep}/bin"}
    assert test_all.python_on_path("3.77", env) == {"PYENV_VERSION": "3.11.7:3.77.1"}
    assert test_all.python_on_path("3.77", {**env, "PYENV_VERSION": "3.11.7:3.77.0"}) == {}  # runs already
    assert test_all.python_on_path("3.78", env) == {}  # not installed: Hatch will name it
    # The cells CI runs: one package against its lowest versions, and on the highest Python.
    assert test_all.MATRIX_CELLS == {
        "min-deps.buffers": ["hatch", "run", "+pkg=buffers", "min-deps:test"],
        "full.py3.13-buffers": ["hatch", "run", "+py=3.13", "+pkg=buffers", "full:test"],
    }
    assert test_all.STEP_PYTHON == {"full.py3.13-buffers": "3.13"}
    hatch = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["envs"]
    (full,) = hatch["full"]["matrix"]
    assert max(full["python"], key=lambda v: tuple(map(int, v.split(".")))) == test_all.HIGHEST_PYTHON
    assert (
        test_all.MATRIX_PACKAGE in full["pkg"]
        and test_all.MATRIX_PACKAGE in hatch["min-deps"]["matrix"][0]["pkg"]
    )


def _root_conftest():
    spec = importlib.util.spec_from_file_location("lamella_root_conftest", ROOT / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_optional_xla_flags_only_where_xla_has_them(monkeypatch) -> None:
    # jax 0.12's XLA has no --xla_cpu_use_fusion_emitters, and an unknown flag in XLA_FLAGS ends
    # the process: a flag XLA rejects stays out (a fake check here, the real one below).
    conftest = _root_conftest()
    monkeypatch.setenv("LAMELLA_OPTIONAL_XLA_FLAGS", "--xla_gone=false --xla_kept=true --xla_set_by_user=1")
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=1 --xla_set_by_user=0")
    asked: list[str] = []

    def accepts(flag: str) -> bool:
        asked.append(flag)
        return "--xla_gone" not in flag

    added, left_out = conftest.add_optional_xla_flags(accepts)
    assert (added, left_out) == (["--xla_kept=true"], ["--xla_gone=false"])
    assert os.environ["XLA_FLAGS"] == (
        "--xla_backend_optimization_level=1 --xla_set_by_user=0 --xla_kept=true"
    )
    # Both at once, then one by one to find the one refused; the user's own is not even checked.
    assert asked == ["--xla_gone=false --xla_kept=true", "--xla_gone=false", "--xla_kept=true"]
    assert "LAMELLA_OPTIONAL_XLA_FLAGS" not in os.environ  # xdist workers check nothing again

    # Where XLA has them all (the usual case), one check.
    monkeypatch.setenv("LAMELLA_OPTIONAL_XLA_FLAGS", "--xla_a=1 --xla_b=2")
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=1")
    asked.clear()
    added, left_out = conftest.add_optional_xla_flags(lambda flags: asked.append(flags) is None)
    assert (added, left_out) == (["--xla_a=1", "--xla_b=2"], [])
    assert asked == ["--xla_a=1 --xla_b=2"]
    assert os.environ["XLA_FLAGS"] == "--xla_backend_optimization_level=1 --xla_a=1 --xla_b=2"


def test_xla_flag_check_asks_this_xla() -> None:
    # Three child Pythons starting JAX (about 3-6 CPU-s). The optimisation level is the flag that
    # scripts/test_all.py sets for every step (jax 0.10.2 and 0.12 both have it).
    conftest = _root_conftest()
    assert conftest.xla_accepts("--xla_backend_optimization_level=1")
    assert not conftest.xla_accepts("--xla_lamella_no_such_flag=true")
    assert not conftest.xla_accepts("--xla_backend_optimization_level=1 --xla_lamella_no_such_flag=true")


def test_slow_tests_apart_keep_our_flags_and_the_rest_gets_the_packages(tmp_path: Path, monkeypatch) -> None:
    # A fake hatch that prints the marker it was given and the optional flags it sees, and fails
    # the run named in FAIL: the split step runs both, slow first, and fails if either failed.
    fake = tmp_path / "hatch"
    fake.write_text(
        "#!/bin/sh\n"
        'marker="$8"\n'
        'echo "$6 marker=$marker flags=${LAMELLA_OPTIONAL_XLA_FLAGS:-none}"\n'
        '[ "$marker" = "$FAIL" ] && exit 1\n'
        "exit 0\n"
    )
    fake.chmod(0o755)
    test_all = _test_all()
    monkeypatch.setattr(test_all, "SLOW_APART_XLA_FLAGS", {"agents": "--xla_probe=false"})
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("LAMELLA_OPTIONAL_XLA_FLAGS", "--xla_mine=1")
    import subprocess

    def run(package: str, fast: bool, fail: str = "") -> tuple[int, list[str]]:
        done = subprocess.run(
            test_all.package_step(package, fast),
            env={**os.environ, "FAIL": fail},
            capture_output=True,
            text=True,
        )
        return done.returncode, done.stdout.splitlines()

    code, lines = run("agents", fast=False)
    assert code == 0 and lines == [
        "packages/agents/tests marker=slow and not research flags=--xla_mine=1",
        "packages/agents/tests marker=not slow and not research flags=--xla_mine=1 --xla_probe=false",
    ], lines
    assert run("agents", fast=False, fail="slow and not research")[0] != 0
    assert run("agents", fast=False, fail="not slow and not research")[0] != 0
    code, lines = run("agents", fast=True)
    assert code == 0 and lines == [
        "packages/agents/tests marker=not slow and not research flags=--xla_mine=1 --xla_probe=false"
    ]
    # Other packages: one hatch test, no marker unless fast.
    assert test_all.package_step("envs", fast=False) == ["hatch", "test", "-i", "pkg=envs", "--parallel"]
    # Arguments after "--" replace hatch's default-args: the tests folder is named again.
    assert test_all.package_step("envs", fast=True)[-4:] == [
        "--",
        "packages/envs/tests",
        "-m",
        "not slow and not research",
    ]


def test_a_module_with_a_shared_fixture_is_one_unit_of_work_under_xdist(tmp_path: Path) -> None:
    conftest = _root_conftest()
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test_shared.py").write_text('@pytest.fixture(scope="module")\ndef run(): ...\n')
    (tmp_path / "t" / "test_session.py").write_text("@pytest.fixture(scope='session')\ndef run(): ...\n")
    (tmp_path / "t" / "test_plain.py").write_text("@pytest.fixture\ndef run(): ...\n")
    scope = conftest.shared_fixture_scope
    assert scope("t/test_shared.py::test_a[1]", tmp_path) == scope("t/test_shared.py::test_b", tmp_path)
    assert scope("t/test_session.py::test_a", tmp_path) == "t/test_session.py"
    assert scope("t/test_plain.py::test_a", tmp_path) == "t/test_plain.py::test_a"
    assert scope("t/test_plain.py::test_b", tmp_path) == "t/test_plain.py::test_b"
    # This repository's marl shaping tests share one training run per module.
    assert (
        scope("packages/marl/tests/test_shaping_meta.py::test_x", ROOT)
        == "packages/marl/tests/test_shaping_meta.py"
    )


def test_bytecode_is_cached_where_the_machine_forbids_it(tmp_path: Path) -> None:
    test_all = _test_all()
    environ = {"PYTHONDONTWRITEBYTECODE": "1", "OTHER": "x"}
    test_all.allow_bytecode(environ, tmp_path)
    assert environ == {"PYTHONPYCACHEPREFIX": str(tmp_path / "pycache"), "OTHER": "x"}
    # A prefix the user chose is kept; without PYTHONDONTWRITEBYTECODE nothing changes.
    chosen = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": "/elsewhere"}
    test_all.allow_bytecode(chosen, tmp_path)
    assert chosen == {"PYTHONPYCACHEPREFIX": "/elsewhere"}
    untouched = {"OTHER": "x"}
    test_all.allow_bytecode(untouched, tmp_path)
    assert untouched == {"OTHER": "x"}
    # A child Python started with the result writes the bytecode of what it imports there, and
    # nothing next to the source.
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "probe_module.py").write_text("VALUE = 1\n")
    child = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tmp_path / "src")}
    child.pop("PYTHONPYCACHEPREFIX", None)
    test_all.allow_bytecode(child, tmp_path)
    subprocess.run([sys.executable, "-c", "import probe_module"], env=child, check=True)
    assert list((tmp_path / "pycache").rglob("probe_module.*.pyc")), "no bytecode under the prefix"
    assert not (tmp_path / "src" / "__pycache__").exists()


def test_bytecode_of_removed_sources_is_pruned(tmp_path: Path) -> None:
    test_all = _test_all()
    prefix = tmp_path / "pycache"
    kept, gone = tmp_path / "src" / "pkg", tmp_path / "venv-removed" / "lib"
    kept.mkdir(parents=True)
    for source in (kept, gone):  # the prefix mirrors each source folder's absolute path
        mirror = prefix / source.relative_to("/")
        mirror.mkdir(parents=True)
        (mirror / "module.cpython-311.pyc").write_bytes(b"")
    assert test_all.prune_bytecode(prefix) == 1
    assert (prefix / kept.relative_to("/") / "module.cpython-311.pyc").exists()
    assert not (prefix / (tmp_path / "venv-removed").relative_to("/")).exists()
    assert test_all.prune_bytecode(prefix) == 0


def test_the_matrix_environments_keep_the_test_environments_variables() -> None:
    # Hatch replaces a template's env-vars table where an environment has its own (min-deps has
    # UV_RESOLUTION): the cells would then run on a GPU where one is present, preallocating it.
    envs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["envs"]
    wanted = envs["hatch-test"]["env-vars"]
    for name, env in envs.items():
        if env.get("template") == "hatch-test" and "env-vars" in env:
            assert wanted.items() <= env["env-vars"].items(), (name, env["env-vars"])
