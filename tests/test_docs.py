"""Every Python block of every README and docs page runs as written.

A page's ``python`` blocks run in order as one script (a later block may use what an earlier one
defined), in a fresh interpreter, in an empty working directory. A block that is only an
illustration (a fragment, a signature, output) is marked on the line before its fence with
``<!-- illustration: why -->``; the reason is required, so an exception is always explained.

The blocks compile with XLA's older CPU emitters where the installed XLA has them (``PAGE_XLA_FLAG``,
below): a page's blocks mostly compile small programs, and their output is not compared (the
pages' sample outputs belong to their shell commands: ``tests/test_readme_commands.py``, which
the test command runs with the same flag).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "packages").glob("*/README.md"),
        *(ROOT / "packages").glob("*/docs/*.md"),
    ],
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


# Added to the blocks' XLA_FLAGS (an XLA_FLAGS that already names it wins). The blocks compile
# hundreds of small programs (eager calls compile one per operation) and train little, so the
# older emitters run them on a quarter less CPU time, every block passing: the five largest
# pages' scripts, each run alone with the test command's -O1 and then with this flag too,
# 2026-11-29 (jax 0.10.2, 2-core x86, busy machine: user + system CPU-s), marl 140.6 -> 95.8,
# envs 73.5 -> 54.8, agents 67.2 -> 59.4, ued 63.0 -> 47.3, buffers 33.6 -> 24.9; in all
# 377.9 -> 282.2 (a second round: 357.1 -> 272.7; gcrl 20.1 -> 16.8, the two docs pages 10.9 ->
# 9.6). -O0 with it cost less still (marl 87.4 -> 67.8, envs 51.0 -> 44.5 on an idle machine),
# but the test command's -O1 wins over a level set here (see scripts/test_all.py). An XLA
# without the flag (jax 0.12 dropped it) refuses it in XLA_FLAGS at start-up, so it is added only
# where this interpreter's XLA accepts it (asked in this process, through the same option as a
# compile option; the root conftest.py asks a child process, since it must decide before JAX starts).
PAGE_XLA_FLAG = "--xla_cpu_use_fusion_emitters=false"


@functools.cache
def xla_accepts(flag: str) -> bool:
    """Whether this interpreter's XLA accepts ``--name=value`` (compiled with it as an option)."""
    import jax
    import jax.numpy as jnp

    name, value = flag.removeprefix("--").split("=", 1)
    option = {"false": False, "true": True}.get(value, value)
    try:
        jax.jit(lambda x: x + 1, compiler_options={name: option}).lower(jnp.zeros(())).compile()
    except Exception:  # any rejection: XLA's defaults
        return False
    return True


# Pages whose blocks compile at -O0 (PAGE_XLA_LEVEL) when the test command chose the level (it
# says so in LAMELLA_TEST_XLA_LEVEL, scripts/test_all.py; a level the user set is kept): pages
# that mostly compile. -O0 against the test command's -O1 (both with PAGE_XLA_FLAG), each page's
# script run alone, 2026-11-30 (jax 0.10.2, 2-core x86 shared with other jobs, load 9-15: user +
# system CPU-s): marl 112.1 -> 78.6, envs 102.5 -> 68.5, buffers 26.5 -> 22.3, gcrl 17.9 ->
# 15.7. The agents and ued pages train, and -O0 cost them more (agents 72.9 -> 105.1, ued 50.0 ->
# 65.7), so they keep -O1, as do the small pages (not measured).
PAGES_AT_O0 = frozenset(f"packages/{name}/README.md" for name in ("marl", "envs", "buffers", "gcrl"))
PAGE_XLA_LEVEL = "0"
TEST_XLA_LEVEL = "LAMELLA_TEST_XLA_LEVEL"


def page_env(page: str = "") -> dict[str, str]:
    """The environment ``page``'s blocks run in: ours, on the CPU, with ``PAGE_XLA_FLAG`` added
    and, for ``PAGES_AT_O0`` where the test command chose the optimisation level,
    ``PAGE_XLA_LEVEL``."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}
    flags = env.get("XLA_FLAGS", "")
    chosen = f"--xla_backend_optimization_level={env.pop(TEST_XLA_LEVEL, '')}"
    if page in PAGES_AT_O0 and chosen in flags.split():
        flags = " ".join(
            f"--xla_backend_optimization_level={PAGE_XLA_LEVEL}" if flag == chosen else flag
            for flag in flags.split()
        )
        env["XLA_FLAGS"] = flags
    if PAGE_XLA_FLAG.split("=")[0] not in flags and xla_accepts(PAGE_XLA_FLAG):
        env["XLA_FLAGS"] = f"{flags} {PAGE_XLA_FLAG}".strip()
    return env


def test_page_env_adds_the_flag_once_and_keeps_the_users(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TEST_XLA_LEVEL, raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=1")
    expected = f"--xla_backend_optimization_level=1 {PAGE_XLA_FLAG}"
    assert page_env()["XLA_FLAGS"] == (expected if xla_accepts(PAGE_XLA_FLAG) else expected.split()[0])
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=true")
    assert page_env()["XLA_FLAGS"] == "--xla_cpu_use_fusion_emitters=true"
    assert not xla_accepts("--xla_no_such_flag_anywhere=false")


def test_page_env_lowers_only_the_level_the_test_command_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    assert f'TEST_XLA_LEVEL = "{TEST_XLA_LEVEL}"' in (ROOT / "scripts" / "test_all.py").read_text()
    assert all((ROOT / page).is_file() for page in PAGES_AT_O0)
    page = "packages/marl/README.md"
    monkeypatch.setenv("XLA_FLAGS", f"--xla_a=1 --xla_backend_optimization_level=1 {PAGE_XLA_FLAG}")
    monkeypatch.setenv(TEST_XLA_LEVEL, "1")  # scripts/test_all.py chose -O1
    env = page_env(page)
    assert env["XLA_FLAGS"] == f"--xla_a=1 --xla_backend_optimization_level=0 {PAGE_XLA_FLAG}"
    assert TEST_XLA_LEVEL not in env  # the pages' own programs see no such setting
    # A page not listed keeps the test command's level.
    assert page_env("packages/agents/README.md")["XLA_FLAGS"] == os.environ["XLA_FLAGS"]
    # The user's level (the test command did not choose it, or chose another) is kept.
    monkeypatch.setenv("XLA_FLAGS", f"--xla_backend_optimization_level=2 {PAGE_XLA_FLAG}")
    assert page_env(page)["XLA_FLAGS"] == f"--xla_backend_optimization_level=2 {PAGE_XLA_FLAG}"
    monkeypatch.delenv(TEST_XLA_LEVEL)
    monkeypatch.setenv("XLA_FLAGS", f"--xla_backend_optimization_level=1 {PAGE_XLA_FLAG}")
    assert page_env(page)["XLA_FLAGS"] == f"--xla_backend_optimization_level=1 {PAGE_XLA_FLAG}"


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
    result = subprocess.run(
        [sys.executable, str(source)],
        cwd=tmp_path,
        env=page_env(str(page.relative_to(ROOT))),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, (
        f"{page.relative_to(ROOT)}: its python blocks fail when run in order as one script "
        f"(line numbers are the page's):\n{result.stderr[-4000:]}"
    )
