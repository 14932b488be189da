"""Child processes that end with their parent (Linux ``prctl(PR_SET_PDEATHSIG)``): the supervisor's children, the
driver's emulator and the emulator's physics plant all ask for it, so that a parent killed outright (SIGKILL,
which it cannot pass on) leaves nothing running. The lowest layer, so that every package may use it."""
from __future__ import annotations

import ctypes
import os
import signal

#: prctl option: the signal the kernel sends this process when its parent dies (linux/prctl.h)
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None = None) -> None:
    """Ask the kernel for SIGTERM when the parent dies. Run in the child (between fork and exec, or first thing in
    a forked process). With ``parent_pid`` (the parent's pid taken before the fork), a parent that died before the
    request was made is noticed too: the child then exits at once."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)
