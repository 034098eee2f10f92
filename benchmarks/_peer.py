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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax


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


def time_with_peer(
    name: str,
    call: Callable[[], Any],
    per_call: int,
    calls_per_block: int,
    repeats: int,
    start_peer: Callable[[], PeerProcess] | None,
    unit: str,
) -> None:
    """Times lamella's ``call`` (one jitted call of ``calls_per_block`` ``unit``, ``per_call`` env
    steps each; compiled on its first call) ``repeats`` times, each followed by one block of the
    peer's (``start_peer()``, called once lamella has compiled, starts it with the same sizes;
    None: lamella alone), so each pair ran under the same load, and prints a row of medians per
    side, their ratios and each pair's ratio."""
    start = time.perf_counter()
    jax.block_until_ready(call())  # compiles
    compile_s = time.perf_counter() - start
    peer = None if start_peer is None else start_peer()
    if peer is not None:
        peer.ready()  # the peer's warm-up, which compiles
    walls, cpus, blocks = [], [], []
    for repeat in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(call())
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        if peer is not None:
            if repeat:
                peer.ready()  # the end of the peer's previous block
            blocks.append(peer.block())
    median = sorted(walls)[len(walls) // 2]
    wall = calls_per_block / median
    cpu = calls_per_block / sorted(cpus)[len(cpus) // 2]
    print(
        f"{name:<14} {compile_s:>10.1f} {median:>9.3f}  {wall:.3g} {unit}/s, "
        f"{wall * per_call:.3g} env steps/s; CPU {cpu:.3g} {unit}/s, {cpu * per_call:.3g} env steps/s"
    )
    if peer is not None:
        summary = peer.summary()
        peer_name = f"  {peer.marker.capitalize()}"
        print(
            f"{peer_name:<14} {summary['compile_s']:>10.1f} {calls_per_block / summary['generations_per_s']:>9.3f}  "
            f"{summary['generations_per_s']:.3g} {unit}/s, {summary['steps_per_s']:.3g} env steps/s; CPU "
            f"{summary['generations_per_cpu_s']:.3g} {unit}/s, {summary['steps_per_cpu_s']:.3g} env steps/s "
            f"(jax {summary['jax']}; its compile column: its warm-up {unit})"
        )
        print(
            f"{'  lamella/' + peer.marker.capitalize():<14} wall {wall / summary['generations_per_s']:.2f}x, "
            f"CPU {cpu / summary['generations_per_cpu_s']:.2f}x (medians)"
        )
        for repeat, (lamella_wall, lamella_cpu, block) in enumerate(zip(walls, cpus, blocks)):
            print(
                f"{'  pair ' + str(repeat + 1):<14} CPU s {lamella_cpu:.2f} vs {block['cpu_s']:.2f}: "
                f"{block['cpu_s'] / lamella_cpu:.2f}x; wall s {lamella_wall:.2f} vs {block['wall_s']:.2f}: "
                f"{block['wall_s'] / lamella_wall:.2f}x"
            )
    print(f"{'  load average':<14} {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


def pax_starter(
    pax_python: str | None,
    pax_src: str | None,
    experiment: str,
    generations: int,
    repeats: int,
    overrides: list[str],
    warmup: int = 1,
) -> Callable[[], PeerProcess] | None:
    """What starts Pax's side (``pax_meta.py`` in Pax's environment) for :func:`time_with_peer`:
    ``experiment`` with ``overrides``, blocks of ``generations``; None without ``pax_python``."""
    if not pax_python:
        return None
    args = ["--experiment", experiment, "--generations", str(generations), "--repeats", str(repeats)]
    return lambda: PeerProcess(
        pax_python,
        "pax_meta.py",
        [*args, "--warmup", str(warmup), *overrides],
        {"PAX_SRC": str(pax_src)},
        "PAX",
    )
