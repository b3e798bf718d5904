"""Hiding paths with Landlock alone, where no mount namespace can be made (a container
without CAP_SYS_ADMIN under containerd's or Docker's default seccomp profile refuses
`unshare` and `mount`: docs/kubernetes.md).

Landlock only allows: a domain that handles a right refuses it everywhere but beneath the
paths a rule names. So "everything but these paths" is spelled out, in the fork server,
once per handler: every entry of each directory on the way from `/` down to a hidden path
gets the rights, except the next directory on that way and the hidden path itself; those
directories (the "ancestors") get at most READ_DIR. What the job can then reach is every
file it could reach before, but:
- a hidden path, and anything that appears in an ancestor directory after the ruleset was
  made (a SQLite `-journal` made later included): no right at all;
- an ancestor directory itself: listing it only (not even that when a hidden directory lies
  beneath it, since READ_DIR is inherited), no new entry, no removal, no rename.
Symbolic links among the entries get no rule (a rule follows to the target, which is
reached by its own path), nor does an entry that is the same inode as a hidden path or an
ancestor (a hard link, a bind mount): Landlock's rules belong to inodes.

Hidden paths are resolved first (a Kubernetes ConfigMap's `pool.toml` is a symlink into a
`..data` directory): Landlock checks the real parents of the file opened.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from sandbox import landlock as ll


def ancestors_of(path: str) -> list[str]:
    """The directories above `path`, from `/` down (pure)."""
    parents: list[str] = []
    parent = os.path.dirname(path)
    while True:
        parents.append(parent)
        if parent == "/":
            return parents[::-1]
        parent = os.path.dirname(parent)


def rules_around(hidden: Iterable[str], access: int) -> list[tuple[str, int]]:
    """Landlock path rules granting `access` everywhere on this file system but at and
    beneath `hidden`, and READ_DIR on the directories above them (see the module's
    docstring). Reads the directories; an ancestor it cannot list grants nothing beneath."""
    targets = {os.path.realpath(path) for path in hidden}
    ancestors: set[str] = set()
    for target in targets:
        ancestors.update(ancestors_of(target))
    ancestors -= targets
    hidden_dirs = [target for target in targets if os.path.isdir(target)]
    kept = _inodes(targets | ancestors)
    rules: list[tuple[str, int]] = []
    for directory in sorted(ancestors):
        if not any(target.startswith(directory.rstrip("/") + "/") for target in hidden_dirs):
            rules.append((directory, ll.READ_DIR))
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            path = entry.path
            if path in ancestors or path in targets or entry.is_symlink():
                continue
            try:
                status = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if (status.st_dev, status.st_ino) in kept:
                continue
            rules.append((path, access))
    return rules


def _inodes(paths: Iterable[str]) -> set[tuple[int, int]]:
    found = set()
    for path in paths:
        try:
            status = os.stat(path)
        except OSError:
            continue
        found.add((status.st_dev, status.st_ino))
    return found
