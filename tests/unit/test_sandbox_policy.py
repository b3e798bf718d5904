"""The sandbox decisions, pure: what each profile becomes on a kernel, what it could not
do there, what a profile needs; and the strict syscall filter, run through a small BPF
interpreter."""

from __future__ import annotations

import errno
import socket
import struct

from sandbox import landlock as ll
from sandbox import seccomp
from sandbox.policy import KernelSupport, SandboxSpec, plan, requirements

FULL = KernelSupport(landlock_abi=7, seccomp=True, namespaces=True)
OLD = KernelSupport(landlock_abi=3, seccomp=True, namespaces=False,
                    namespaces_error="unshare: Operation not permitted")
HIDDEN = ("/etc/pool.toml", "/var/lib/p/pool.db")


def test_off_does_nothing() -> None:
    decided = plan(SandboxSpec(profile="off", hidden=HIDDEN), FULL, "/s")
    assert (decided.hidden, decided.landlock, decided.seccomp_sockets) == ((), None, None)
    assert not decided.no_new_privs


def test_default_scopes_hides_and_leaves_files_and_network_alone() -> None:
    decided = plan(SandboxSpec(hidden=HIDDEN), FULL, "/s")
    assert decided.hidden == HIDDEN and decided.no_new_privs and not decided.missing
    assert decided.landlock is not None
    assert decided.landlock.scoped == ll.SCOPE_SIGNAL | ll.SCOPE_ABSTRACT_UNIX_SOCKET
    assert decided.landlock.fs == ll.MAKE_CHAR | ll.MAKE_BLOCK  # only to forbid mounts
    assert (decided.landlock.net, decided.landlock.paths) == (0, ())
    assert decided.seccomp_sockets is None


def test_default_with_ports_limits_tcp_connections_only() -> None:
    decided = plan(SandboxSpec(network=(443,)), FULL, "/s")
    assert decided.landlock is not None
    assert (decided.landlock.net, decided.landlock.ports) == (ll.CONNECT_TCP, (443,))


def test_default_on_an_old_kernel_does_what_it_can_and_says_what_not() -> None:
    decided = plan(SandboxSpec(hidden=HIDDEN), OLD, "/s")
    assert decided.hidden == ()
    assert decided.landlock is not None and decided.landlock.scoped == 0
    assert decided.landlock.hidden == HIDDEN  # no mount namespace: Landlock hides them
    assert decided.missing == (
        "keep signals and abstract sockets inside the job (Landlock ABI 3)",
    )
    assert requirements(SandboxSpec(hidden=HIDDEN), OLD) == []
    bare = KernelSupport(landlock_abi=0, seccomp=True, namespaces=False,
                         namespaces_error="unshare: Operation not permitted",
                         landlock_error="Landlock is disabled in this kernel")
    assert plan(SandboxSpec(hidden=HIDDEN), bare, "/s").missing == (
        "hide the config file and store (unshare: Operation not permitted; "
        "Landlock is disabled in this kernel)",
        "keep signals and ptrace inside the job (Landlock is disabled in this kernel)",
    )


# An unprivileged container: Landlock ABI 7, but no unshare or mount (containerd's seccomp).
CONTAINER = KernelSupport(landlock_abi=7, seccomp=True, namespaces=False,
                          namespaces_error="unshare: Operation not permitted")


def test_default_in_a_container_hides_with_landlock_and_allows_all_else() -> None:
    decided = plan(SandboxSpec(hidden=HIDDEN), CONTAINER, "/s")
    assert decided.hidden == () and not decided.missing and decided.no_new_privs
    rules = decided.landlock
    assert rules is not None
    assert rules.scoped == ll.SCOPE_SIGNAL | ll.SCOPE_ABSTRACT_UNIX_SOCKET
    assert rules.fs == rules.others == ll.all_fs_rights(7)
    assert (rules.hidden, rules.paths) == (HIDDEN, ())


def test_strict_in_a_container_is_read_only_around_the_hidden_paths() -> None:
    spec = SandboxSpec(profile="strict", hidden=HIDDEN, writable=("/srv/out",))
    decided = plan(spec, CONTAINER, "/scratch")
    rules = decided.landlock
    assert rules is not None and not decided.missing
    assert (rules.hidden, rules.others) == (HIDDEN, ll.READ_ONLY)
    paths = dict(rules.paths)
    assert "/" not in paths  # it would uncover the hidden paths
    assert paths["/scratch"] == paths["/srv/out"] == ll.all_fs_rights(7)
    assert requirements(spec, CONTAINER) == []
    inside = SandboxSpec(profile="strict", hidden=HIDDEN, writable=("/var/lib",))
    assert requirements(inside, CONTAINER) == [
        "mount namespaces to hide /var/lib/p/pool.db inside writable /var/lib "
        "(unshare: Operation not permitted)"]
    assert requirements(inside, FULL) == []


def test_strict_is_read_only_but_scratch_devices_and_writable() -> None:
    spec = SandboxSpec(profile="strict", writable=("/srv/out",), network="none")
    decided = plan(spec, FULL, "/scratch")
    rules = decided.landlock
    assert rules is not None and rules.fs == ll.all_fs_rights(7)
    paths = dict(rules.paths)
    assert paths["/"] == ll.READ_ONLY
    assert paths["/scratch"] == paths["/srv/out"] == ll.all_fs_rights(7)
    assert paths["/dev/null"] & ll.WRITE_FILE
    assert rules.net == ll.CONNECT_TCP | ll.BIND_TCP and rules.ports == ()
    assert decided.seccomp_sockets == ()


def test_strict_with_ports_may_open_ip_sockets() -> None:
    decided = plan(SandboxSpec(profile="strict", network=(6379,)), FULL, "/s")
    assert decided.landlock is not None and decided.landlock.ports == (6379,)
    assert decided.seccomp_sockets == (socket.AF_INET, socket.AF_INET6)


def test_what_a_profile_needs_of_the_kernel() -> None:
    strict = SandboxSpec(profile="strict", hidden=HIDDEN)
    assert requirements(strict, FULL) == []
    assert requirements(strict, OLD) == ["Landlock ABI 6 (this kernel has 3)"]
    none = KernelSupport(landlock_abi=0, seccomp=False, namespaces=True)
    assert requirements(SandboxSpec(profile="strict"), none) == [
        "Landlock ABI 6 (this kernel has no Landlock)",
        "a seccomp filter for this architecture",
    ]
    assert requirements(SandboxSpec(network=(443,)), none) == [
        "Landlock ABI 4 for TCP port rules"]


# -- the syscall filter

_ARCH = 0xC000003E


def run_filter(program: bytes, nr: int, arg0: int = 0, arch: int = _ARCH) -> int:
    """What the filter answers for system call `nr` (a tiny classic-BPF interpreter for
    the instructions `seccomp.program` uses)."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    ops = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = ops[pc]
        if code == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == 0x15:
            pc += jt if acc == k else jf
        elif code == 0x45:
            pc += jt if acc & k else jf
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")
        pc += 1


ALLOW, EPERM = 0x7FFF0000, 0x00050000 | errno.EPERM


def test_the_filter_refuses_its_list_with_eperm_and_allows_the_rest() -> None:
    program = seccomp.program((socket.AF_INET,))
    for name, number in seccomp.REFUSED.items():
        assert run_filter(program, number) == EPERM, name
    for number in (0, 1, 2, 57, 59, 231):  # read, write, open, fork, execve, exit_group
        assert run_filter(program, number) == ALLOW
    assert run_filter(program, 435) == 0x00050000 | errno.ENOSYS  # clone3
    assert run_filter(program, 56, arg0=0x01200011) == ALLOW  # clone as fork() makes it
    assert run_filter(program, 56, arg0=0x10000000 | 0x11) == EPERM  # CLONE_NEWUSER
    assert run_filter(program, 41, arg0=socket.AF_INET) == ALLOW
    assert run_filter(program, 41, arg0=socket.AF_UNIX) == EPERM
    assert run_filter(program, 0x40000000 | 1) == EPERM  # x32
    assert run_filter(program, 0, arch=0x40000003) == EPERM  # i386
    assert run_filter(seccomp.program(()), 41, arg0=socket.AF_INET) == EPERM
