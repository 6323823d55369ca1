"""Directories and files no other user can plant: what the suite and its workload write on a shared host.

A node's ``/tmp`` (the monitor's directory of a Slurm job in a container image), a shared file system (the
artifacts directory) and a compiler's cache are reachable by the host's other users. A directory one of them
made first, or a symbolic link planted where a file will be, would have the job's processes write, as the
job's user, wherever that user chose. So:

- :func:`private_dir` makes a directory and each missing parent fresh, mode 0700. One that exists already is
  taken only where it is this user's (owned by the effective uid), a directory and no symbolic link, and
  writable by no one else (neither group nor others): the monitor and the ranks of one node join the same
  directory, whichever comes first, and a cache that must persist between runs is checked this way too. A
  parent that lies in a directory anyone may write (``/tmp``), or a symbolic link there, must be root's or
  this user's: a ``/tmp/rollcall-monitor-<job>`` another user made first is refused. Parents elsewhere were
  placed by whoever may write their own parent, and are taken as they are (a project's directory on a shared
  file system). A pod's ``emptyDir``, which anyone in the pod may write, is a parent: the directory is made
  inside it.
- :func:`new_file` opens a file of such a directory that must be new: ``O_CREAT | O_EXCL | O_NOFOLLOW``,
  mode 0600 (a file of this process's own from before is removed first: in a private directory no one else
  could have put it there). :func:`open_read` reads with ``O_NOFOLLOW``.

A refusal is an :class:`UnsafePathError` naming the path, why and the fix; the rank says it as its ``error``
in one line, and the monitor as the node's, without a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

#: What a directory of the job's own is made with: its user alone may enter, read and write it.
PRIVATE_DIR_MODE = 0o700
#: What a new file in it is made with.
PRIVATE_FILE_MODE = 0o600
#: Who may own a parent of such a directory: root, and the process's effective user.
_TRUSTED = frozenset({0})


class UnsafePathError(PermissionError):
    """A path another user could have planted or may change under the job: refused, saying why and the fix."""

    def __init__(self, path: str, why: str, fix: str) -> None:
        self.path, self.why, self.fix = path, why, fix
        super().__init__(f"Permission denied: {path} {why}: another user could plant files there; {fix}")


def _owners() -> frozenset[int]:
    return _TRUSTED | {os.geteuid()}


def _fix(path: str) -> str:
    return (
        f"remove it (or have its owner remove it), or choose a directory of this user's (uid {os.geteuid()}) "
        f"that no one else may write, then run again"
    )


def _check_own(path: str, st: os.stat_result) -> None:
    """A directory that must be this user's alone: ours, a directory, writable by no one else."""
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(path, f"is a symbolic link (of uid {st.st_uid})", _fix(path))
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(path, "exists and is not a directory", _fix(path))
    if st.st_uid != os.geteuid():
        raise UnsafePathError(
            path, f"is owned by uid {st.st_uid}, not by this process's user (uid {os.geteuid()})", _fix(path)
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafePathError(
            path,
            f"may be written by others (mode {stat.S_IMODE(st.st_mode):04o})",
            f"chmod go-w {path} (or remove it), then run again",
        )


def _check_placed(path: str, st: os.stat_result) -> None:
    """A parent in a directory anyone may write (``/tmp``): root's or this user's, a link too."""
    if st.st_uid not in _owners():
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "a directory"
        raise UnsafePathError(
            path,
            f"is {kind} owned by uid {st.st_uid}, neither root's nor this user's (uid {os.geteuid()}), in a "
            "directory anyone may write",
            _fix(path),
        )


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def private_dir(path: str | os.PathLike[str]) -> str:
    """``path`` (absolute) as a directory of this user's alone, made with each missing parent; returned.

    Raises:
        UnsafePathError: where ``path`` or a parent of it is another user's to change (the module's rules).
    """
    full = os.path.abspath(os.fspath(path))
    parts = full.strip("/").split("/")
    current, open_to_all = "/", False  # open_to_all: the directory holding ``current`` is (``/tmp``)
    for i, part in enumerate(parts):
        current = os.path.join(current, part)
        st = _lstat(current)
        if st is None:
            with contextlib.suppress(FileExistsError):  # made meanwhile: held to what an existing one must be
                os.mkdir(current, PRIVATE_DIR_MODE)
            st = os.lstat(current)
            _check_own(current, st)
        elif i == len(parts) - 1:
            _check_own(current, st)
        elif open_to_all:
            _check_placed(current, st)
            if stat.S_ISLNK(st.st_mode):
                st = os.stat(current)  # where it leads
                _check_placed(current, st)
        elif stat.S_ISLNK(st.st_mode):
            st = os.stat(current)
        open_to_all = bool(st.st_mode & stat.S_IWOTH)
    return full


def new_file(path: str | os.PathLike[str], flags: int = os.O_WRONLY) -> int:
    """A new file at ``path`` in a :func:`private_dir`, opened with ``flags``; its descriptor.

    Never follows a symbolic link; a file already there (this user's own from an earlier process: no one
    else can write the directory) is removed first, so the file opened is the one made here.
    """
    full = os.fspath(path)
    opening = flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(full, opening, PRIVATE_FILE_MODE)
    except FileExistsError:
        os.unlink(full)  # unlink takes the name, never what a link points to
        return os.open(full, opening, PRIVATE_FILE_MODE)


def open_read(path: str | os.PathLike[str]) -> int:
    """``path`` opened for reading without following a symbolic link; its descriptor.

    Raises:
        UnsafePathError: where ``path`` is a symbolic link.
    """
    full = os.fspath(path)
    try:
        return os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(full, "is a symbolic link", _fix(full)) from None
        raise


__all__ = [
    "PRIVATE_DIR_MODE",
    "PRIVATE_FILE_MODE",
    "UnsafePathError",
    "new_file",
    "open_read",
    "private_dir",
]
