"""Interleaved timing shared by the throughput benchmarks (see ../shared BENCHMARKS.md's method)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def time_interleaved(
    sides: dict[str, tuple[Callable[..., Any], Any]],
    inputs: tuple[Any, ...],
    work: int,
    repeats: int,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[dict[str, float], dict[str, float], dict[str, list[float]]]:
    """``(rate, compile_s, times)`` of each side ``name -> (fn, state)`` called as ``fn(state, *inputs)``.

    Each side is called once to compile, then the sides are timed in turn (A B A B ...), ``repeats``
    rounds; ``times`` holds each side's call times in round order (for paired ratios), ``rate``
    is ``work`` divided by the median time of a call. ``clock`` times the calls (wall clock by
    default; ``time.process_time`` counts the CPU time of all the process's threads, steadier
    on a shared machine). Compile time is always wall clock.
    """
    compile_s = {}
    for name, (fn, state) in sides.items():
        start = time.perf_counter()
        fn(state, *inputs).block_until_ready()
        compile_s[name] = time.perf_counter() - start
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(repeats):
        for name, (fn, state) in sides.items():
            start = clock()
            fn(state, *inputs).block_until_ready()
            times[name].append(clock() - start)
    return {name: work / statistics.median(t) for name, t in times.items()}, compile_s, times
