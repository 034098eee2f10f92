"""Notices that reference packages print on stdout when imported or built, and that say nothing to
a user of the adapters, kept out of the user's output (every other line they print is passed on),
and brax's warning that it is no longer maintained (the adapters' users chose brax knowingly)."""

from __future__ import annotations

import contextlib
import io
import re
import sys
import warnings
from collections.abc import Iterator

NOTICES = (
    # mujoco.mjx, which brax.envs imports, on a machine without NVIDIA Warp: Warp is MJX's GPU
    # backend, which none of the Brax backends the adapter offers uses.
    re.compile(r"Failed to import (mujoco_)?warp: No module named '(mujoco_)?warp'$"),
    # jaxmarl's __init__, looking for the environments of a source checkout's git submodules.
    re.compile(r"Importing submoduled environments\.\.\.$"),
    re.compile(r"Submoduled environments not found\. Skipping import\.$"),
)
BRAX_UNMAINTAINED = r"Brax System, piplines and environments are not actively being maintained"


@contextlib.contextmanager
def without_import_notices() -> Iterator[None]:
    """Hold stdout while the block runs, then pass on every line but the :data:`NOTICES`; ignore
    brax's :data:`BRAX_UNMAINTAINED` warning in the block.

    jaxmarl's MaBrax module quiets brax's import by pointing ``sys.stdout`` and ``sys.stderr`` at
    ``os.devnull`` and then sets them to ``sys.__stdout__`` and ``sys.__stderr__``, which undoes
    any redirection in force (a notebook's, pytest's, ``contextlib.redirect_stdout``): while the
    block runs those two point at the streams in use, so that it sets them back to these.
    """
    held = io.StringIO()
    saved = sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__
    sys.stdout = held
    setattr(sys, "__stdout__", held)  # noqa: B010 (typeshed declares the originals final)
    setattr(sys, "__stderr__", sys.stderr)  # noqa: B010
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=BRAX_UNMAINTAINED)
            yield
    finally:
        sys.stdout, sys.stderr = saved[:2]
        setattr(sys, "__stdout__", saved[2])  # noqa: B010
        setattr(sys, "__stderr__", saved[3])  # noqa: B010
        lines = held.getvalue().splitlines(keepends=True)
        sys.stdout.write(
            "".join(line for line in lines if not any(n.match(line.rstrip("\n")) for n in NOTICES))
        )
