"""Who runs a run: the driver that marked it ``running``, identified by host, pid and the start time of
its process, so that a pid the system has since given to another process is not taken for the driver.

An owner is ``host:pid:start``, ``start`` the process's start time in clock ticks since boot (field 22
of ``/proc/PID/stat``). Stores written before hold ``host:pid``; for those the run's ``started_at`` is
compared with the process's start instead: a process that started after the run was claimed cannot
be the driver that claimed it. Without ``/proc`` (not Linux) only the pid can be checked.
"""

from __future__ import annotations

import os
import socket

SLACK_S = 2.0  # the boot time in /proc/stat is in whole seconds


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (which may hold spaces and parentheses):
    index 0 is the state (field 3), index 19 the start time (field 22). None without /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (None when it cannot be read)."""
    fields = _stat_fields(pid)
    return fields[19] if fields and len(fields) > 19 else None


def start_epoch(pid: int) -> float | None:
    """The process's start time in seconds since the epoch (None when it cannot be read)."""
    ticks = start_ticks(pid)
    try:
        with open("/proc/stat") as f:
            boot = next(float(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + int(ticks) / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, ValueError, TypeError, IndexError):
        return None


def owner_id() -> str:
    """This process as a run owner: ``host:pid:start`` (``host:pid`` where the start cannot be read)."""
    me = f"{socket.gethostname()}:{os.getpid()}"
    ticks = start_ticks(os.getpid())
    return f"{me}:{ticks}" if ticks else me


def _parse(owner: str) -> tuple[str, str, str | None]:
    """(host, pid, start ticks or None) of an owner string, either form."""
    host, _, last = owner.rpartition(":")
    before, _, middle = host.rpartition(":")
    if before and middle.isdigit() and last.isdigit():
        return before, middle, last
    return host, last, None


def owner_is_gone(owner: str | None, started_at: float | None = None) -> bool:
    """Whether the driver that marked a run ``running`` (at ``started_at``) no longer exists, so the run
    must be re-run.

    Gone: no owner; another host (it cannot be checked: one study run from two machines at once is not
    supported); this very process (an earlier call in it was interrupted); a pid that is dead or a
    zombie; a live pid whose process started at another time than the owner's (the pid was reused),
    or, for an owner without a start time, after the run was claimed.
    """
    if not owner or ":" not in owner:
        return True
    host, pid, ticks = _parse(owner)
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: alive; its start time is still readable
        pass
    fields = _stat_fields(int(pid))
    if fields and fields[0] == "Z":  # killed, not yet reaped by its parent
        return True
    now_ticks = start_ticks(int(pid))
    if ticks is not None and now_ticks is not None:
        return now_ticks != ticks
    began = start_epoch(int(pid))
    return started_at is not None and began is not None and began > started_at + SLACK_S
