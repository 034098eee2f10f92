"""``python -m lamella.gcrl.train``: ``lamella train`` with the off-policy algorithms registered.

::

    python -m lamella.gcrl.train sac --env Pendulum-v1 --seeds 4
    python -m lamella.gcrl.train td3 --env GMazeGoalDubins-v0 --her
"""

from __future__ import annotations

import sys

from lamella.agents.cli import build_parser
from lamella.gcrl.algorithms import _add_her_flag, register_algorithms

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) and train; return the exit status."""
    register_algorithms()
    parser = build_parser()
    _add_her_flag(parser)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
