"""Run the longest integration tests first, so that the two xdist workers finish together.

The page tests (every shell command and every Python block of a README) take from seconds to
minutes each and were collected last (``packages/ued`` sorts after everything else): one worker
then ran a long page alone at the end while the other sat idle. Longest-first is the classic fix.
``PAGE_SECONDS`` holds each page test's measured CPU seconds (``--cpu-durations`` of a fresh
clone, 2026-11-29); it only orders the tests, so a stale figure costs minutes, never a check.
A page not listed counts by its size.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# (test file, page) -> seconds.
PAGE_SECONDS = {
    ("test_docs.py", "packages/marl/README.md"): 142,
    ("test_docs.py", "packages/envs/README.md"): 74,
    ("test_docs.py", "packages/agents/README.md"): 68,
    ("test_readme_commands.py", "packages/marl/README.md"): 67,
    ("test_docs.py", "packages/ued/README.md"): 58,
    ("test_readme_commands.py", "README.md"): 57,
    ("test_readme_commands.py", "packages/ued/README.md"): 54,
    ("test_readme_commands.py", "packages/agents/README.md"): 40,
    ("test_docs.py", "packages/buffers/README.md"): 35,
    ("test_readme_commands.py", "packages/gcrl/README.md"): 26,
    ("test_docs.py", "packages/gcrl/README.md"): 22,
    ("test_readme_commands.py", "packages/envs/README.md"): 21,
}
# Other long tests (test name) -> seconds.
LONG_TESTS = {
    "test_mappo_trains_with_continuous_actions_on_mabrax": 23,
    "test_ippo_trains_a_few_iterations_on_adapted_smax": 22,
    "test_released_agents_install_from_the_index_and_train": 19,
    "test_suite_table_per_maze": 17,
}
PAGE_TESTS = {"test_readme_commands.py", "test_docs.py"}
ROOT = Path(__file__).resolve().parent.parent
# The tests import their shared client (lamella_server.LamellaServer) from this folder, which
# --import-mode=importlib leaves off sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _seconds(item: pytest.Item) -> float:
    """The expected duration of a page test or a listed long test; 0 for every other test."""
    if item.name in LONG_TESTS:
        return LONG_TESTS[item.name]
    callspec = getattr(item, "callspec", None)
    page = callspec.params.get("page") if callspec is not None else None
    if item.path.name not in PAGE_TESTS or not isinstance(page, Path):
        return 0.0
    name = page.relative_to(ROOT).as_posix()
    return PAGE_SECONDS.get((item.path.name, name), page.stat().st_size / 10_000)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Stable: the other tests keep their collection order, after the pages.
    items.sort(key=lambda item: -_seconds(item))
