"""Whether a SQLite store file's boot-clock times still count: the file names the boot of
the host it counts on (its boot id) and the machines that used it during that boot.

A boot id that cannot be read (a unit with ProcSubset=pid, a container that hides
/proc/sys) says nothing: it must neither expire leases nor replace the boot the file
names, or one `poolsup status` would let a second supervisor claim a running job.
"""

from __future__ import annotations

import enum
from collections.abc import Collection


class BootCheck(enum.Enum):
    SAME_BOOT = "same boot"  # the file's times count on our clock
    UNKNOWN = "unknown"  # our boot id is unknown: change nothing
    FIRST = "first"  # the file names no boot yet: ours from now on, nothing expires
    REBOOTED = "rebooted"  # the file's boot is over: every lease and supervisor with it
    OTHER_HOST = "other host"  # another machine's boot: refuse the file


def check_boot(
    file_boot: str | None, file_machines: Collection[str], boot: str | None, machine: str | None
) -> BootCheck:
    """Judge a file that names `file_boot` (None: no boot known), used during that boot
    by `file_machines` (the machine ids that could be read), opened by `machine` during
    `boot` (None where the host does not say).

    A different boot id is a reboot of this host unless the file shows the machines of
    that boot and we are not one of them: then it is another host, whose supervisors may
    be alive; expiring their leases would run their jobs twice.  A machine id that cannot
    be read, or a file that recorded none, cannot tell the two apart, and is a reboot, as
    a single-host store has to assume.  Containers that share one kernel share its boot
    id, so their different machine ids never matter.
    """
    if boot is None:
        return BootCheck.UNKNOWN
    if file_boot is None:
        return BootCheck.FIRST
    if file_boot == boot:
        return BootCheck.SAME_BOOT
    if machine is not None and file_machines and machine not in file_machines:
        return BootCheck.OTHER_HOST
    return BootCheck.REBOOTED
