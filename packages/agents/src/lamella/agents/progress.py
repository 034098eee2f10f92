"""A dependency-free progress display for training runs.

On a terminal it redraws one line in place::

    ppo CartPole-v1 [#########-----------]  45% 225,280/500,000 steps  1.2e+05 steps/s  return 212.4  ETA 0:02

Elsewhere (CI logs, files) it prints a plain line per update, at most one every
``min_interval`` seconds (and always the last one).
"""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

__all__ = ["Progress", "format_duration"]


def format_duration(seconds: float) -> str:
    """``75`` -> ``1:15``, ``3725`` -> ``1:02:05``; ``?`` when unknown."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Progress of ``total_steps`` environment steps.

    Args:
        total_steps: steps of the whole run.
        label: text in front of the bar (algorithm and env id).
        stream: where to write (stderr by default).
        enabled: False prints nothing.
        min_interval: seconds between lines when ``stream`` is not a terminal.
        width: characters of the bar.
        initial_steps: steps already done when this display starts (a resumed run).
        seeds: runs trained side by side; ``steps`` count one run's steps, the speed
            counts the steps of all of them (what the machine does).
        start_time: ``time.perf_counter()`` when the work began (default: now), so the
            elapsed time includes set-up and compilation done before the display existed.

    The speed leaves out the first update, which carries the compile time, once a second
    update has arrived.
    """

    def __init__(
        self,
        total_steps: int,
        label: str = "",
        *,
        stream: TextIO | None = None,
        enabled: bool = True,
        min_interval: float = 10.0,
        width: int = 20,
        initial_steps: int = 0,
        seeds: int = 1,
        start_time: float | None = None,
    ) -> None:
        self.total_steps = max(int(total_steps), 1)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.min_interval = min_interval
        self.width = width
        self.is_tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._start = time.perf_counter() if start_time is None else start_time
        self._initial_steps = int(initial_steps)
        self.seeds = max(int(seeds), 1)
        self._first: tuple[float, int] | None = None
        self._last_print = -math.inf
        self._line_width = 0

    def rate(self, steps: int, now: float) -> float:
        """Environment steps per second over all seeds (after the first update if there was one)."""
        if self._first is not None and steps > self._first[1] and now > self._first[0]:
            return self.seeds * (steps - self._first[1]) / (now - self._first[0])
        elapsed = now - self._start
        done = steps - self._initial_steps
        return self.seeds * done / elapsed if elapsed > 0 and done > 0 else 0.0

    def line(self, steps: int, mean_return: float | None, now: float) -> str:
        """The text of one update."""
        fraction = min(max(steps / self.total_steps, 0.0), 1.0)
        filled = round(fraction * self.width)
        rate = self.rate(steps, now)
        # Until a second update gives a speed without compilation in it, no ETA is better than a wrong one.
        compiled = self._first is not None and steps > self._first[1]
        eta = self.seeds * (self.total_steps - steps) / rate if rate > 0 and compiled else math.inf
        parts = [
            f"{self.label} " if self.label else "",
            f"[{'#' * filled}{'-' * (self.width - filled)}] {fraction:4.0%} ",
            f"{steps:,}/{self.total_steps:,} steps  {rate:.2g} steps/s",
        ]
        if mean_return is not None and math.isfinite(mean_return):
            parts.append(f"  return {mean_return:.4g}")
        parts.append(f"  ETA {format_duration(eta)}" if steps < self.total_steps else "  done")
        parts.append(f"  elapsed {format_duration(now - self._start)}")
        return "".join(parts)

    def update(self, steps: int, mean_return: float | None = None) -> None:
        """Report ``steps`` done so far and the current mean return."""
        now = time.perf_counter()
        text = self.line(steps, mean_return, now)
        if self._first is None:
            self._first = (now, steps)
        if not self.enabled:
            return
        final = steps >= self.total_steps
        if self.is_tty:
            pad = max(self._line_width - len(text), 0)
            self.stream.write("\r" + text + " " * pad + ("\n" if final else ""))
            self._line_width = 0 if final else len(text)
        elif final or now - self._last_print >= self.min_interval:
            self.stream.write(text + "\n")
            self._last_print = now
        self.stream.flush()

    def close(self) -> None:
        """End an unfinished in-place line (a run stopped early)."""
        if self.enabled and self.is_tty and self._line_width:
            self.stream.write("\n")
            self.stream.flush()
            self._line_width = 0
