"""A peer library's timed side in its own process (a peer that pins an older JAX runs in its own
virtual environment), driven one block at a time so that its blocks alternate with lamella's.

The peer's script (``pax_meta.py``, ``mava_ippo.py``) run with ``--paired`` prints
``<MARKER>_READY`` when it is ready for a block (after compiling, or after its previous block),
waits for a line on stdin, runs one timed block and prints ``<MARKER>_BLOCK {json}`` (its wall and
CPU seconds), and after its last block prints one JSON line: its summary.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any


class PeerProcess:
    """``python script args...`` with ``env`` added to this process's environment; ``marker``
    prefixes its protocol lines (``PAX``: ``PAX_READY``, ``PAX_BLOCK``)."""

    def __init__(self, python: str, script: str, args: list[str], env: dict[str, str], marker: str) -> None:
        self.marker = marker
        self.command = [python, str(Path(__file__).resolve().parent / script), *args, "--paired"]
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            self.command,
            env={**os.environ, **env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )

    def _failed(self) -> SystemExit:
        self.process.wait()
        self.stderr.seek(0)
        return SystemExit(f"The peer's run failed ({' '.join(self.command)}):\n{self.stderr.read()[-3000:]}")

    def _read_until(self, line_start: str) -> str:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(line_start):
                return line[len(line_start) :].strip()
        raise self._failed()

    def ready(self) -> None:
        """Waits until the peer is ready for a block (compiled, or done with its previous one)."""
        self._read_until(f"{self.marker}_READY")

    def block(self) -> dict[str, Any]:
        """Runs one timed block of a ready peer; returns its wall and CPU seconds."""
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        return json.loads(self._read_until(f"{self.marker}_BLOCK"))

    def summary(self) -> dict[str, Any]:
        """The peer's last JSON line, after its last block."""
        assert self.process.stdout is not None
        lines = [line for line in self.process.stdout if line.startswith("{")]
        if self.process.wait() or not lines:
            raise self._failed()
        return json.loads(lines[-1])
