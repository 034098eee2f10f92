"""Atomic file writes: a reader (or a resumed run) never sees half a file."""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile

__all__ = ["atomic_write_bytes", "atomic_write_text", "remove_temp_files", "temp_file_pattern"]

# mkstemp creates files readable by the owner only; give the result the mode a plain open()
# would (0o666 minus the umask). Read once: os.umask can only be read by setting it.
_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` so that ``path`` holds either the old or the new content.

    The bytes go to a temporary file in the same directory, which is flushed, fsynced and
    then renamed over ``path`` (``os.replace`` is atomic on POSIX and Windows). If the
    process dies at any point, ``path`` still holds its previous content.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp_path = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        os.chmod(tmp_path, 0o666 & ~_UMASK)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_path)
        raise
    _fsync_directory(directory)


def temp_file_pattern(name: str) -> str:
    """The glob of the temporary files :func:`atomic_write_bytes` makes for a file named ``name``
    (a glob itself, such as ``checkpoint_*.msgpack``): ``.<name>.<random>.tmp``."""
    return f".{name}.*.tmp"


def remove_temp_files(directory: str | os.PathLike[str], name: str) -> list[str]:
    """Delete the leftover temporary files of atomic writes of ``name`` in ``directory``.

    A process killed between writing the temporary file and renaming it leaves the temporary
    file behind. Call this only when no other process may be writing ``name`` there (the
    driver calls it when a run resumes: one process writes a run directory at a time).

    Returns:
        The paths deleted.
    """
    found = sorted(glob.glob(os.path.join(os.fspath(directory), temp_file_pattern(name))))
    for path in found:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return found


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def _fsync_directory(directory: str) -> None:
    # Makes the rename itself durable; not possible on every platform (Windows), hence optional.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
