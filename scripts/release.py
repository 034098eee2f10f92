"""Release one lamella package: check, bump, changelog, build, check the artefacts, tag, upload.

Usage (from the repository root)::

    hatch run release:package <pkg> <bump> --index-url URL [--skip-tests]

``<pkg>`` is a folder under ``packages/`` (``envs``, ``agents``, ...); ``<bump>`` is ``major``,
``minor``, ``patch`` (alias ``micro``) or an explicit PEP 440 version such as ``0.2.0rc1``. The
index URL is an upload endpoint (``https://upload.pypi.org/legacy/``, or a pypiserver's root);
credentials come from twine's usual ``TWINE_USERNAME`` / ``TWINE_PASSWORD``.

Every check runs before anything changes: a clean git tree, a version higher than the current one
and than the package's last tag, a non-empty ``[Unreleased]`` section in its CHANGELOG, every
in-repo dependency range of every package admitting the versions the tree will hold, a reachable
index, and the package's tests (``hatch test -i pkg=<pkg>``; ``--skip-tests`` exists for the
end-to-end CI test, which runs them elsewhere). Then it bumps the version with ``hatch version``,
moves ``[Unreleased]`` under ``## [<version>] - <date>``, builds the sdist and the wheel (the wheel
from the sdist), checks them (``twine check --strict``, the wheel holds only ``lamella/<pkg>/`` and
its dist-info, never ``lamella/__init__.py``), commits, tags ``lamella-<pkg>-v<version>`` and
uploads with twine. A failure after the first change resets the branch to where it was and deletes
the tag. Every refusal is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "lamella-"
BUMPS = ("major", "minor", "patch", "micro")


class ReleaseError(Exception):
    """A refusal: printed as one line, exit status 2."""


def _need(module: str) -> None:
    try:
        __import__(module)
    except ImportError:
        raise ReleaseError(
            f"{module} is not installed in {sys.executable}; run the release through its Hatch "
            "environment: hatch run release:package <pkg> <bump> --index-url URL"
        ) from None


def git(*args: str, check: bool = True) -> str:
    result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise ReleaseError(f"git {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout.strip()


def packages() -> dict[str, Path]:
    """Folder name -> package folder, for every member under packages/."""
    return {path.parent.name: path.parent for path in sorted(ROOT.glob("packages/*/pyproject.toml"))}


def project_table(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


def tree_version(folder: Path) -> str:
    """The static version in the package's __about__.py (the file [tool.hatch.version] names)."""
    config = tomllib.loads((folder / "pyproject.toml").read_text())
    about = folder / config["tool"]["hatch"]["version"]["path"]
    match = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", about.read_text(), re.M)
    if match is None:
        raise ReleaseError(f"{about.relative_to(ROOT)} holds no __version__ = '...' line")
    return match.group(1)


def next_version(current: str, bump: str) -> str:
    from packaging.version import InvalidVersion, Version

    old = Version(current)
    if bump in BUMPS:
        major, minor, micro = [*old.release, 0, 0][:3]
        if bump == "major":
            return f"{major + 1}.0.0"
        if bump == "minor":
            return f"{major}.{minor + 1}.0"
        # A pre-release of x.y.z releases as x.y.z; a final x.y.z goes to x.y.(z+1).
        return f"{major}.{minor}.{micro if old.is_prerelease else micro + 1}"
    try:
        new = Version(bump)
    except InvalidVersion:
        raise ReleaseError(
            f"bump {bump!r} is neither one of {', '.join(BUMPS)} nor a PEP 440 version (e.g. 0.2.0)"
        ) from None
    if new <= old:
        raise ReleaseError(
            f"version {new} does not increase the current version {old}: give a higher version "
            "or a bump (major, minor, patch)"
        )
    return str(new)


def last_tag_version(package: str) -> str | None:
    from packaging.version import InvalidVersion, Version

    found = []
    for tag in git("tag", "--list", f"{PREFIX}{package}-v*").splitlines():
        try:
            found.append(Version(tag.removeprefix(f"{PREFIX}{package}-v")))
        except InvalidVersion:
            continue
    return str(max(found)) if found else None


def unreleased_section(changelog: str) -> tuple[int, int]:
    """(start, end) offsets of the body of the ``## [Unreleased]`` section."""
    heading = re.search(r"^## \[Unreleased\][^\n]*\n", changelog, re.M)
    if heading is None:
        raise ReleaseError("has no '## [Unreleased]' heading")
    following = re.search(r"^## ", changelog[heading.end() :], re.M)
    end = heading.end() + following.start() if following else len(changelog)
    return heading.end(), end


def unreleased_entries(changelog: str) -> list[str]:
    """The entry lines of [Unreleased] (not blank, not a '### Added'-style subheading)."""
    start, end = unreleased_section(changelog)
    return [line for line in changelog[start:end].splitlines() if line.strip() and not line.startswith("#")]


def changelog_released(changelog: str, version: str, date: str) -> str:
    start, end = unreleased_section(changelog)
    body = changelog[start:end].strip("\n")
    return f"{changelog[:start]}\n## [{version}] - {date}\n\n{body}\n\n{changelog[end:]}".rstrip("\n") + "\n"


def check_ranges(versions: dict[str, str]) -> None:
    """Every lamella-* requirement of every package admits the version the tree holds."""
    from packaging.requirements import Requirement

    problems = []
    for package, folder in packages().items():
        project = project_table(folder)
        requirements = list(project.get("dependencies", []))
        for extra, deps in project.get("optional-dependencies", {}).items():
            requirements += [(dep, extra) for dep in deps]
        for entry in requirements:
            text, extra = entry if isinstance(entry, tuple) else (entry, None)
            requirement = Requirement(text)
            target = requirement.name.removeprefix(PREFIX)
            if not requirement.name.startswith(PREFIX) or target not in versions or target == package:
                continue
            if not requirement.specifier.contains(versions[target], prereleases=True):
                where = f" (its [{extra}] extra)" if extra else ""
                problems.append(
                    f"{PREFIX}{package} requires {requirement}{where} but the tree would hold "
                    f"{requirement.name} {versions[target]}"
                )
    if problems:
        raise ReleaseError(
            "; ".join(problems) + ": widen those ranges (packages/<pkg>/pyproject.toml) and commit first"
        )


def check_index(url: str) -> None:
    if not re.match(r"https?://", url):
        raise ReleaseError(f"--index-url {url!r} is not an http(s) URL")
    try:
        urllib.request.urlopen(url, timeout=10).close()
    except urllib.error.HTTPError:
        return  # it answered (an upload endpoint may refuse GET): reachable
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise ReleaseError(f"index {url} is unreachable ({reason}): check the URL and the network") from None


def check_wheel(wheel: Path, package: str, version: str) -> None:
    dist_info = f"lamella_{package}-{version}.dist-info/"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(dist_info + "METADATA").decode() if dist_info + "METADATA" in names else ""
    stray = [name for name in names if not name.startswith((f"lamella/{package}/", dist_info))]
    if stray or "lamella/__init__.py" in names:
        raise ReleaseError(f"{wheel.name} holds files outside lamella/{package}/: {', '.join(stray[:5])}")
    if f"lamella/{package}/__init__.py" not in names:
        raise ReleaseError(f"{wheel.name} has no lamella/{package}/__init__.py")
    if f"\nName: {PREFIX}{package}\n" not in metadata or f"\nVersion: {version}\n" not in metadata:
        raise ReleaseError(f"{wheel.name}'s METADATA does not name {PREFIX}{package} {version}")


def check_sdist(sdist: Path, package: str, version: str) -> None:
    top = f"lamella_{package}-{version}/"
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
    if not all(name.startswith(top) or name == top.rstrip("/") for name in names):
        raise ReleaseError(f"{sdist.name} has members outside {top}")
    sources = {name.removeprefix(top) for name in names}
    if "pyproject.toml" not in sources or f"src/lamella/{package}/__init__.py" not in sources:
        raise ReleaseError(f"{sdist.name} lacks pyproject.toml or src/lamella/{package}/__init__.py")
    stray = [
        name for name in sources if name.startswith("src/") and not name.startswith(f"src/lamella/{package}")
    ]
    stray = [name for name in stray if name not in ("src/lamella",)]
    if stray:
        raise ReleaseError(f"{sdist.name} holds other packages' sources: {', '.join(stray[:5])}")


def run_step(command: list[str], what: str, cwd: Path = ROOT, prog: str = "release") -> None:
    print(f"{prog}: {what}: {' '.join(command)}", flush=True)
    # Run from `hatch run release:...`, HATCH_ENV_ACTIVE names an env the member projects lack.
    env = {key: value for key, value in os.environ.items() if key != "HATCH_ENV_ACTIVE"}
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise ReleaseError(f"{what} failed (exit {result.returncode}):\n{tail}")


def release(package: str, bump: str, index_url: str, skip_tests: bool) -> str:
    members = packages()
    if package not in members:
        raise ReleaseError(f"no package {package!r}: choose one of {', '.join(members)}")
    folder = members[package]
    name = f"{PREFIX}{package}"
    _need("packaging")
    _need("twine")
    for tool in ("hatch", "uv", "git"):
        if shutil.which(tool) is None:
            raise ReleaseError(f"{tool} is not on PATH")

    # Checks, cheapest first; nothing changes until they all pass.
    dirty = git("status", "--porcelain")
    if dirty:
        raise ReleaseError(
            f"the git tree is not clean (commit or stash first): {'; '.join(dirty.splitlines())}"
        )
    current = tree_version(folder)
    version = next_version(current, bump)
    from packaging.version import Version

    tagged = last_tag_version(package)
    if tagged is not None and Version(version) <= Version(tagged):
        raise ReleaseError(f"version {version} does not increase {name}'s last release {tagged}")
    tag = f"{name}-v{version}"
    if git("tag", "--list", tag):
        raise ReleaseError(f"tag {tag} exists already")
    changelog_path = folder / "CHANGELOG.md"
    if not changelog_path.exists():
        raise ReleaseError(f"{changelog_path.relative_to(ROOT)} does not exist")
    changelog = changelog_path.read_text()
    try:
        if not unreleased_entries(changelog):
            raise ReleaseError("has an empty '## [Unreleased]' section")
    except ReleaseError as error:
        raise ReleaseError(
            f"{changelog_path.relative_to(ROOT)} {error}: write what changed in {name} since its "
            "last release under '## [Unreleased]' and commit"
        ) from None
    if re.search(rf"^## \[{re.escape(version)}\]", changelog, re.M):
        raise ReleaseError(f"{changelog_path.relative_to(ROOT)} already has a section for {version}")
    check_ranges({other: tree_version(path) for other, path in members.items()} | {package: version})
    check_index(index_url)
    if not skip_tests:
        run_step(["hatch", "test", "-i", f"pkg={package}", "--parallel"], f"{name}'s tests")

    head = git("rev-parse", "HEAD")
    out = Path(tempfile.mkdtemp(prefix=f"{name}-release-"))
    try:
        run_step(["hatch", "version", version], "bump the version", cwd=folder)
        if tree_version(folder) != version:
            raise ReleaseError(f"hatch version wrote {tree_version(folder)}, not {version}")
        date = datetime.datetime.now(datetime.UTC).date().isoformat()
        changelog_path.write_text(changelog_released(changelog, version, date))
        run_step(["uv", "build", "--out-dir", str(out), str(folder)], "build the sdist and the wheel")
        wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
        if len(wheels) != 1 or len(sdists) != 1:
            raise ReleaseError(
                f"the build made {[p.name for p in out.iterdir()]}, not one sdist and one wheel"
            )
        check_wheel(wheels[0], package, version)
        check_sdist(sdists[0], package, version)
        artefacts = [str(sdists[0]), str(wheels[0])]
        run_step([sys.executable, "-m", "twine", "check", "--strict", *artefacts], "render the metadata")
        git("add", "--", str(folder))
        git("commit", "--quiet", "-m", f"release {name} {version}")
        git("tag", "-a", tag, "-m", f"{name} {version}")
        upload = [sys.executable, "-m", "twine", "upload", "--non-interactive", "--disable-progress-bar"]
        run_step([*upload, "--repository-url", index_url, *artefacts], f"upload to {index_url}")
    except BaseException:
        git("tag", "-d", tag, check=False)
        git("reset", "--quiet", "--hard", head)
        print(f"release: rolled back to {head[:10]} (no tag {tag})", file=sys.stderr, flush=True)
        raise
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return tag


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="release", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("package", help="the folder under packages/ (envs, buffers, agents, ...)")
    parser.add_argument("bump", help="major, minor, patch, or an explicit version")
    parser.add_argument("--index-url", required=True, help="the upload URL of the package index")
    parser.add_argument(
        "--skip-tests", action="store_true", help="do not run the package's tests (CI end-to-end test only)"
    )
    args = parser.parse_args(argv)
    try:
        tag = release(args.package, args.bump, args.index_url, args.skip_tests)
    except ReleaseError as error:
        print(f"release: error: {error}", file=sys.stderr)
        return 2
    print(f"release: released {tag} to {args.index_url}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.exit(main())
