"""Locks for the files of a baselines directory, kept out of it.

A baselines directory is reviewed and committed by its user (`specguard init` writes no
.gitignore), so nothing but baselines may appear in it. A file's lock lives in the per-user lock
directory `<system temp dir>/specguard-locks-<uid>/`, named by a hash of the file's resolved
path, so every process of this user on this machine that writes the same file (two sessions, a
pytest-xdist controller, a symlinked or relative `--baseline-dir`) takes the same lock:

- the system temp dir (`tempfile.gettempdir()`: TMPDIR, else /tmp) exists and is writable and
  local wherever a session runs, including CI containers whose home is read-only or missing and
  clusters whose home is on NFS; it does not depend on the login session as XDG_RUNTIME_DIR does
  (unset under cron, sudo or some ssh set-ups: two sessions could pick two directories and not
  exclude each other);
- per user (uid in the name, mode 0700, checked to be a directory of this user and not a link):
  in a shared /tmp no other user's directory is ever used. Processes of two users writing one
  baselines directory at once are not excluded, nor processes on two machines sharing it.
- A lock file is never deleted: deleting one another process holds (or has just opened) would
  let a third process lock a new file of the same name while the first still writes. They are
  empty, one per baseline file written. If the system removes one anyway (temp-dir cleaning), a
  process that locked the removed file sees that the path now names another file and locks again.

Lock files an older specguard left beside the baselines (`eagle3.json.lock`) are not read, not
deleted and not an error.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path


class LockError(OSError):
    """The lock directory cannot be used; the message names it and the fix."""


def lock_dir() -> Path:
    """This user's lock directory, created 0700 if absent; LockError if the name is taken by
    something that is not this user's own directory."""
    path = Path(tempfile.gettempdir()) / f"specguard-locks-{os.getuid()}"
    try:
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
        info = os.lstat(path)
    except OSError as exc:
        raise LockError(f"cannot lock baseline files: cannot create {path} ({exc.strerror}); "
                        f"set TMPDIR to a writable directory") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise LockError(f"cannot lock baseline files: {path} is not a directory of this user (uid {os.getuid()}); "
                        f"remove it or set TMPDIR to another directory")
    return path


def lock_path(target: Path) -> Path:
    """The lock file of `target` (a baseline file): its resolved path's hash, in `lock_dir()`."""
    digest = hashlib.sha256(str(Path(target).resolve()).encode()).hexdigest()[:32]
    return lock_dir() / f"{digest}.lock"


@contextlib.contextmanager
def _one(target: Path) -> Iterator[None]:
    while True:
        path = lock_path(target)  # (re)creates the directory if it was removed
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with contextlib.suppress(FileNotFoundError):
                now, held = os.stat(path), os.fstat(fd)
                if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                    break  # the locked file is still the one the path names
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # removed while we waited: lock the file the path names now
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


@contextlib.contextmanager
def locked(targets: Iterable[Path]) -> Iterator[None]:
    """Hold the locks of these files, taken in one order for every process (no lock-order deadlock)."""
    with contextlib.ExitStack() as stack:
        for target in sorted({str(Path(t).resolve()) for t in targets}):
            stack.enter_context(_one(Path(target)))
        yield
