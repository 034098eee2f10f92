"""Flag every package whose shipped files changed without a new CHANGELOG entry.

Usage: ``python scripts/check_changelogs.py [--base REF] [--root PATH]``; ``scripts/test_all.py``
runs it. The rule, per package under ``packages/``:

- the base is the package's newest release tag ``lamella-<pkg>-v<version>``; a package never
  released is compared with the merge base of HEAD and ``--base`` (default ``main``, or the
  ``LAMELLA_BASE_REF`` environment variable);
- a change is any difference between the base and the working tree (untracked files included) in
  ``packages/<pkg>/src/`` or ``packages/<pkg>/pyproject.toml``; tests, READMEs and benchmarks
  need no entry;
- a changed package needs at least one entry line under ``## [Unreleased]`` in its CHANGELOG.md
  that the base's CHANGELOG did not have.

Exit status 0 when every changed package has a new entry, 1 when one lacks it (each is named),
2 when the base cannot be found.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

SHIPPED = ("src", "pyproject.toml")


class BaseError(Exception):
    pass


def git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


def unreleased_entries(changelog: str) -> set[str]:
    heading = re.search(r"^## \[Unreleased\][^\n]*\n", changelog, re.M)
    if heading is None:
        return set()
    following = re.search(r"^## ", changelog[heading.end() :], re.M)
    body = changelog[heading.end() : heading.end() + following.start() if following else None]
    return {line.strip() for line in body.splitlines() if line.strip() and not line.startswith("#")}


def base_of(root: Path, package: str, base_ref: str) -> tuple[str, str]:
    """(commit, description) the package is compared with."""
    # The suffixes sort a PEP 440 pre-release (0.2.0rc1) before its final release (0.2.0).
    suffixes = [f"versionsort.suffix={suffix}" for suffix in ("a", "b", "rc")]
    sort = [arg for suffix in suffixes for arg in ("-c", suffix)]
    tags = git(root, *sort, "tag", "--list", "--sort=-v:refname", f"lamella-{package}-v*").stdout.split()
    if tags:
        return tags[0], f"its last release tag {tags[0]}"
    merge_base = git(root, "merge-base", "HEAD", base_ref)
    if merge_base.returncode != 0:  # a clone that has the branch only as a remote-tracking one
        merge_base = git(root, "merge-base", "HEAD", f"origin/{base_ref}")
    if merge_base.returncode != 0:
        raise BaseError(
            f"lamella-{package} has no release tag and the merge base of HEAD and {base_ref!r} "
            f"cannot be found ({merge_base.stderr.strip()}): pass --base <branch> "
            "(or set LAMELLA_BASE_REF)"
        )
    commit = merge_base.stdout.strip()
    return commit, f"the merge base with {base_ref} ({commit[:10]})"


def missing_entries(root: Path, base_ref: str) -> list[str]:
    problems = []
    for folder in sorted(path.parent for path in root.glob("packages/*/pyproject.toml")):
        package = folder.name
        relative = folder.relative_to(root).as_posix()
        shipped = [f"{relative}/{name}" for name in SHIPPED]
        base, described = base_of(root, package, base_ref)
        changed = git(root, "diff", "--name-only", base, "--", *shipped).stdout.split()
        changed += git(root, "ls-files", "--others", "--exclude-standard", "--", *shipped).stdout.split()
        if not changed:
            continue
        changelog = folder / "CHANGELOG.md"
        now = unreleased_entries(changelog.read_text()) if changelog.exists() else set()
        before = git(root, "show", f"{base}:{relative}/CHANGELOG.md")
        new = now - (unreleased_entries(before.stdout) if before.returncode == 0 else set())
        if not new:
            shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
            problems.append(
                f"lamella-{package} changed since {described} ({shown}) but {relative}/CHANGELOG.md "
                "has no new entry under '## [Unreleased]': say what changed there"
            )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", default=os.environ.get("LAMELLA_BASE_REF", "main"))
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    try:
        problems = missing_entries(args.root, args.base)
    except BaseError as error:
        print(f"check_changelogs: error: {error}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"check_changelogs: {problem}")
    if not problems:
        print("check_changelogs: every changed package has a new CHANGELOG entry")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
