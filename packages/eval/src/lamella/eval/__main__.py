"""``python -m lamella.eval aggregate ...``: ``lamella eval`` without the ``lamella`` command.

The ``lamella`` command comes with lamella-envs; with lamella-eval alone, run its commands this
way. User errors print one line and exit with status 2 (``--debug`` shows the traceback), as
``lamella`` does.
"""

from __future__ import annotations

import argparse
import sys

from lamella.eval.cli import add_commands

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m lamella.eval ARGV``; return the exit status (2 for user errors)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    parser = argparse.ArgumentParser(prog="python -m lamella.eval", description="lamella-eval's commands")
    parser.add_argument("--debug", action="store_true", help="show the traceback of every error")
    add_commands(parser.add_subparsers(dest="eval_command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except Exception as error:
        if debug or not getattr(error, "lamella_user_error", False):
            raise
        print(f"python -m lamella.eval {args.eval_command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
