"""Test one package's release against the other packages as the tree holds them.

Usage (from the repository root)::

    hatch run release:compat --released envs --test agents [--tag REF] [--pytest-args ARGS]

``--released`` names the package taken from a release: its wheel is built from the git tag
``lamella-<pkg>-v<version>`` (the newest one unless ``--tag`` names a tag or any other git ref).
Every other in-repo package the tested one's Hatch test environment holds comes from the tree,
installed editable. ``--test`` names the package whose tests run: the tree's tests, or the tag's
when it is the released package itself (``--released agents --test agents``: the previous
lamella-agents, with its own tests, on today's lamella-envs). Third-party packages are the ones
that package's test environment declares (``hatch env show``), installed with uv into a fresh
virtual environment.

Before anything is built, every in-repo requirement between the released package and the tree's
packages must admit the other side's version; where one does not, the ranges already say the two
do not go together and there is nothing to test (a one-line refusal, exit status 2, as for a
missing tag or an unknown package). Otherwise the exit status is pytest's: 0 when the tests pass.
``--pytest-args`` (one shell-quoted string) defaults to ``-m "not slow and not research"``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from release import (
    PREFIX,
    ROOT,
    ReleaseError,
    _need,
    git,
    last_tag_version,
    packages,
    project_table,
    tree_version,
)
from release import run_step as _run_step

DEFAULT_PYTEST_ARGS = ["-m", "not slow and not research"]


class CompatError(ReleaseError):
    """A refusal: printed as one line, exit status 2."""


def run_step(command: list[str], what: str) -> None:
    _run_step(command, what, prog="compat")


def test_environment(tree: Path, package: str) -> dict:
    """Hatch's view of ``hatch-test.py<X.Y>-<package>`` in ``tree``: its members and dependencies."""
    result = subprocess.run(["hatch", "env", "show", "--json"], cwd=tree, capture_output=True, text=True)
    if result.returncode != 0:
        raise CompatError(f"hatch env show failed in {tree}: {result.stderr.strip()[-300:]}")
    envs = json.loads(result.stdout)
    name = next((key for key in envs if key.startswith("hatch-test.") and key.endswith(f"-{package}")), None)
    if name is None:
        raise CompatError(f"{tree} has no Hatch test environment for {PREFIX}{package}")
    return envs[name]


def requirements(folder: Path, extras: set[str]) -> list[str]:
    project = project_table(folder)
    found = list(project.get("dependencies", []))
    for extra in extras:
        found += project.get("optional-dependencies", {}).get(extra, [])
    return found


def check_ranges(held: dict[str, tuple[Path, str, set[str]]], released: str, tag: str) -> None:
    """Every lamella-* requirement between the released package and the others admits the other's version."""
    from packaging.requirements import Requirement

    problems = []
    for package, (folder, _, extras) in held.items():
        where = f"{PREFIX}{package} ({'the release' if package == released else 'the tree'})"
        for text in requirements(folder, extras):
            requirement = Requirement(text)
            target = requirement.name.removeprefix(PREFIX)
            if not requirement.name.startswith(PREFIX) or target not in held or target == package:
                continue
            if released not in (package, target):
                continue  # both from the tree: the release script checks those
            version = held[target][1]
            if not requirement.specifier.contains(version, prereleases=True):
                problems.append(f"{where} requires {requirement}, and {requirement.name} is {version}")
    if problems:
        raise CompatError(
            f"the ranges exclude {tag} with the tree: " + "; ".join(problems) + " (nothing to test)"
        )


def compat(released: str, tested: str, ref: str | None, pytest_args: list[str]) -> int:
    members = packages()
    for package in (released, tested):
        if package not in members:
            raise CompatError(f"no package {package!r}: choose one of {', '.join(members)}")
    _need("packaging")
    for tool in ("hatch", "uv", "git"):
        if shutil.which(tool) is None:
            raise CompatError(f"{tool} is not on PATH")
    if ref is None:
        version = last_tag_version(released)
        if version is None:
            raise CompatError(
                f"{PREFIX}{released} has no release tag ({PREFIX}{released}-v*): release it first "
                f"(hatch run release:package {released} ...) or name a git ref with --tag"
            )
        ref = f"{PREFIX}{released}-v{version}"
    if not git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False):
        raise CompatError(f"{ref} is not a tag or commit of this repository (git tag --list shows the tags)")

    work = Path(tempfile.mkdtemp(prefix=f"lamella-compat-{released}-"))
    try:
        # The release's whole tree: its package, and (for its own tests) its tests and conftest.py.
        old = work / "release"
        old.mkdir()
        archive = work / "release.tar"
        with archive.open("wb") as out:
            subprocess.run(["git", "archive", "--format=tar", ref], cwd=ROOT, stdout=out, check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(old, filter="data")
        if not (old / "packages" / released / "pyproject.toml").exists():
            raise CompatError(f"{ref} has no packages/{released}: {PREFIX}{released} did not exist there")
        tests_tree = old if tested == released else ROOT
        environment = test_environment(tests_tree, tested)

        # Which in-repo packages the tested one's environment holds, and where each comes from.
        held: dict[str, tuple[Path, str, set[str]]] = {}
        for member in environment.get("workspace", {}).get("members", []):
            path = member if isinstance(member, str) else member["path"]
            name = path.replace("{matrix:pkg}", tested).removeprefix("packages/")
            extras = set() if isinstance(member, str) else set(member.get("features", []))
            if name != released and name not in members:
                raise CompatError(
                    f"the tests' environment holds {PREFIX}{name}, which the tree no longer has"
                )
            folder = old / "packages" / name if name == released else members[name]
            held[name] = (folder, tree_version(folder), extras)
        third_party = []
        for dependency in [*environment.get("dependencies", []), *environment.get("extra-dependencies", [])]:
            head = dependency.split("[")[0].split(";")[0].strip()
            if head.startswith(PREFIX) and head.removeprefix(PREFIX) in held:
                extras = dependency[len(head) :].split("]")[0].lstrip("[")
                held[head.removeprefix(PREFIX)][2].update(
                    filter(None, (e.strip() for e in extras.split(",")))
                )
            else:
                third_party.append(dependency)
        if released not in held:
            raise CompatError(
                f"{PREFIX}{tested}'s test environment holds no {PREFIX}{released}: "
                f"choose one of {', '.join(sorted(held))}"
            )
        check_ranges(held, released, ref)

        dist = work / "dist"
        run_step(
            ["uv", "build", "--wheel", "--out-dir", str(dist), str(old / "packages" / released)],
            f"build {PREFIX}{released} from {ref}",
        )
        (wheel,) = dist.glob("*.whl")
        venv = work / "venv"
        python = venv / "bin" / "python"
        interpreter = environment.get("python", sys.executable)
        run_step(
            ["uv", "venv", "--quiet", "--python", interpreter, str(venv)],
            f"a fresh venv (Python {interpreter})",
        )
        installs = []
        for name, (folder, _, extras) in held.items():
            suffix = f"[{','.join(sorted(extras))}]" if extras else ""
            installs += [f"{wheel}{suffix}"] if name == released else ["-e", f"{folder}{suffix}"]
        run_step(
            ["uv", "pip", "install", "--quiet", "--python", str(python), *installs, *third_party],
            "install the release, the tree's packages and the test dependencies",
        )
        listed = {
            entry["name"]: entry
            for entry in json.loads(
                subprocess.run(
                    ["uv", "pip", "list", "--python", str(python), "--format", "json"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
        }
        for name, (_, version, _) in held.items():
            entry = listed.get(f"{PREFIX}{name}", {})
            from_tree = "editable_project_location" in entry
            if entry.get("version") != version or from_tree == (name == released):
                raise CompatError(f"the venv holds {PREFIX}{name} {entry or 'nothing'}, not {version}")

        summary = ", ".join(
            f"{PREFIX}{name} {version} ({ref if name == released else 'tree'})"
            for name, (_, version, _) in held.items()
        )
        print(
            f"compat: {summary}: the tests of {PREFIX}{tested} from {'the release' if tests_tree == old else 'the tree'}"
        )
        env = {**os.environ, **environment.get("env-vars", {})}
        env.pop("HATCH_ENV_ACTIVE", None)
        command = [str(python), "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider"]
        # Test paths among the arguments (relative to the tests' tree) replace the package's tests folder.
        named = any(
            (tests_tree / arg.split("::")[0]).exists() for arg in pytest_args if not arg.startswith("-")
        )
        folder = [] if named else [str(tests_tree / "packages" / tested / "tests")]
        result = subprocess.run(
            [*command, *folder, *pytest_args],
            cwd=tests_tree,
            env=env,
        )
        verdict = "passed" if result.returncode == 0 else f"FAILED (pytest exit {result.returncode})"
        print(f"compat: the tests of {PREFIX}{tested} {verdict} with {summary}", flush=True)
        return result.returncode
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="compat", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--released", required=True, help="the package taken from a release (envs, ...)")
    parser.add_argument("--test", required=True, help="the package whose tests run")
    parser.add_argument("--tag", help="the release's git tag or any git ref (default: its newest tag)")
    parser.add_argument(
        "--pytest-args",
        default=shlex.join(DEFAULT_PYTEST_ARGS),
        help="pytest's arguments, one shell-quoted string (default: %(default)s); test paths in it "
        "replace the tested package's tests folder",
    )
    args = parser.parse_args(argv)
    try:
        return compat(args.released, args.test, args.tag, shlex.split(args.pytest_args))
    except ReleaseError as error:
        print(f"compat: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.exit(main())
