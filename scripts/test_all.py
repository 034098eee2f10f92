"""Run every check of the workspace and report them all (never stop at the first failure).

Usage: ``python scripts/test_all.py [--fast]``. Needs only ``hatch`` on PATH; every
environment is created from scratch by Hatch. The last line sums the pytest counts:
``total: N passed, N failed``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# In layer order; a package is tested once its tests/ holds a test file.
PACKAGES = [
    name
    for name in ["envs", "buffers", "agents", "gcrl", "eval"]
    if any((ROOT / "packages" / name / "tests").glob("test_*.py"))
]
WHEEL_ALONE = ["envs", "eval"]  # packages whose built wheel must install and import alone


def run(name: str, command: list[str], results: list[tuple[str, int, int, int, float]]) -> None:
    print(f"\n=== {name}: {' '.join(command)}", flush=True)
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    passed = failed = 0
    for line in process.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if re.match(r"^=+ .*(passed|failed|error|no tests ran).* =+$", line.strip()):
            passed += sum(int(n) for n in re.findall(r"(\d+) passed", line))
            failed += sum(int(n) for n in re.findall(r"(\d+) (?:failed|errors?)\b", line))
    code = process.wait()
    results.append((name, code, passed, failed, time.perf_counter() - start))


def wheel_installs_alone(package: str) -> list[str]:
    """Build the package's wheel and import it in a fresh venv holding nothing else."""
    out = tempfile.mkdtemp(prefix=f"lamella-{package}-wheel-")
    script = (
        f"set -e; uv build --wheel --out-dir {out} packages/{package};"
        f" uv venv --quiet {out}/venv; VIRTUAL_ENV={out}/venv uv pip install --quiet {out}/*.whl;"
        f" {out}/venv/bin/python -c 'import lamella.{package} as m; print(\"imported\", m.__name__, m.__version__)';"
        f" VIRTUAL_ENV={out}/venv uv pip list"
    )
    return ["bash", "-c", script]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fast", action="store_true", help="skip tests marked slow")
    args = parser.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    marker = ["--", "-m", "not slow and not research"] if args.fast else []
    results: list[tuple[str, int, int, int, float]] = []
    run("lint", ["hatch", "run", "lint:check"], results)
    run("types (lamella-envs)", ["hatch", "run", "types:check"], results)
    for package in PACKAGES:
        run(
            f"tests lamella-{package}",
            ["hatch", "test", "-i", f"pkg={package}", "--parallel", *marker],
            results,
        )
    run(
        "tests integration",
        ["hatch", "run", "integration:test", *(["-m", "not slow and not research"] if args.fast else [])],
        results,
    )
    for package in WHEEL_ALONE:
        run(f"wheel lamella-{package} installs alone", wheel_installs_alone(package), results)

    print("\n=== summary")
    total_passed = total_failed = 0
    for name, code, passed, failed, seconds in results:
        status = "ok" if code == 0 else f"FAILED (exit {code})"
        counts = f" ({passed} passed, {failed} failed)" if passed or failed else ""
        print(f"  {name:<40} {status}{counts} in {seconds:.0f}s")
        total_passed += passed
        total_failed += failed
        # A step that failed without a pytest count (lint, types, wheel) counts as one failure.
        if code != 0 and failed == 0:
            total_failed += 1
    print(f"total: {total_passed} passed, {total_failed} failed", flush=True)
    return 1 if any(code != 0 for _, code, *_ in results) else 0


if __name__ == "__main__":
    sys.exit(main())
