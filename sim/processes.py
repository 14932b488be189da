"""What the live loop's processes ask of the kernel; the lowest layer, so that every package may use it.

- Child processes that end with their parent (Linux ``prctl(PR_SET_PDEATHSIG)``): the supervisor's children, the
  driver's emulator and the emulator's physics plant all ask for it, so that a parent killed outright (SIGKILL,
  which it cannot pass on) leaves nothing running.
- The real-time scheduling class for the loops paced to the wall clock (``--rt-priority``: ``mms serve``,
  ``mms drive``, ``mms emulate``), so that a busy machine delays them less (docs/headroom.md).
- A heap frozen out of the garbage collector once those loops are set up (:func:`freeze_startup_heap`).
- A fine timer slack for the loops that sleep until a deadline (:func:`fine_timer_slack`), and a short slice of
  the fair scheduler for them (:func:`request_slice`), neither of which needs a permission.
- A lower weight in the fair scheduler for the processes that can wait (:func:`lower_session_priority`: the
  recorder, the driver with its emulator, the dashboard), so that the model server preempts them when a state is
  due; lowering needs no permission. Opt-in: on a busy machine it starves them.
"""
from __future__ import annotations

import ctypes
import errno
import gc
import os
import platform
import signal
import struct
import sys
import threading
import time

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


#: prctl option: this thread's timer slack, ns (linux/prctl.h)
_PR_SET_TIMERSLACK = 29
#: the timer slack of the loops paced to the wall clock, ns: the kernel may fire a sleeper's timer this late to
#: group wake-ups (default 50 000 ns for the normal scheduler, 0 under SCHED_FIFO)
FINE_TIMER_SLACK_NS = 1_000


def fine_timer_slack() -> None:
    """Ask the kernel to wake this thread's sleeps within FINE_TIMER_SLACK_NS of their end (no permission needed).
    benchmarks/bench_wakeup.py on the 2-core machine: a 0.3 ms ``time.sleep`` ends 0.074-0.076 ms late at the
    median with the default 50 us slack, 0.024-0.030 ms with 1 us (3 runs, load 7.2-8.4), out of the half period
    (0.5 ms) a 1 kHz state may be late."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_TIMERSLACK, FINE_TIMER_SLACK_NS, 0, 0, 0)


#: sched_setattr(2)'s system call number per machine (it has no libc wrapper)
_SYS_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}
#: struct sched_attr, first version (linux/sched/types.h): size, policy, flags, nice, priority, runtime (ns),
#: deadline, period, util_min, util_max
_SCHED_ATTR = struct.Struct("IIQiIQQQII")
#: the custom slices Linux accepts, s (kernel/sched/syscalls.c clamps sched_runtime to 0.1-100 ms)
MIN_SLICE_S, MAX_SLICE_S = 1e-4, 0.1
#: the fair scheduler's slice the loops paced to the wall clock ask for by default, s: the shortest Linux accepts
SHORT_SLICE_S = MIN_SLICE_S


#: the name (/proc/PID/task/TID/comm) of every thread ZeroMQ starts: its I/O thread, which sends what a loop
#: publishes, and its reaper
ZMQ_THREAD_PREFIX = "ZMQbg/"


#: how long the threads ZeroMQ started with a context's first socket may take to name themselves, s: each one
#: names itself (pthread_setname_np) when it first runs, which on a loaded machine comes after its creator has
#: returned and looks for it (the reason a ZeroMQ thread kept the default slice in loaded CI runs)
THREAD_NAMING_DEADLINE_S = 5.0
#: how often the names are read again while a thread has not named itself yet, s
THREAD_NAMING_POLL_S = 1e-3


def zmq_thread_count(io_threads: int) -> int:
    """How many threads a ZeroMQ context with ``io_threads`` I/O threads runs once it has a socket: those and its
    reaper (libzmq's ctx_t::start)."""
    return io_threads + 1


def threads_named(prefix: str, count: int = 0, deadline_s: float = THREAD_NAMING_DEADLINE_S) -> list[int]:
    """The ids of this process's threads whose name starts with ``prefix`` (none where /proc does not say). With
    ``count``: waits up to ``deadline_s`` until that many have the name (threads just started that have not named
    themselves yet), then says on stderr if fewer did and returns those."""
    deadline = time.monotonic() + deadline_s
    while len(tids := _threads_named_now(prefix)) < count and os.path.isdir("/proc/self/task"):
        if time.monotonic() > deadline:
            print(f"{len(tids)} of {count} threads named {prefix!r} found after {deadline_s:g} s",
                  file=sys.stderr, flush=True)
            break
        time.sleep(THREAD_NAMING_POLL_S)
    return tids


def _threads_named_now(prefix: str) -> list[int]:
    tids = []
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ():
        try:
            if open(f"/proc/self/task/{tid}/comm").read().startswith(prefix):
                tids.append(int(tid))
        except OSError:         # a thread that ended meanwhile
            continue
    return tids


def request_slice(seconds: float, threads: list[int] | tuple[int, ...] = ()) -> bool:
    """Ask Linux's fair scheduler (EEVDF; a custom slice is honoured from kernel 6.12 on) for a slice of
    ``seconds`` (0.1-100 ms; 0: the kernel's default) for this thread, the ``threads`` given (ids: ZeroMQ's I/O
    thread) and the threads it starts afterwards. No permission is needed, and the nice value and the
    normal policy stay: do not call it under SCHED_FIFO, which it would leave. Why: a thread that wakes up for a
    deadline with a short slice has an earlier virtual deadline than a busy thread with the default slice
    (0.75 ms x (1 + log2 CPUs), 1.4 ms on the 2-core machine), so it preempts it at once instead of waiting up to
    the rest of that slice. True if the kernel took it (read back); elsewhere (another system, an older kernel)
    False and nothing changes."""
    number = _SYS_SCHED_SETATTR.get(platform.machine())
    if number is None or not sys.platform.startswith("linux"):
        return False
    runtime_ns = round(seconds * 1e9)
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.create_string_buffer(_SCHED_ATTR.pack(_SCHED_ATTR.size, os.SCHED_OTHER, 0,
                                                        os.getpriority(os.PRIO_PROCESS, 0), 0, runtime_ns, 0, 0, 0, 0),
                                       _SCHED_ATTR.size)
    if libc.syscall(number, 0, attr, 0) != 0:
        return False
    for tid in threads:
        if libc.syscall(number, tid, attr, 0) != 0:     # seen once in CI: a ZeroMQ thread kept the default slice
            print(f"thread {tid} kept the scheduler's default slice ({os.strerror(ctypes.get_errno())})",
                  file=sys.stderr, flush=True)
    return runtime_ns == 0 or current_slice_ns() == runtime_ns


def current_slice_ns() -> int | None:
    """This thread's slice in the fair scheduler, ns, as /proc says (``se.slice``; None where it does not say)."""
    try:
        lines = open(f"/proc/self/task/{threading.get_native_id()}/sched").read().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(":")
        if name.strip() == "se.slice":
            return int(float(value))
    return None


#: Highest SCHED_FIFO priority Linux accepts (sched_get_priority_max(SCHED_FIFO)).
MAX_RT_PRIORITY = 99


def set_realtime_priority(priority: int, command: str, rtf: float | None = None) -> bool:
    """``priority`` 1-99: SCHED_FIFO at that priority for this thread and every thread and process it starts
    afterwards (ZeroMQ's I/O thread, which sends what the loop publishes: call it before the first socket, or see
    :func:`realtime_refusal`).
    0: the normal scheduler, dropping a class inherited from the parent. Returns whether the real-time class was
    taken; :func:`realtime_refusal` says why not."""
    refusal = realtime_refusal(priority, command, rtf)    # asked even for 0, which drops an inherited class
    return priority != 0 and refusal is None


def realtime_refusal(priority: int, command: str, rtf: float | None = None,
                     threads: list[int] | tuple[int, ...] = ()) -> str | None:
    """Ask for SCHED_FIFO at ``priority`` (1-99; 0: the normal scheduler for every thread, asked, and None returned) for this thread,
    the ``threads`` given (ids: ZeroMQ's, started before) and the threads and processes it starts afterwards; why
    it was not taken (one line on stderr too, and the normal scheduler), or None.

    The callers' loops sleep between their deadlines and never spin, and Linux caps the real-time class at 95 % of
    the CPU time (``/proc/sys/kernel/sched_rt_runtime_us``), so the machine cannot be starved; a model slower than
    real time (``rtf``, its warm-up's simulated time per CPU second of the loop's thread, below 1: a busy machine does
    not lower that figure, only the model's own cost does) would never sleep, and gains nothing from the class: it is
    not asked for then. Without the permission (CAP_SYS_NICE, or an ``rtprio`` limit in
    /etc/security/limits.conf), as ros2_control's controller manager does, one line and the normal scheduler."""
    if priority == 0:
        _set_policy(_every_thread(), os.SCHED_OTHER, 0)   # lowering needs no permission
        return None
    if rtf is not None and rtf < 1.0:
        _set_policy(_every_thread(), os.SCHED_OTHER, 0)
        reason = f"the model runs at {rtf:.2f}x real time per CPU second, slower than the clock it is paced to"
        print(f"{command}: not asking for SCHED_FIFO priority {priority}: {reason} (the loop would never sleep "
              "and hold a core); running under the normal scheduler", file=sys.stderr, flush=True)
        return reason
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except OSError as exc:
        reason = f"no permission ({exc.strerror or exc})"
        # a class inherited from the parent stays unless dropped (lowering needs no permission): the line below
        # says the normal scheduler, so every thread is put under it
        _set_policy(_every_thread(), os.SCHED_OTHER, 0)
        print(f"{command}: cannot use SCHED_FIFO priority {priority} ({exc.strerror or exc}); running under the "
              "normal scheduler (docs/headroom.md says how to allow it)", file=sys.stderr, flush=True)
        return reason
    _set_policy(threads, os.SCHED_FIFO, priority)
    return None


def _every_thread() -> list[int]:
    """The ids of this process's threads (a class inherited from the parent is on each of them)."""
    return threads_named("")


def _set_policy(tids, policy: int, priority: int) -> None:
    """``policy`` at ``priority`` for each thread id (0: this one); a thread that ended meanwhile is skipped."""
    for tid in tids:
        try:
            os.sched_setscheduler(tid, policy, os.sched_param(priority))
        except ProcessLookupError:
            continue


def leave_realtime_class(command: str, why: str) -> None:
    """Put every thread of this process (the loop and ZeroMQ's I/O thread) back under the normal scheduler, with
    one line on stderr: a loop that falls behind real time under SCHED_FIFO never sleeps, and would hold a core at
    the top of the machine's priorities while gaining nothing."""
    _set_policy(_every_thread(), os.SCHED_OTHER, 0)
    print(f"{command}: leaving SCHED_FIFO: {why}; running under the normal scheduler", file=sys.stderr, flush=True)


def freeze_startup_heap() -> None:
    """Collect once, then move every object alive now (the imports: numpy, numba, zmq, the model; about 130 000
    objects in `mms serve`) into the collector's permanent generation. A full collection then no longer walks
    them: measured in `mms serve` after its warm-up, 50 ms per full collection before (50 missed 1 kHz deadlines
    whenever one fell inside the loop), 3 us after. Called by the loops paced to the wall clock once they are set
    up, before their first deadline."""
    gc.collect()
    gc.freeze()


#: the nice value for the sessions of the processes that can wait, beside the model server on an otherwise idle
#: machine (`mms demo --background-nice`, off by default): a weight of 110 against the server's 1024 (the kernel's
#: sched_prio_to_weight table), so that the server's wake-up preempts them; on a busy machine that weight starves
#: them (docs/headroom.md)
BACKGROUND_NICE = 10
#: /proc/sys/kernel/sched_autogroup_enabled: 1 when Linux groups the fair scheduler's processes by session
_AUTOGROUP_SWITCH = "/proc/sys/kernel/sched_autogroup_enabled"
#: Linux takes one autogroup nice change per 100 ms from an unprivileged user (kernel/sched/autogroup.c, EAGAIN
#: otherwise); how long to keep asking, s
_AUTOGROUP_RETRY_S, _AUTOGROUP_RETRY_FOR_S = 0.02, 1.0


def autogroups_enabled() -> bool:
    """Linux groups the fair scheduler's processes by session (autogroup; on in the common distributions)."""
    try:
        return open(_AUTOGROUP_SWITCH).read().strip() == "1"
    except OSError:
        return False


def session_nice(pid: int) -> int | None:
    """The nice value that sets the weight of ``pid`` against other sessions: its session group's
    (``/proc/PID/autogroup``: ``/autogroup-N nice K``) with autogroup on, else its own; None where it cannot be
    read."""
    try:
        if not autogroups_enabled():
            return os.getpriority(os.PRIO_PROCESS, pid)
        return int(open(f"/proc/{pid}/autogroup").read().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def lower_session_priority(pid: int, nice: int = BACKGROUND_NICE) -> bool:
    """Give the processes of ``pid``'s session (the process, its threads and the children it starts: the driver's
    emulator and its physics plant) the fair scheduler's weight of ``nice`` (0-19). Why the session: with autogroup
    on, the fair scheduler first shares the CPU between sessions as equals, and a process's own nice value counts
    only inside its session; `mms demo` starts every process in a session of its own, so only the session's nice
    (``/proc/PID/autogroup``) changes its weight against the model server's. Where autogroup is off, the nice of
    the process group ``pid`` leads. Raising a nice value needs no permission (Linux takes one autogroup change per
    100 ms from a user: asked again for up to a second). True if it took (read back)."""
    if not sys.platform.startswith("linux"):
        return False
    if not autogroups_enabled():
        try:
            os.setpriority(os.PRIO_PGRP, os.getpgid(pid), nice)
        except OSError:
            return False
        return session_nice(pid) == nice
    give_up = time.monotonic() + _AUTOGROUP_RETRY_FOR_S
    while True:
        try:
            with open(f"/proc/{pid}/autogroup", "w") as handle:
                handle.write(str(nice))
            break
        except OSError as exc:
            if exc.errno != errno.EAGAIN or time.monotonic() > give_up:
                return False
            time.sleep(_AUTOGROUP_RETRY_S)
    return session_nice(pid) == nice
