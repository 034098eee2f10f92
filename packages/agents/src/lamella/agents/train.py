"""``python -m lamella.agents.train``: the ``lamella train`` command without the ``lamella`` script.

::

    python -m lamella.agents.train ppo --env CartPole-v1 --seeds 4 num_envs=8
"""

from __future__ import annotations

import sys

from lamella.agents.cli import build_parser

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) and train; return the exit status."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
