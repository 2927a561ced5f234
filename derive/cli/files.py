"""Writing the command's outputs: checked before any work, written atomically after it."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

from .atomic import atomic_write
from .errors import UsageError

__all__ = ["shown", "check_output", "check_folder", "write", "write_files", "write_stdout"]


def shown(path: object, limit: int = 60) -> str:
    """A path as messages show it: a long one shortened in the middle."""
    text = str(path)
    return text if len(text) <= limit else text[: limit // 2 - 1] + "…" + text[-limit // 2 :]


def check_output(path: str | None) -> None:
    """Refuse, before any work, an output that cannot be written: a folder, a missing folder,
    no permission, a name the file system refuses (too long)."""
    if path is None:
        return
    target = Path(path)
    try:
        if target.is_dir():
            raise UsageError(f"derive: cannot write {shown(path)}: it is a directory")
        parent = target.parent if str(target.parent) else Path(".")
        if not parent.is_dir():
            raise UsageError(
                f"derive: cannot write {shown(path)}: no such directory {shown(parent)}"
            )
        if len(target.name.encode()) > os.pathconf(parent, "PC_NAME_MAX"):
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
        exists = target.exists()
        writable = os.access(parent, os.W_OK) and (not exists or os.access(target, os.W_OK))
    except OSError as error:
        raise UsageError(f"derive: cannot write {shown(path)}: {error.strerror}") from None
    if not writable:
        raise UsageError(f"derive: cannot write {shown(path)}: permission denied")


def check_folder(path: str | Path, what: str) -> None:
    """Refuse, before any work, a folder the command is to write into (`what`: "--out DIR")
    that cannot be: an existing file, or a missing one whose nearest existing ancestor is a file
    or not writable."""
    folder = Path(path)
    try:
        nearest = folder
        while not nearest.exists() and nearest != nearest.parent:
            nearest = nearest.parent
        if not nearest.is_dir():
            raise UsageError(f"derive: cannot use {what} {shown(path)}: {shown(nearest)} is a file")
        writable = os.access(nearest, os.W_OK)
    except OSError as error:
        raise UsageError(f"derive: cannot use {what} {shown(path)}: {error.strerror}") from None
    if not writable:
        raise UsageError(f"derive: cannot use {what} {shown(path)}: permission denied")


def write(path: Path, data: bytes) -> None:
    """One file, atomically; an error is one line (exit status 2)."""
    try:
        atomic_write(path, data)
    except OSError as error:
        raise UsageError(f"derive: cannot write {shown(path)}: {error.strerror or error}") from None


def write_files(root: Path, files: dict[str, bytes]) -> None:
    """Each file under `root`, atomically, creating folders (and `root`) as needed."""
    for name, data in files.items():
        target = root / name
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UsageError(
                f"derive: cannot create {shown(target.parent)}: {error.strerror}"
            ) from None
        write(target, data)


def write_stdout(data: bytes) -> None:
    """The document on standard output; a closed pipe or a full disk is one line."""
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    except OSError as error:
        raise UsageError(
            f"derive: cannot write to standard output: {error.strerror or error}"
        ) from None
