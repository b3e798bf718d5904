"""What a job's child does to itself before its handler runs: resource limits, niceness,
environment, user and group, working directory, and its sandbox (`sandbox.enforce`).

`prepare` runs in the fork server, once per handler at start: user and group names are
resolved there (a lookup can be slow, and an unknown name is an error of the handler,
reported like an import error). `apply` runs in the job's child once it was handed its
job, before the handler starts.
"""

from __future__ import annotations

import contextlib
import grp
import math
import os
import posix
import pwd
import resource
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sandbox import enforce, linux, policy
from sandbox.loader import HandlerSpec
from sandbox.policy import KernelSupport

MAX_OPEN_FILES = 4096
# What a job's environment keeps of the fork server's, unless its handler inherits all.
_KEPT_VARIABLES = ("PATH", "LANG", "LANGUAGE", "TZ")
_KEPT_PREFIXES = ("LC_",)


class ConfinementError(Exception):
    """The handler's isolation options cannot be applied."""


@dataclass(frozen=True, kw_only=True)
class Identity:
    uid: int
    gid: int
    groups: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class Confinement:
    environ: Mapping[str, str] = field(default_factory=dict)  # without POOLSUP_JOB_*
    cwd: str | None = None
    nice: int | None = None
    cpu_limit: float | None = None
    identity: Identity | None = None  # None: stay who the fork server is
    reused: bool = False  # its children may run several jobs (max_jobs_per_child > 1)
    sandbox: enforce.Enforcement = enforce.NONE
    strict: bool = False  # TMPDIR is the scratch directory
    error: str | None = None  # why jobs of this handler cannot run


@dataclass(frozen=True, kw_only=True)
class Host:
    """What the fork server found out once, for every handler's sandbox."""

    kernel: KernelSupport
    scratch_jobs: str  # where the scratch directories are made
    decoys: tuple[str, str]


def prepare_all(
    specs: Mapping[str, HandlerSpec], environ: Mapping[str, str], scratch_jobs: str,
    decoys: tuple[str, str],
) -> dict[str, Confinement]:
    """Every handler's confinement, on this kernel as `enforce.probe` finds it."""
    host = Host(kernel=enforce.probe(), scratch_jobs=scratch_jobs, decoys=decoys)
    return {name: prepare(spec, environ, host) for name, spec in specs.items()}


def sandbox_notes(confinements: Mapping[str, Confinement]) -> dict[str, str]:
    """Per handler, what its sandbox could not enforce here (the supervisor logs it)."""
    return {
        name: "; ".join(settings.sandbox.plan.missing)
        for name, settings in confinements.items()
        if settings.sandbox.plan.missing
    }


def prepare(spec: HandlerSpec, environ: Mapping[str, str], host: Host | None = None
            ) -> Confinement:
    """Resolve `spec`'s options, in the fork server whose environment is `environ`."""
    try:
        identity, account = _resolve_identity(spec.user, spec.group)
    except ConfinementError as error:
        return Confinement(error=str(error))
    sandbox = enforce.NONE
    if host is not None:
        problems = policy.requirements(spec.sandbox, host.kernel)
        if problems:
            return Confinement(error=f"sandbox {spec.sandbox.profile!r} needs "
                                     + ", ".join(problems))
        plan = policy.plan(spec.sandbox, host.kernel, host.scratch_jobs)
        try:
            sandbox = enforce.Enforcement(plan, host.decoys)
        except OSError as error:
            return Confinement(error=f"sandbox: {error.strerror or error}")
    job_environ = dict(environ) if spec.inherit_env else minimal_environment(environ, account)
    job_environ.update(spec.env)
    return Confinement(
        environ=job_environ,
        cwd=spec.cwd,
        nice=spec.nice,
        cpu_limit=spec.cpu_limit,
        identity=identity,
        reused=spec.max_jobs_per_child > 1 or spec.child_concurrency > 1,
        sandbox=sandbox,
        strict=spec.sandbox.profile == "strict",
    )


def minimal_environment(
    environ: Mapping[str, str], account: pwd.struct_passwd | None
) -> dict[str, str]:
    kept = {
        name: value
        for name, value in environ.items()
        if name in _KEPT_VARIABLES or name.startswith(_KEPT_PREFIXES)
    }
    kept.setdefault("PATH", os.defpath)
    if account is not None:
        kept.update(HOME=account.pw_dir, USER=account.pw_name, LOGNAME=account.pw_name)
    elif "HOME" in environ:
        kept["HOME"] = environ["HOME"]
    return kept


def _resolve_identity(
    user: str | None, group: str | None
) -> tuple[Identity | None, pwd.struct_passwd | None]:
    """Who a job runs as (None: as the fork server), and the account it runs under."""
    account: pwd.struct_passwd | None
    if user is None and group is None:
        return None, _own_account()
    if user is not None:
        account = _account(user)
        uid = account.pw_uid
        gid = _group_id(group) if group is not None else account.pw_gid
        groups = tuple(os.getgrouplist(account.pw_name, gid))
    else:
        account = _own_account()
        uid, gid = os.geteuid(), _group_id(group or "")
        groups = (gid,)
    if os.geteuid() != 0:
        if (uid, gid) == (os.geteuid(), os.getegid()):
            return None, account  # already that user and group
        wanted = f"user {user!r}" if user is not None else f"group {group!r}"
        raise ConfinementError(
            f"running as {wanted} needs the supervisor to run as root "
            f"(it runs as uid {os.geteuid()})"
        )
    return Identity(uid=uid, gid=gid, groups=groups), account


def _account(user: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except KeyError:
        raise ConfinementError(f"user {user!r} does not exist") from None


def _own_account() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwuid(os.geteuid())
    except KeyError:
        return None  # a uid without an entry, as in some containers


def _group_id(group: str) -> int:
    try:
        return int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError:
        raise ConfinementError(f"group {group!r} does not exist") from None


def apply(confinement: Confinement, *, server_pid: int) -> None:
    """In the job's child: confine it. Raises ConfinementError saying what failed."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    files = MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, MAX_OPEN_FILES)
    resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
    if confinement.cpu_limit is not None and confinement.reused:
        _grant_cpu(confinement.cpu_limit)
    elif confinement.cpu_limit is not None:
        # SIGXCPU at the limit, SIGKILL a second later for a handler that catches it.
        seconds = math.ceil(confinement.cpu_limit)
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
    if confinement.nice is not None:
        what = f"cannot set nice {confinement.nice}"
        _attempt(what, os.setpriority, os.PRIO_PROCESS, 0, confinement.nice)
    # Empty already: the fork server cleared its own before forking (`clear_environment`).
    # One by one: `update` checks its argument against the Mapping ABC, whose machinery
    # a fresh child would copy page by page.
    for name, value in confinement.environ.items():
        os.environ[name] = value
    # While it may still mount: a root supervisor's job switches user after.
    _attempt("sandbox", confinement.sandbox.hide)
    if confinement.identity is not None:
        _switch_identity(confinement.identity, server_pid)
    if confinement.cwd is not None:
        _attempt(f"cannot change to directory {confinement.cwd}", os.chdir, confinement.cwd)
    _attempt("sandbox", confinement.sandbox.confine)


def renew(confinement: Confinement, *, cwd_fd: int) -> None:
    """In a child about to run its next job (`sandbox.reuse`): what the last job may have
    changed, back as `apply` left it: the environment, the working directory (the
    handler's, else the directory `cwd_fd` holds, where the child started: by fd, as a
    user switch may have made its path unreachable), and a fresh CPU budget. Raises
    ConfinementError."""
    if confinement.cpu_limit is not None:
        _grant_cpu(confinement.cpu_limit)
    replace_environment(confinement.environ)
    if confinement.cwd is not None:
        _attempt(f"cannot change to directory {confinement.cwd}", os.chdir, confinement.cwd)
    else:
        _attempt("cannot change back to the starting directory", os.fchdir, cwd_fd)


def _grant_cpu(limit: float) -> None:
    """RLIMIT_CPU counts a process's whole life: a child that runs several jobs gets
    SIGXCPU at `limit` seconds past what it has used so far. The hard limit stays
    where it is (it could not be raised again for the next job); a handler that
    catches SIGXCPU is killed by the fork server's sampling instead."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime + limit)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def clear_environment() -> None:
    """In the fork server, once its handlers are loaded: no environment at all, in
    `os.environ`, `posix.environ` and the C library, and the one it was started with
    (which /proc/PID/environ shows) blanked; so each child starts from nothing, and
    none of this is done again per job."""
    os.environ.clear()
    posix.environ.clear()
    linux.clear_c_environment()
    with contextlib.suppress(OSError, ValueError, IndexError):
        linux.wipe_startup_environment()


def replace_environment(environ: Mapping[str, str]) -> None:
    """Make `environ` the whole environment, whatever a job changed in it."""
    os.environ.clear()
    posix.environ.clear()
    linux.clear_c_environment()
    os.environ.update(environ)


def _switch_identity(identity: Identity, server_pid: int) -> None:
    what = f"cannot switch to uid {identity.uid} gid {identity.gid}"
    _attempt(what, os.setgroups, list(identity.groups))
    _attempt(what, os.setgid, identity.gid)
    _attempt(what, os.setuid, identity.uid)
    # A change of credentials clears the parent-death signal: arm it again.
    linux.set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != server_pid:
        os._exit(1)


def _attempt(what: str, action: Callable[..., object], *args: object) -> None:
    try:
        action(*args)
    except OSError as error:
        raise ConfinementError(f"{what}: {error.strerror or error}") from None
