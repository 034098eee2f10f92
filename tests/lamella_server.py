"""Run many ``lamella`` commands in one interpreter, each as if it were its own process.

``tests/test_readme_commands.py`` runs about 60 ``lamella`` commands; started one process each,
every command first spends about 2.5 s of CPU importing JAX, flax and optax, and compiles again
what an earlier command of the page already compiled. ``LamellaServer`` (in that test file) starts one child
interpreter per page (this file as a script) that imports the CLI once and then runs the
commands it is sent, one at a time, in the working directory it is told. What a command prints
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
import sys
import traceback
import warnings
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


if __name__ == "__main__":
    serve()
