"""scripts/check_changelogs.py flags a package changed without a new CHANGELOG entry."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@test.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@test.invalid",
}
CHANGELOG = "# Changelog\n\n## [Unreleased]\n\n### Added\n- {entry}\n\n## [0.1.0] - 2026-01-01\n\n- first\n"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env=ENV)


def _check(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_changelogs.py"), "--root", str(repo), *args],
        capture_output=True,
        text=True,
    )


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for package in ("alpha", "beta"):
        folder = repo / "packages" / package
        (folder / "src").mkdir(parents=True)
        (folder / "tests").mkdir()
        (folder / "pyproject.toml").write_text(f'[project]\nname = "lamella-{package}"\n')
        (folder / "src" / "code.py").write_text("x = 1\n")
        (folder / "CHANGELOG.md").write_text(CHANGELOG.format(entry="an old entry"))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    _git(repo, "checkout", "-q", "-b", "work")
    return repo


def test_a_source_change_needs_a_new_entry(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    assert _check(repo).returncode == 0
    # Tests, READMEs: no entry needed.
    (repo / "packages/alpha/tests/test_new.py").write_text("def test(): pass\n")
    assert _check(repo).returncode == 0, _check(repo).stdout
    (repo / "packages/alpha/src/code.py").write_text("x = 2\n")
    _git(repo, "commit", "-qam", "alpha changes")
    result = _check(repo)
    assert result.returncode == 1, result.stdout
    assert "lamella-alpha changed since the merge base with main" in result.stdout
    assert "packages/alpha/src/code.py" in result.stdout and "lamella-beta" not in result.stdout
    # An untracked new module is a change too; the old [Unreleased] entry is not a new one.
    (repo / "packages/beta/src/new.py").write_text("y = 1\n")
    assert "lamella-beta changed" in _check(repo).stdout
    (repo / "packages/alpha/CHANGELOG.md").write_text(CHANGELOG.format(entry="an old entry\n- x is 2"))
    (repo / "packages/beta/CHANGELOG.md").write_text(CHANGELOG.format(entry="an old entry\n- new.py"))
    result = _check(repo)
    assert result.returncode == 0, result.stdout


def test_a_released_package_is_compared_with_its_last_tag(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / "packages/alpha/src/code.py").write_text("x = 2\n")
    (repo / "packages/alpha/CHANGELOG.md").write_text(CHANGELOG.format(entry="x is 2"))
    _git(repo, "commit", "-qam", "alpha 0.1.1")
    _git(repo, "tag", "lamella-alpha-v0.1.1")
    assert _check(repo).returncode == 0
    # After the release, the [Unreleased] entries at the tag are not new ones.
    (repo / "packages/alpha/pyproject.toml").write_text('[project]\nname = "lamella-alpha"\nversion = "9"\n')
    result = _check(repo)
    assert result.returncode == 1 and "since its last release tag lamella-alpha-v0.1.1" in result.stdout


def test_a_missing_base_is_an_error(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    result = _check(repo, "--base", "no-such-branch")
    assert result.returncode == 2
    assert "pass --base" in result.stderr


def test_a_final_release_after_its_pre_release_is_the_base(tmp_path: Path) -> None:
    # git's plain version sort puts 0.2.0rc1 after 0.2.0; the newest release is 0.2.0.
    repo = _repo(tmp_path)
    released = CHANGELOG.replace("## [Unreleased]\n\n### Added\n- {entry}\n\n", "## [Unreleased]\n\n")
    for version, code in (("0.2.0rc1", "x = 2\n"), ("0.2.0", "x = 3\n")):
        (repo / "packages/alpha/src/code.py").write_text(code)
        (repo / "packages/alpha/CHANGELOG.md").write_text(released)
        _git(repo, "commit", "-qam", f"alpha {version}")
        _git(repo, "tag", f"lamella-alpha-v{version}")
    result = _check(repo)
    assert result.returncode == 0, result.stdout
