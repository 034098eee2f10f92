"""Consumption-pattern rounds shared by the multi-agent throughput benchmarks.

Each benchmark builds, per pattern (``_rollouts.PATTERNS``: a, b, c), one timed rollout for every
lamella variant and every peer; all of them run in one interleaved round (``_interleave``), and
the ratio reported is the median over rounds of the peer's call time / lamella's call time in the
same round (the two calls run back to back, so they share the machine's load).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from _interleave import time_interleaved
from _rollouts import PATTERNS, check_patterns

Side = tuple[Callable[..., Any], Any]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--patterns`` and ``--clock``, as in benchmarks/envs_throughput.py."""
    parser.add_argument("--patterns", default="abc", help="consumption patterns to time (default: abc)")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="time calls by wall clock (default) or by the process's CPU time (all threads; steadier "
        "on a loaded machine, and it charges a side for the extra threads XLA runs it on)",
    )


def parse(parser: argparse.ArgumentParser) -> tuple[argparse.Namespace, list[str], Callable[[], float]]:
    args = parser.parse_args()
    patterns = check_patterns(parser, args.patterns)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    return args, patterns, clock


def time_patterns(
    lamella: dict[str, Callable[[str], Side]],
    peers: dict[str, Callable[[str], Side]],
    patterns: list[str],
    inputs: tuple[Any, ...],
    work: int,
    repeats: int,
    clock: Callable[[], float],
    extra: dict[str, Side] | None = None,
) -> dict[str, Any]:
    """Rates (``"{name} {pattern}"`` -> steps/s), compile seconds, and the paired ratio
    ``(lamella name, peer name, pattern)`` -> peer time / lamella time, median over rounds."""
    sides: dict[str, Side] = {}
    for p in patterns:
        for name, build in {**lamella, **peers}.items():
            sides[f"{name} {p}"] = build(p)
    sides.update(extra or {})
    rate, compile_s, times = time_interleaved(sides, inputs, work, repeats, clock)
    paired = {
        (lam, peer, p): statistics.median(
            t_peer / t_lam for t_lam, t_peer in zip(times[f"{lam} {p}"], times[f"{peer} {p}"])
        )
        for p in patterns
        for lam in lamella
        for peer in peers
    }
    return {"rate": rate, "compile": compile_s, "paired": paired}


def print_header(peer: str, patterns: list[str]) -> None:
    for p in patterns:
        print(f"pattern {p}: {PATTERNS[p]}")
    columns = [
        "config",
        "pattern",
        "lamella steps/s",
        f"{peer} steps/s",
        f"lamella / {peer} (paired)",
        "compile lamella / peer s",
    ]
    print("| " + " | ".join(columns) + " |")
    print("|" + "|".join(["---", "---", "---:", "---:", "---:", "---:"]) + "|")


def print_rows(
    label: str, row: dict[str, Any], lamella: list[str], peer: str | None, patterns: list[str]
) -> None:
    """One table row per lamella variant and pattern (``peer`` None: lamella alone)."""
    rate, compile_s = row["rate"], row["compile"]
    for name in lamella:
        suffix = name.removeprefix("lamella").strip()
        config = f"{label} ({suffix})" if suffix else label
        for p in patterns:
            peer_rate = rate.get(f"{peer} {p}") if peer else None
            cells = [
                config,
                p,
                f"{rate[f'{name} {p}']:.3g}",
                f"{peer_rate:.3g}" if peer_rate else "n/a",
                f"**{row['paired'][(name, peer, p)]:.2f}x**" if peer_rate else "n/a",
                f"{compile_s[f'{name} {p}']:.1f} / {compile_s.get(f'{peer} {p}', float('nan')):.1f}",
            ]
            print("| " + " | ".join(cells) + " |", flush=True)
