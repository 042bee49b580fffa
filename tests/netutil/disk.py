"""A disk that fills: a small ext4 file system on a loop device, mounted (mounting needs root).

``small_ext4(megabytes, parent)`` is a context manager yielding the mount point (under ``parent``); it raises
``DiskError`` naming the command that failed, and unmounts (lazily if busy) and deletes the image on exit.
``fill(mount)`` writes a file there until the file system is full and returns its path (remove it to give
the space back).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import tempfile


class DiskError(RuntimeError):
    pass


@contextlib.contextmanager
def small_ext4(megabytes: int, parent: str):
    d = tempfile.mkdtemp(prefix="sulis-ext4-", dir=parent)
    image, mnt = os.path.join(d, "disk.img"), os.path.join(d, "mnt")
    os.mkdir(mnt)
    with open(image, "wb") as f:
        f.truncate(megabytes << 20)
    mounted = False
    try:
        for cmd in (["mkfs.ext4", "-q", "-F", image], ["mount", "-o", "loop", image, mnt]):
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                raise DiskError(f"cannot make a small ext4 file system ({cmd[0]}): {out.stderr.strip()}")
        mounted = True
        yield mnt
    finally:
        if mounted and subprocess.run(["umount", mnt], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", mnt], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)


def fill(mount: str, leave: int = 0) -> str:
    """Writes ``mount``/filler until no more than ``leave`` bytes are free (0: until the disk refuses,
    root's reserved blocks included); returns the filler's path."""
    path = os.path.join(mount, "filler")
    chunk = b"\0" * (1 << 20)
    with open(path, "wb") as f:
        try:
            while True:
                room = shutil.disk_usage(mount).free - leave
                if leave and room <= 0:
                    break
                f.write(chunk if not leave else chunk[:room])
                f.flush()
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
        try:
            os.fsync(f.fileno())
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
    return path
