"""What `poolsup check` says of the sandbox: what this kernel enforces, and which
handlers ask for more than it can give (a configuration error, exit 2)."""

from __future__ import annotations

from sandbox.enforce import probe
from sandbox.policy import SCOPES_ABI, KernelSupport, SandboxSpec, plan, requirements
from supervisor.config import Config
from supervisor.errors import ConfigError

_LANDLOCK_FEATURES = ((1, "file rules"), (4, "TCP ports"), (6, "signal and abstract socket scopes"))


def kernel_lines(kernel: KernelSupport) -> list[str]:
    """One line per mechanism, as `check` prints them."""
    if kernel.landlock_abi:
        features = ", ".join(name for abi, name in _LANDLOCK_FEATURES if kernel.landlock_abi >= abi)
        landlock = f"Landlock ABI {kernel.landlock_abi} ({features})"
    else:
        landlock = f"no Landlock ({kernel.landlock_error or 'this kernel has none'})"
    return [
        f"sandbox: {landlock}",
        "sandbox: seccomp filter "
        + ("yes" if kernel.seccomp else "no (this architecture or kernel)"),
        "sandbox: mount namespaces to hide paths "
        + ("yes" if kernel.namespaces else f"no ({kernel.namespaces_error})"),
        *profile_lines(kernel),
    ]


def profile_lines(kernel: KernelSupport) -> list[str]:
    """What "default" and "strict" give a job here, one line each (docs/sandbox.md)."""
    lines = []
    for profile in ("default", "strict"):
        spec = SandboxSpec(profile=profile, hidden=("/pool.toml",))
        problems = requirements(spec, kernel)
        if problems:
            lines.append(f'sandbox: "{profile}" cannot run here: needs {", ".join(problems)}')
            continue
        decided = plan(spec, kernel, "/scratch")
        gives = ["no_new_privs"]
        if decided.hidden:
            gives.append("hidden paths (mount namespace)")
        rules = decided.landlock
        if rules is not None:
            if rules.hidden:
                gives.append("hidden paths (Landlock file rules)")
            gives.append("ptrace kept in the job (Landlock)")
            if kernel.landlock_abi >= SCOPES_ABI:
                gives.append("signals and abstract sockets kept in the job (Landlock)")
        if profile == "strict":
            gives += ["read-only files but scratch and writable (Landlock)",
                      "TCP ports (Landlock)", "syscall filter (seccomp)"]
        line = f'sandbox: "{profile}" gives: ' + ", ".join(gives)
        if decided.missing:
            line += "; not: " + "; ".join(decided.missing)
        lines.append(line)
    return lines


def check_sandboxes(config: Config, kernel: KernelSupport | None = None) -> KernelSupport:
    """Raise ConfigError naming the first handler whose sandbox this kernel cannot give."""
    kernel = kernel or probe()
    for name, handler in config.handlers.items():
        spec = SandboxSpec(
            profile=handler.sandbox.profile,
            hidden=tuple(str(path) for path in (*handler.protected, *handler.sandbox.hidden)),
            writable=tuple(str(path) for path in handler.sandbox.writable),
            network=handler.sandbox.network,
        )
        problems = requirements(spec, kernel)
        if problems:
            raise ConfigError(
                f"{config.path}: [handlers.{name}] sandbox {handler.sandbox.profile!r} "
                f"needs {', '.join(problems)}"
            )
    return kernel
