"""`poolsup check` and the sandbox: it prints what this kernel enforces; a sandbox table
that is wrong, or asks for what the kernel cannot give, is a one-line error, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.policy import KernelSupport
from supervisor.cli.sandbox_report import check_sandboxes, kernel_lines
from supervisor.config import load_config
from supervisor.errors import ConfigError
from tests.acceptance.test_cli import poolsup
from tests.helpers.pool import HANDLERS_DIR

OLD = KernelSupport(landlock_abi=3, seccomp=False, namespaces=False,
                    namespaces_error="unshare: Operation not permitted")


def write(tmp_path: Path, sandbox: str) -> Path:
    path = tmp_path / "pool.toml"
    path.write_text(f'[pool]\nname = "p"\n[handlers.h]\npath = "{HANDLERS_DIR / "basic.py"}"\n'
                    f'function = "echo"\n{sandbox}\n')
    return path


def test_check_prints_what_this_kernel_enforces(tmp_path: Path) -> None:
    result = poolsup("check", "-c", str(write(tmp_path, 'sandbox = "strict"')))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("sandbox: Landlock ABI "), lines
    assert lines[1].startswith("sandbox: seccomp filter "), lines
    assert lines[2].startswith("sandbox: mount namespaces to hide paths "), lines
    assert lines[-1] == "ok: pool p, 1 handler(s)"


def test_a_bad_sandbox_is_one_line_exit_2(tmp_path: Path) -> None:
    result = poolsup("check", "-c", str(write(tmp_path, 'sandbox = "tight"')))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert '[handlers.h] sandbox must be "default", "strict" or "off"' in result.stderr


def test_a_profile_this_kernel_cannot_give_is_a_config_error(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, 'sandbox = "strict"'), environ={})
    with pytest.raises(ConfigError) as caught:
        check_sandboxes(config, OLD)
    message = str(caught.value)
    assert message.endswith(
        "[handlers.h] sandbox 'strict' needs Landlock ABI 6 (this kernel has 3), a seccomp "
        "filter for this architecture"), message
    assert caught.value.exit_code == 2
    # "default" does what it can instead.
    check_sandboxes(load_config(write(tmp_path, ""), environ={}), OLD)
    assert kernel_lines(OLD) == [
        "sandbox: Landlock ABI 3 (file rules)",
        "sandbox: seccomp filter no (this architecture or kernel)",
        "sandbox: mount namespaces to hide paths no (unshare: Operation not permitted)",
        'sandbox: "default" gives: no_new_privs, hidden paths (Landlock file rules), ptrace '
        "kept in the job (Landlock); not: keep signals and abstract sockets inside the job "
        "(Landlock ABI 3)",
        'sandbox: "strict" cannot run here: needs Landlock ABI 6 (this kernel has 3), a '
        "seccomp filter for this architecture",
    ]


def test_strict_hiding_inside_its_writable_needs_a_mount_namespace(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    config = load_config(write(tmp_path, '[handlers.h.sandbox]\nprofile = "strict"\n'
                               'writable = ["."]'), environ={})
    container = KernelSupport(landlock_abi=7, seccomp=True, namespaces=False,
                              namespaces_error="unshare: Operation not permitted")
    with pytest.raises(ConfigError) as caught:
        check_sandboxes(config, container)
    assert str(caught.value).endswith(
        f"sandbox 'strict' needs mount namespaces to hide {tmp_path / 'pool.toml'} inside "
        f"writable {tmp_path} (unshare: Operation not permitted)"), caught.value
