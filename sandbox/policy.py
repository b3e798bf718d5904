"""What a handler's sandbox profile means on this kernel: a pure decision, from the
handler's `SandboxSpec` and the kernel's `KernelSupport` to the `Plan` that a job's
child carries out (`sandbox.enforce`), with what it could not do.

The profiles (docs/sandbox.md):
- "default": no_new_privs; Landlock's scopes (signals and abstract unix sockets stay in
  the job's own process tree) and its ptrace rule (a Landlock domain cannot trace a
  process outside it); the hidden paths (the pool's config file and SQLite store, and
  `hidden`) covered in a mount namespace of the job's own, or, where none can be made (an
  unprivileged container), left out of Landlock file rules that allow everything else
  (`sandbox.landlock_hiding`); TCP connections limited to `network` when it is a list.
- "strict": the default, plus a read-only file system but for the scratch directories,
  /dev/null and its kin and `writable`; TCP only to `network` (none by default), no
  TCP server; a syscall filter (`sandbox.seccomp`).
- "off": none of it.
"""

from __future__ import annotations

import posixpath
import socket
from dataclasses import dataclass, field

from sandbox import landlock as ll

PROFILES = ("default", "strict", "off")
# Writable in "strict" besides the scratch directories and `writable`.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
SCOPES_ABI, NETWORK_ABI = 6, 4


@dataclass(frozen=True, kw_only=True)
class SandboxSpec:
    profile: str = "default"
    writable: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()  # the handler's own, and the pool's config and store files
    network: str | tuple[int, ...] = "all"  # "all", "none" or TCP ports


@dataclass(frozen=True, kw_only=True)
class KernelSupport:
    landlock_abi: int
    seccomp: bool  # a filter can be loaded, for this architecture
    namespaces: bool  # a job may make a mount namespace (with a user namespace, unprivileged)
    namespaces_error: str = ""
    landlock_error: str = ""  # why landlock_abi is 0


@dataclass(frozen=True, kw_only=True)
class LandlockPlan:
    fs: int
    net: int
    scoped: int
    paths: tuple[tuple[str, int], ...] = ()
    ports: tuple[int, ...] = ()
    # Hidden by Landlock alone: `others` granted everywhere but beneath these (the rules
    # are spelled out when the ruleset is made: `sandbox.landlock_hiding`).
    hidden: tuple[str, ...] = ()
    others: int = 0


@dataclass(frozen=True, kw_only=True)
class Plan:
    hidden: tuple[str, ...] = ()  # to cover in a mount namespace
    landlock: LandlockPlan | None = None
    seccomp_sockets: tuple[int, ...] | None = None  # None: no syscall filter
    no_new_privs: bool = True
    missing: tuple[str, ...] = field(default=())  # what this kernel could not give


def requirements(spec: SandboxSpec, kernel: KernelSupport) -> list[str]:
    """What `spec` needs that `kernel` lacks, for a profile that must not run without
    it: "strict" needs all of it; "default" with a `network` list needs TCP rules."""
    problems: list[str] = []
    if spec.profile == "strict":
        if kernel.landlock_abi < SCOPES_ABI:
            problems.append(
                f"Landlock ABI {SCOPES_ABI} ("
                + (f"this kernel has {kernel.landlock_abi}" if kernel.landlock_abi
                   else kernel.landlock_error or "this kernel has no Landlock")
                + ")"
            )
        if not kernel.seccomp:
            problems.append("a seccomp filter for this architecture")
        clashes = [(path, directory) for path in spec.hidden for directory in spec.writable
                   if _beneath(path, directory)]
        if clashes and not kernel.namespaces:  # Landlock cannot take back what it allows
            path, directory = clashes[0]
            problems.append(f"mount namespaces to hide {path} inside writable {directory} "
                            f"({kernel.namespaces_error})")
    elif (spec.profile == "default" and isinstance(spec.network, tuple)
          and kernel.landlock_abi < NETWORK_ABI):
        problems.append(f"Landlock ABI {NETWORK_ABI} for TCP port rules")
    return problems


def plan(spec: SandboxSpec, kernel: KernelSupport, scratch_root: str) -> Plan:
    """The confinement of a job of `spec` on `kernel`. "default" does what the kernel
    allows and says in `missing` what it could not."""
    if spec.profile == "off":
        return Plan(no_new_privs=False)
    missing: list[str] = []
    hidden = spec.hidden if kernel.namespaces else ()
    by_landlock = spec.hidden if not kernel.namespaces and kernel.landlock_abi >= 1 else ()
    if spec.hidden and not hidden and not by_landlock:
        missing.append(f"hide the config file and store ({kernel.namespaces_error}; "
                       + (kernel.landlock_error or "no Landlock") + ")")
    landlock = _landlock(spec, kernel.landlock_abi, kernel.landlock_error, scratch_root,
                         missing, by_landlock)
    strict = spec.profile == "strict"
    sockets = socket_families(spec.network) if strict else None
    return Plan(hidden=hidden, landlock=landlock, seccomp_sockets=sockets,
                missing=tuple(missing))


def _landlock(
    spec: SandboxSpec, abi: int, kernel_error: str, scratch_root: str, missing: list[str],
    hidden: tuple[str, ...],
) -> LandlockPlan | None:
    if abi < 1:
        missing.append("keep signals and ptrace inside the job ("
                       + (kernel_error or "no Landlock") + ")")
        return None
    strict = spec.profile == "strict"
    scoped = ll.SCOPE_SIGNAL | ll.SCOPE_ABSTRACT_UNIX_SOCKET if abi >= SCOPES_ABI else 0
    if not scoped:
        missing.append(f"keep signals and abstract sockets inside the job (Landlock ABI {abi})")
    net = 0
    ports: tuple[int, ...] = ()
    if isinstance(spec.network, tuple) or (strict and spec.network == "none"):
        if abi >= NETWORK_ABI:
            net = ll.CONNECT_TCP | (ll.BIND_TCP if strict else 0)
            ports = spec.network if isinstance(spec.network, tuple) else ()
        else:
            missing.append(f"limit TCP ports (Landlock ABI {abi})")
    elif strict and abi >= NETWORK_ABI:
        net = ll.BIND_TCP
    everything = ll.all_fs_rights(abi)
    if not strict and hidden:
        return LandlockPlan(fs=everything, net=net, scoped=scoped, ports=ports,
                            hidden=hidden, others=everything)
    if not strict:
        # Handling a right at all is what makes Landlock refuse mounts and unmounts
        # (which could uncover a hidden path); device nodes need a privilege anyway.
        return LandlockPlan(fs=ll.MAKE_CHAR | ll.MAKE_BLOCK, net=net, scoped=scoped,
                            ports=ports)
    paths = [] if hidden else [("/", ll.READ_ONLY)]
    paths.append((scratch_root, everything))
    paths += [(device, ll.READ_FILE | ll.WRITE_FILE | ll.IOCTL_DEV) for device in DEVICES]
    paths += [(path, everything) for path in spec.writable]
    return LandlockPlan(fs=everything, net=net, scoped=scoped, paths=tuple(paths),
                        ports=ports, hidden=hidden, others=ll.READ_ONLY if hidden else 0)


def _beneath(path: str, directory: str) -> bool:
    """Whether `path` is `directory` or inside it (by name)."""
    path, directory = posixpath.normpath(path), posixpath.normpath(directory)
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def socket_families(network: str | tuple[int, ...]) -> tuple[int, ...]:
    """The socket families a strict job may open: IP unless its network is "none";
    never a unix socket of its own (socketpair stays allowed), which could reach a
    named socket outside the job."""
    if network == "none":
        return ()
    return (socket.AF_INET, socket.AF_INET6)
