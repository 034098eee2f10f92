"""Every Python block of every README and docs page runs as written.

A page's ``python`` blocks run in order as one script (a later block may use what an earlier one
defined), in a fresh interpreter, in an empty working directory. A block that is only an
illustration (a fragment, a signature, output) is marked on the line before its fence with
``<!-- illustration: why -->``; the reason is required, so an exception is always explained.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "packages").glob("*/README.md")],
    key=lambda p: str(p.relative_to(ROOT)),
)
FENCE = re.compile(r"^```(\w*)\s*$")
ILLUSTRATION = re.compile(r"<!--\s*illustration:\s*(\S.*?)\s*-->")


def python_blocks(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """``(runnable, illustrations)``: (first line number, code) of each python block of a page."""
    runnable: list[tuple[int, str]] = []
    illustrations: list[tuple[int, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match or not match.group(1):
            i += 1
            continue
        language, start = match.group(1), i + 1
        end = start
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        if language == "python":
            previous = next((line for line in reversed(lines[:i]) if line.strip()), "")
            reason = ILLUSTRATION.search(previous)
            (illustrations if reason else runnable).append((start + 1, "\n".join(lines[start:end])))
        i = end + 1
    return runnable, illustrations


def test_block_parser_splits_runnable_and_illustration() -> None:
    page = (
        "text\n```python\nx = 1\n```\n<!-- illustration: a signature -->\n"
        "```python\ndef f(a): ...\n```\n```bash\nls\n```\n```python\nprint(x)\n```\n"
    )
    runnable, illustrations = python_blocks(page)
    assert [code for _, code in runnable] == ["x = 1", "print(x)"]
    assert [code for _, code in illustrations] == ["def f(a): ..."]
    assert [line for line, _ in runnable] == [3, 13]


# Pages whose own test runs their blocks (with more than this test checks), so they do not run
# twice in CI: page -> that test file.
RUN_BY_THEIR_OWN_TEST = {
    "packages/eval/README.md": "packages/eval/tests/test_readme.py",  # python and shell blocks, in order
    "docs/new-runner.md": "packages/agents/tests/test_new_runner_doc.py",  # and checks that it learns
}
PAGES_WITH_CODE = [
    p
    for p in PAGES
    if python_blocks(p.read_text())[0] and str(p.relative_to(ROOT)) not in RUN_BY_THEIR_OWN_TEST
]


def test_pages_run_elsewhere_are_run_there() -> None:
    for page, test in RUN_BY_THEIR_OWN_TEST.items():
        assert (ROOT / page).is_file(), page
        name = Path(page).name
        assert name in (ROOT / test).read_text(), f"{test} does not read {page}"


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_python_blocks_run_as_written(page: Path, tmp_path: Path) -> None:
    runnable, _ = python_blocks(page.read_text())
    # Each block starts on its own line number in the script, so a traceback points at the page.
    script = [f"# {page.relative_to(ROOT)}"]
    for line, code in runnable:
        script.extend([""] * (line - 1 - len(script)))
        script.extend(code.splitlines())
    source = tmp_path / "page.py"
    source.write_text("\n".join(script) + "\n")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}
    result = subprocess.run(
        [sys.executable, str(source)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, (
        f"{page.relative_to(ROOT)}: its python blocks fail when run in order as one script "
        f"(line numbers are the page's):\n{result.stderr[-4000:]}"
    )
