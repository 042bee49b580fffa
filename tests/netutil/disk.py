"""A disk that fills: a small ext4 file system on a loop device, mounted (mounting needs root).

``small_ext4(megabytes, parent)`` is a context manager yielding the mount point (under ``parent``); it raises
``DiskError`` naming the command that failed, and unmounts (lazily if busy) and deletes the image on exit.
``fill(mount)`` writes a file there until the file system is full and returns its path (remove it to give
the space back). ``CrashableDisk`` is a disk that loses power: what no fsync forced out is gone after ``crash()``.
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


class CrashableDisk:
    """An ext4 file system on a loop device (mounting needs root) that can lose power: ``crash()`` keeps only
    what the disk was given, i.e. what an fsync forced out (or the kernel wrote back on its own: dirty pages
    older than ``vm.dirty_expire_centisecs``, 30 s by default, so a test crashes well within that).

    Mounted ``data=writeback`` with a 10-minute journal commit interval: ext4's default ``data=ordered`` would
    write every file's new data out at each journal commit (every 5 s, and at any fsync of any file), which no
    power cut respects. ``crash()``, once the processes writing there are dead, copies the image as the loop
    device holds it (the disk's state at the cut), unmounts the file system (whose dirty pages then reach the
    old image, which is dropped) and mounts the copy at the same place: ext4 replays its journal, as after a
    power cut, and what was only in the page cache is gone."""

    def __init__(self, megabytes: int, parent: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="sulis-crash-ext4-", dir=parent)
        self.image, self.mnt = os.path.join(self.dir, "disk.img"), os.path.join(self.dir, "mnt")
        self.crashes = 0
        self.cut_image: str | None = None
        self.mounted = False
        os.mkdir(self.mnt)
        with open(self.image, "wb") as f:
            f.truncate(megabytes << 20)

    def __enter__(self) -> CrashableDisk:
        try:
            self._run(["mkfs.ext4", "-q", "-F", self.image])
            self._mount()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _run(self, cmd: list[str]) -> None:
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise DiskError(f"{' '.join(cmd)}: {out.stderr.strip()}")

    def _mount(self) -> None:
        self._run(["mount", "-o", "loop,data=writeback,commit=600", self.image, self.mnt])
        self.mounted = True

    def _unmount(self) -> None:
        if self.mounted and subprocess.run(["umount", self.mnt], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", self.mnt], capture_output=True)
        self.mounted = False

    def sync(self) -> None:
        """Writes back all that was written so far (``syncfs``), as a machine that ran a while would have."""
        self._run(["sync", "-f", self.mnt])

    def cut(self) -> None:
        """The instant of the power cut: the image as the loop device holds it now is what comes back. The
        processes writing here must be stopped (SIGSTOP, every thread out of its system calls) or dead, so
        that nothing is written while it is copied."""
        self.crashes += 1
        self.cut_image = os.path.join(self.dir, f"disk-after-crash-{self.crashes}.img")
        self._run(["cp", "--sparse=always", self.image, self.cut_image])

    def crash(self) -> None:
        """The power cut (every process writing here must be dead): the file system comes back as the disk
        held it at ``cut()`` (now, when no cut was taken), at the same mount point."""
        if self.cut_image is None:
            self.cut()
        self._unmount()
        os.remove(self.image)
        self.image, self.cut_image = self.cut_image, None
        self._mount()

    def __exit__(self, *exc: object) -> None:
        self._unmount()
        shutil.rmtree(self.dir, ignore_errors=True)
