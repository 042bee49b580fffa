"""What a process is doing inside the kernel, read from ``/proc``: each thread's state, wait channel and
kernel stack. For hang guards that, when they fire, must say what the process waited for.

``thread_states(pid)``, ``all_threads_stopped(pid)``, ``threads_in(pid, skip)``; ``KERNEL_STALL`` is the
guard for anything that waits behind the kernel's own threads.
"""

from __future__ import annotations

import os


def thread_states(pid: int) -> dict[str, str]:
    """Each thread of process ``pid`` (by name and id) and its state letter from ``/proc``."""
    states = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                # The state follows the parenthesised command name, which may hold spaces.
                name, rest = f.read().split("(", 1)[1].rsplit(")", 1)
                states[f"{name}/{task}"] = rest.split()[0]
        except FileNotFoundError:
            continue  # a thread that ended meanwhile
    return states


def all_threads_stopped(pid: int) -> bool:
    """Every thread of process ``pid`` is stopped (SIGSTOP takes hold thread by thread, after kill(2)
    returned: one on the other core may still run meanwhile)."""
    states = thread_states(pid)
    return bool(states) and all(state in ("T", "t") for state in states.values())


#: A hang guard for anything that waits behind the kernel's own threads: an fsync, a process that must stop
#: (a thread inside an uninterruptible system call stops only when the call returns) or start. Beside two
#: busy loops this machine's kernel left the disks' writeback threads runnable but unscheduled for up to a
#: minute (their run time in ``/proc/<tid>/sched`` did not move), and every fsync waited with them. Not a
#: measure of the machine's speed.
KERNEL_STALL = 180.0


def threads_in(pid: int, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Each thread of ``pid`` whose state is not in ``skip``, with its state, the kernel function it waits in
    and its kernel stack (root only): what a process stuck in the kernel is waiting for."""
    told = {}
    for thread, state in thread_states(pid).items():
        if state in skip:
            continue
        task = f"/proc/{pid}/task/{thread.rsplit('/', 1)[1]}"
        try:
            with open(f"{task}/wchan") as f:
                state += f" in {f.read()}"
            with open(f"{task}/stack") as f:
                state += " < " + " < ".join(line.split()[-1] for line in f.read().splitlines()[:12])
        except OSError:
            pass
        told[thread] = state
    return told
