"""Workspace-wide pytest hooks (this file is the root conftest of every package's tests and of tests/).

``--cpu-durations=N`` lists the N tests that cost the most CPU time (user + system, of the test's
process and every child process it waited for; setup, call and teardown together), and the
step's total. Wall times (pytest's ``--durations``) mislead on a loaded machine: with two xdist
workers and another step on 2 cores, a test's wall time is 2-4 times its CPU time. Under xdist,
each worker measures its tests and the controller prints the list. ``scripts/test_all.py`` turns
it on for every step.

``LAMELLA_OPTIONAL_XLA_FLAGS`` holds XLA flags to add to ``XLA_FLAGS`` only where the installed
XLA has them (``scripts/test_all.py`` passes its per-step flags this way): an unknown flag in
``XLA_FLAGS`` aborts the process when JAX starts its backend, and XLA drops flags between
releases (jax 0.12 has no ``--xla_cpu_use_fusion_emitters``). The controller checks each flag
once, in a child Python that starts JAX's CPU backend with it (about 2 CPU-s), before any test
imports JAX; xdist workers and the tests' children inherit the result.

Under pytest-xdist's ``--dist load`` (what ``hatch test --parallel`` runs), a test module with a
module- or session-scoped fixture (a training run, a compiled program or a device child that
several tests read) runs whole on one worker (``shared_fixture_scope``); every other test is
handed out on its own. xdist's ``load`` splits modules anywhere, and each worker then built the
module's fixture again (a CI log of 2026-11-30: ``test_shaping_meta.py``'s training run twice,
29.5 and 19.0 CPU-s), or waited on the other's device child. Measured with ``pytest -n 2`` on a
loaded 2-core machine: lamella-marl's ``test_recording.py`` + ``test_shaping_cnn.py`` 51 -> 32
CPU-s, ``test_shaping_meta.py`` + ``test_rec_iql.py`` + ``test_pieces.py`` 85 -> 53. xdist's
own ``xdist_group`` mark cannot say this: with pytest 9 its group no longer reaches the node ids
that ``--dist loadgroup`` reads.
"""

from __future__ import annotations

import functools
import os
import re
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

_STASH = pytest.StashKey[float]()
_PROPERTY = "cpu_seconds"


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-durations",
        type=int,
        default=None,
        metavar="N",
        help="list the N tests that took the most CPU time (0: all), and the total",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_STASH] = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
    outcome = yield
    if call.when == "teardown" and _STASH in item.stash:
        report = outcome.get_result()
        report.user_properties.append((_PROPERTY, _cpu_seconds() - item.stash[_STASH]))


class _CpuReport:
    def __init__(self, count: int) -> None:
        self.count = count
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == _PROPERTY and report.when == "teardown":
                self.seconds[report.nodeid] = float(value)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.seconds:
            return
        ranked = sorted(self.seconds.items(), key=lambda pair: -pair[1])
        shown = ranked if self.count == 0 else ranked[: self.count]
        total = sum(self.seconds.values())
        terminalreporter.write_sep("=", f"most CPU time ({len(shown)} of {len(ranked)} tests)")
        for nodeid, seconds in shown:
            terminalreporter.write_line(f"{seconds:8.1f}s cpu  {nodeid}")
        terminalreporter.write_line(
            f"{total:8.1f}s cpu  in all {len(ranked)} tests (workers' startup and collection not counted)"
        )


OPTIONAL_XLA_FLAGS = "LAMELLA_OPTIONAL_XLA_FLAGS"


def xla_accepts(flag: str) -> bool:
    """Whether JAX's CPU backend starts with ``flag`` (one flag, or several separated by spaces)
    in ``XLA_FLAGS`` (in a child process: XLA ends the process that it finds an unknown flag in)."""
    env = {**os.environ, "XLA_FLAGS": flag, "JAX_PLATFORMS": "cpu"}
    env.pop(OPTIONAL_XLA_FLAGS, None)
    probe = subprocess.run(
        [sys.executable, "-c", "import jax; jax.devices()"], env=env, capture_output=True, check=False
    )
    return probe.returncode == 0


def add_optional_xla_flags(accepts: Callable[[str], bool] = xla_accepts) -> tuple[list[str], list[str]]:
    """Move the flags of ``LAMELLA_OPTIONAL_XLA_FLAGS`` that XLA accepts into ``XLA_FLAGS``.

    A flag whose name ``XLA_FLAGS`` already sets stays as it is there. Returns the flags added
    and those left out (this XLA does not have them).
    """
    wanted = os.environ.pop(OPTIONAL_XLA_FLAGS, "").split()
    flags = os.environ.get("XLA_FLAGS", "")
    named = {flag.split("=")[0] for flag in flags.split()}
    candidates = [flag for flag in wanted if flag.split("=")[0] not in named]
    added: list[str] = []
    left_out: list[str] = []
    # All at once first (one child Python, about 1-3 CPU-s, where XLA has them all, as it usually
    # does), then one by one to tell which one XLA refused.
    if len(candidates) > 1 and accepts(" ".join(candidates)):
        added = candidates
    else:
        for flag in candidates:
            (added if accepts(flag) else left_out).append(flag)
    if added:
        os.environ["XLA_FLAGS"] = " ".join([flags, *added]).strip()
    return added, left_out


_XLA_FLAGS_REPORT: list[str] = []


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Before any test module imports JAX, and before xdist starts its workers (they inherit the
    # environment; the variable is gone by then, so they check nothing again).
    if os.environ.get(OPTIONAL_XLA_FLAGS):
        added, left_out = add_optional_xla_flags()
        _XLA_FLAGS_REPORT.append(
            f"optional XLA flags: added {' '.join(added) or 'none'}; "
            f"left out (this XLA does not have them) {' '.join(left_out) or 'none'}"
        )
    count = config.getoption("--cpu-durations")
    # Under xdist only the controller prints (workers send their measures with their reports).
    if count is not None and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_CpuReport(count), "lamella-cpu-report")


def pytest_report_header(config: pytest.Config) -> list[str]:
    return _XLA_FLAGS_REPORT


_SHARED_SCOPE = re.compile(r"""scope\s*=\s*["'](?:module|session)["']""")


@functools.cache
def _has_shared_fixture(path: Path) -> bool:
    """Whether the test module at ``path`` defines a module- or session-scoped fixture."""
    try:
        return bool(_SHARED_SCOPE.search(path.read_text(encoding="utf-8")))
    except OSError:
        return False


def shared_fixture_scope(nodeid: str, root: Path) -> str:
    """The unit of work of the test ``nodeid``: its module where the module defines a shared
    (module- or session-scoped) fixture, else the test itself."""
    module = nodeid.split("::", 1)[0]
    return module if _has_shared_fixture(root / module) else nodeid


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "load":
        return None  # another --dist asked for: xdist's own
    from xdist.scheduler import LoadScopeScheduling

    root = Path(config.rootpath)

    class SharedFixtureScheduling(LoadScopeScheduling):
        # Units with the most tests (whole modules) are handed out first, then single tests in
        # collection order.
        def _split_scope(self, nodeid: str) -> str:
            return shared_fixture_scope(nodeid, root)

    return SharedFixtureScheduling(config, log)
