"""Run many ``lamella`` commands in one interpreter, each as if it were its own process.

``tests/test_readme_commands.py`` runs about 60 ``lamella`` commands and ``tests/test_cli_errors.py``
about 35; started one process each, every command first spends about 2.5 s of CPU importing JAX,
flax and optax, and compiles again what an earlier command already compiled. ``LamellaServer``
(below; the test files import it) starts one child interpreter (this file as a script; one per
page, or per test worker) that imports the CLI once and then runs the commands it is sent, one at a time, in the working directory it is told. What a command prints
reaches the parent as it would from ``python -m lamella.envs.cli`` with stdout and stderr on
one pipe: both file descriptors point at one file, stdout block-buffered and stderr
line-buffered as Python sets them up for a pipe, so lines come in the same order; a traceback
and the exit status are what the interpreter would give (``SystemExit`` codes, 1 and the
traceback for an uncaught exception). Warnings are reset before each command (a warning shown
by an earlier command is shown again), and ``sys.argv`` is the command's.

The protocol: one JSON line per command on the child's stdin, ``{"argv", "cwd", "output"}``;
the child writes the command's output to the file ``output`` and answers one JSON line,
``{"code": N}``.
"""

from __future__ import annotations

import io
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import traceback
import warnings
from pathlib import Path
from typing import Any


def _exit_status(error: SystemExit) -> int:
    """The status the interpreter gives for ``SystemExit(code)`` (a message goes to stderr)."""
    if error.code is None:
        return 0
    if isinstance(error.code, int):
        return error.code
    print(error.code, file=sys.stderr)
    return 1


def _run_one(main: Any, argv: list[str], output: str, filters: list[Any]) -> int:
    """One command with fds 1 and 2 on ``output``, streams set up as for a pipe."""
    warnings.filters[:] = filters
    warnings._filters_mutated()  # type: ignore[attr-defined]  # forget which warnings were shown
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )
    sys.argv = ["lamella", *argv]
    try:
        code = int(main(argv) or 0)
    except SystemExit as error:
        code = _exit_status(error)
    except BaseException:  # what an uncaught exception would print, and its status
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def serve() -> None:
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    errors = os.dup(2)
    from lamella.envs.cli import main

    filters = list(warnings.filters)
    for line in sys.stdin:
        request = json.loads(line)
        os.chdir(request["cwd"])
        code = _run_one(main, request["argv"], request["output"], filters)
        os.dup2(errors, 1)  # between commands, stray output goes to the parent's stderr
        os.dup2(errors, 2)
        sys.stdout = sys.stderr = io.TextIOWrapper(
            io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8", line_buffering=True
        )
        replies.write(json.dumps({"code": code}) + "\n")


class LamellaServer:
    """A child interpreter that runs ``lamella`` commands (``python -m lamella.envs.cli``)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        self.outputs = Path(tempfile.mkdtemp(prefix="lamella-server-"))
        self.count = 0

    def run(self, argv: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
        """``lamella ARGV`` in ``cwd``: its exit status and its output (stdout and stderr, in order)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.count += 1
        output = self.outputs / f"{self.count}.txt"
        request = {"argv": argv, "cwd": str(cwd), "output": str(output)}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        answer = self.process.stdout.readline() if ready else ""
        printed = output.read_text(errors="replace") if output.exists() else ""
        if not answer:  # timed out, or the child died (a crash: no answer, status below)
            self.close()
            code = self.process.returncode if not ready else (self.process.returncode or 1)
            reason = f"no answer within {timeout:.0f} s" if not ready else f"the server died ({code})"
            return subprocess.CompletedProcess(["lamella", *argv], code or 1, printed + f"\n[{reason}]\n")
        return subprocess.CompletedProcess(["lamella", *argv], json.loads(answer)["code"], printed)

    def close(self) -> None:
        """Stop the child and remove the folder of its commands' outputs."""
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.outputs, ignore_errors=True)

    def __enter__(self) -> LamellaServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


if __name__ == "__main__":
    serve()
