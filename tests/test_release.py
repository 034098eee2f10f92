"""scripts/release.py against real indexes: refusals change nothing, and a release installs and trains.

The end-to-end test starts pypiserver on a free port, releases lamella-buffers, lamella-envs and
lamella-agents from a copy of this working tree, installs ``lamella-agents`` from that index into a
fresh virtual environment (third-party packages from the default index) and trains a short PPO run.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GIT_ENV = {
    "GIT_AUTHOR_NAME": "release test",
    "GIT_AUTHOR_EMAIL": "release@test.invalid",
    "GIT_COMMITTER_NAME": "release test",
    "GIT_COMMITTER_EMAIL": "release@test.invalid",
}


def _copy_of_the_tree(dest: Path) -> Path:
    """The working tree (tracked and untracked, not ignored files) as a fresh one-commit repository."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (entry.decode() for entry in listed)):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "tree under test"]):
        subprocess.run(["git", *command], cwd=dest, check=True, env={**os.environ, **GIT_ENV})
    return dest


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return _copy_of_the_tree(tmp_path / "repo")


def _release(repo: Path, *args: str, hatch_data: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        **GIT_ENV,
        "HATCH_DATA_DIR": str(hatch_data),
        "TWINE_USERNAME": "lamella",
        "TWINE_PASSWORD": "test",
    }
    return subprocess.run(
        [sys.executable, "scripts/release.py", *args, "--skip-tests"],
        cwd=repo,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


class _RefusingIndex(http.server.BaseHTTPRequestHandler):
    """An index that answers every GET and refuses every upload (403)."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"<html></html>")

    def do_POST(self) -> None:
        self.send_response(403, "uploads refused by the test")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing_index() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RefusingIndex)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_bad_input_is_refused_before_anything_changes(repo: Path, refusing_index: str, tmp_path) -> None:
    # buffers' [Unreleased] emptied: a release without a CHANGELOG entry.
    changelog = repo / "packages" / "buffers" / "CHANGELOG.md"
    text = changelog.read_text()
    start = text.index("## [Unreleased]") + len("## [Unreleased]\n")
    following = text.find("\n## [", start)
    changelog.write_text(text[:start] + ("" if following < 0 else text[following:]))
    subprocess.run(
        ["git", "commit", "-qam", "empty [Unreleased]"], cwd=repo, check=True, env={**os.environ, **GIT_ENV}
    )
    head = _git(repo, "rev-parse", "HEAD")
    current = re.search(r'"(.+)"', (repo / "packages/envs/src/lamella/envs/__about__.py").read_text()).group(
        1
    )
    closed = f"http://127.0.0.1:{_free_port()}/"
    cases = [
        ("dirty tree", ["envs", "patch", "--index-url", refusing_index], "not clean"),
        ("non-increasing version", ["envs", current, "--index-url", refusing_index], "does not increase"),
        (
            "missing CHANGELOG entry",
            ["buffers", "patch", "--index-url", refusing_index],
            "empty '## [Unreleased]'",
        ),
        # lamella-agents requires lamella-envs <0.2 (and so do marl, ued, gcrl, eval).
        (
            "range excludes a sibling",
            ["envs", "minor", "--index-url", refusing_index],
            "requires lamella-envs",
        ),
        ("unreachable index", ["envs", "patch", "--index-url", closed], "unreachable"),
        ("unknown package", ["nope", "patch", "--index-url", refusing_index], "no package 'nope'"),
    ]
    stray = repo / "stray.txt"
    stray.write_text("not committed\n")
    for name, args, message in cases:
        result = _release(repo, *args, hatch_data=tmp_path / "hatch")
        errors = [line for line in result.stderr.splitlines() if line.startswith("release: error:")]
        assert result.returncode == 2, (name, result.stdout, result.stderr)
        assert len(errors) == 1 and message in errors[0], (name, result.stderr)
        assert result.stderr.strip() == errors[0], (name, "a refusal is one line", result.stderr)
        assert "release: bump" not in result.stdout, (name, "changed the tree before refusing")
        assert _git(repo, "rev-parse", "HEAD") == head, name
        assert _git(repo, "tag") == "", name
        assert _git(repo, "status", "--porcelain") == ("?? stray.txt\n" if stray.exists() else ""), name
        stray.unlink(missing_ok=True)


def test_an_upload_failure_rolls_back_the_bump_the_commit_and_the_tag(
    repo: Path, refusing_index: str, tmp_path
) -> None:
    head = _git(repo, "rev-parse", "HEAD")
    about = (repo / "packages/buffers/src/lamella/buffers/__about__.py").read_text()
    result = _release(repo, "buffers", "patch", "--index-url", refusing_index, hatch_data=tmp_path / "hatch")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "upload to" in result.stderr and "403" in result.stderr, result.stderr
    assert "render the metadata" in result.stdout, (
        "the artefacts were not built and checked before the upload"
    )
    assert _git(repo, "rev-parse", "HEAD") == head
    assert _git(repo, "tag") == ""
    assert _git(repo, "status", "--porcelain") == ""
    assert (repo / "packages/buffers/src/lamella/buffers/__about__.py").read_text() == about


@pytest.fixture
def pypiserver(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    served = tmp_path / "index"
    served.mkdir()
    port = _free_port()
    log = (tmp_path / "pypiserver.log").open("w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pypiserver",
            "run",
            "-i",
            "127.0.0.1",
            "-p",
            str(port),
            "-a",
            ".",
            "-P",
            ".",
            str(served),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, (tmp_path / "pypiserver.log").read_text()
                time.sleep(0.1)
        else:
            raise AssertionError(f"pypiserver did not answer on {url}")
        yield url, served
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()


def test_released_agents_install_from_the_index_and_train(repo: Path, pypiserver, tmp_path: Path) -> None:
    url, served = pypiserver
    released = {}
    # lamella-agents needs lamella-envs and lamella-buffers: release the layers below it first.
    for package in ("buffers", "envs", "agents"):
        result = _release(repo, package, "patch", "--index-url", url, hatch_data=tmp_path / "hatch")
        assert result.returncode == 0, result.stdout + result.stderr
        tag = re.search(r"released (lamella-\S+-v(\S+)) to", result.stdout)
        assert tag is not None, result.stdout
        released[f"lamella-{package}"] = tag.group(2)
        assert _git(repo, "tag", "--list", tag.group(1)).strip() == tag.group(1)
        changelog = (repo / "packages" / package / "CHANGELOG.md").read_text()
        assert re.search(
            rf"^## \[Unreleased\]\n\n## \[{re.escape(tag.group(2))}\] - \d{{4}}-\d\d-\d\d$", changelog, re.M
        )
    assert _git(repo, "status", "--porcelain") == ""
    assert sorted(path.name for path in served.iterdir()) == sorted(
        f"{name.replace('-', '_')}-{version}{suffix}"
        for name, version in released.items()
        for suffix in ("-py3-none-any.whl", ".tar.gz")
    )

    # A fresh venv; lamella-* may come only from the local index (uv takes a package from the first
    # index that has it), third-party packages from the default index.
    uv = shutil.which("uv")
    assert uv is not None, "uv is needed on PATH for the fresh virtual environment"
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [
            uv,
            "pip",
            "install",
            "--quiet",
            "--python",
            str(python),
            "--index",
            f"{url}simple/",
            f"lamella-agents=={released['lamella-agents']}",
        ],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr
    listed = subprocess.run(
        [uv, "pip", "list", "--python", str(python), "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    installed = {entry["name"]: entry for entry in json.loads(listed.stdout)}
    for name, version in released.items():
        assert installed[name]["version"] == version, installed.get(name)
        assert "editable_project_location" not in installed[name], (
            f"{name} installed from the tree, not the index"
        )

    runs = tmp_path / "runs"
    train = subprocess.run(
        [
            str(venv / "bin" / "lamella"),
            "train",
            "ppo",
            "--env",
            "CartPole-v1",
            "--out-dir",
            str(runs),
            "total_timesteps=2048",
            "num_envs=4",
            "num_steps=64",
            "eval_episodes=2",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        timeout=300,
    )
    assert train.returncode == 0, train.stdout + train.stderr
    config = json.loads((runs / "config.json").read_text())
    assert config["algorithm"] == "ppo" and config["config"]["total_timesteps"] == 2048, config
    seeds = json.loads((runs / "metrics.json").read_text())["classic_control"]["CartPole-v1"]["ppo"]
    steps = max(
        step["step_count"] for seed in seeds.values() for key, step in seed.items() if key.startswith("step_")
    )
    assert steps == 2048, f"the run log ends at step {steps}, not 2048"


def _compat(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "scripts/compat.py", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        timeout=600,
    )


# A test of lamella-agents that builds PPO runners on lamella-envs' CartPole and checks their
# validation (no compile: a few CPU-s).
_AGENTS_TEST = "packages/agents/tests/test_ppo.py::test_bad_config_raises_at_construction"


def test_a_release_is_tested_against_the_tree_both_ways(repo: Path) -> None:
    """scripts/compat.py: lamella-envs from its release tag under today's lamella-agents (its tests pass,
    and a test needing what envs gained since the release fails), and the reverse: lamella-agents from
    its tag, with its own tests, on today's lamella-envs. Refusals come before anything is built."""
    git_env = {**os.environ, **GIT_ENV}
    for package in ("envs", "agents"):
        version = re.search(
            r'"(.+)"', (repo / f"packages/{package}/src/lamella/{package}/__about__.py").read_text()
        ).group(1)
        subprocess.run(
            ["git", "tag", "-a", f"lamella-{package}-v{version}", "-m", "r"], cwd=repo, env=git_env
        )
    # After the releases, lamella-envs gains a function and lamella-agents a test that needs it.
    init = repo / "packages/envs/src/lamella/envs/__init__.py"
    init.write_text(init.read_text() + "\n\ndef added_after_the_release() -> int:\n    return 1\n")
    probe = repo / "packages/agents/tests/test_needs_new_envs.py"
    probe.write_text(
        "def test_uses_what_envs_gained():\n"
        "    from lamella.envs import added_after_the_release\n\n"
        "    assert added_after_the_release() == 1\n"
    )
    subprocess.run(["git", "commit", "-qam", "after", "--allow-empty"], cwd=repo, check=True, env=git_env)

    forward = _compat(
        repo, "--released", "envs", "--test", "agents", "--pytest-args", f"{_AGENTS_TEST} {probe} -q"
    )
    assert forward.returncode == 1, forward.stdout + forward.stderr
    assert re.search(r"\b1 failed, \d+ passed\b", forward.stdout), forward.stdout
    assert "ImportError" in forward.stdout and "added_after_the_release" in forward.stdout, forward.stdout
    assert "lamella-envs 0.1.0 (lamella-envs-v0.1.0)" in forward.stdout, forward.stdout
    assert "lamella-agents 0.1.0 (tree)" in forward.stdout and "FAILED (pytest exit 1)" in forward.stdout

    reverse = _compat(repo, "--released", "agents", "--test", "agents", "--pytest-args", f"{_AGENTS_TEST} -q")
    assert reverse.returncode == 0, reverse.stdout + reverse.stderr
    assert (
        "the tests of lamella-agents from the release" in reverse.stdout
        and "lamella-envs 0.1.0 (tree)" in reverse.stdout
    )
    assert re.search(r"\b\d+ passed\b", reverse.stdout) and "failed" not in reverse.stdout, reverse.stdout

    # Refusals: one line on stderr, exit 2, nothing built.
    agents = repo / "packages/agents/pyproject.toml"
    agents.write_text(re.sub(r'"lamella-envs[^"]*"', '"lamella-envs>=0.2,<0.3"', agents.read_text(), count=1))
    cases = [
        (["--released", "envs", "--test", "agents"], "the ranges exclude lamella-envs-v0.1.0"),
        (["--released", "buffers", "--test", "agents"], "lamella-buffers has no release tag"),
        (["--released", "envs", "--test", "agents", "--tag", "no-such-ref"], "no-such-ref is not a tag"),
        (["--released", "nope", "--test", "agents"], "no package 'nope'"),
        (["--released", "agents", "--test", "buffers", "--tag", "HEAD"], "holds no lamella-agents"),
    ]
    for args, message in cases:
        result = _compat(repo, *args)
        errors = [line for line in result.stderr.splitlines() if line.startswith("compat: error:")]
        assert result.returncode == 2 and len(errors) == 1 and message in errors[0], (args, result.stderr)
        assert "compat: build" not in result.stdout, (args, "built before refusing")
