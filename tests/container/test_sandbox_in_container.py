"""Guarantee 11 in an unprivileged container, as a pod runs one: the hostile set of the
sandbox tests (tests/helpers/systemd_hostile.py, the driver of the systemd test) run inside
the image, against its supervisor (PID 1), its fork server and another job, on a SQLite
store in the container's volume, in "default" and "strict".

With `runtime-default` (containerd's and Docker's default seccomp profile, which refuses
`unshare` and mounts to a container without CAP_SYS_ADMIN) no mount namespace can hide the
config file and the store: Landlock alone must (docs/kubernetes.md). With podman's own
default profile, which allows both, the sandbox hides them with a mount namespace as on a
host. The container has a network of its own (`none`: its loopback only), so that the
driver's TCP listener meets no other test's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.container.box import Container, runtime_default_profile, write_etc
from tests.helpers.pool import HANDLERS_DIR, wait_for

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "tests" / "helpers" / "systemd_hostile.py"
POOL = """\
[pool]
name = "box"
store = "sqlite:////var/lib/poolsup/pool.db"

[supervisor]
id = "box"
capacity = 3
lease_ttl = 3
"""
HANDLERS = """
[handlers.hostile]
path = "sandbox_hostile.py"
function = "attempt"
max_attempts = 1

[handlers.hostile_strict]
path = "sandbox_hostile.py"
function = "attempt"
max_attempts = 1
sandbox = {profile = "strict", network = [16400]}

[handlers.sleeper]
path = "sandbox_hostile.py"
function = "sleeper"
max_attempts = 1

[handlers.scratch]
path = "sandbox_hostile.py"
function = "scratch"
max_attempts = 1

[handlers.reasonable]
path = "sandbox_hostile.py"
function = "reasonable"
max_attempts = 1
"""


def _serving(container: Container) -> bool:
    if not container.running():
        raise AssertionError(f"the container ended: {container.logs()[-3000:]}")
    return "serving pool box" in container.logs()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seccomp", ["runtime-default", "podman-default"])
def test_guarantee_11_hostile_jobs_reach_nothing_in_an_unprivileged_container(
    containers: Callable[..., Container], tmp_path: Path, seccomp: str,
) -> None:
    etc = write_etc(tmp_path / "etc", POOL + HANDLERS,
                    [HANDLERS_DIR / "sandbox_hostile.py", DRIVER])
    # A handler asking for more than Landlock alone can give: to hide the config file
    # inside a directory it may write.
    (etc / "more.toml").write_text(POOL + HANDLERS.replace(
        'network = [16400]}', 'network = [16400], writable = ["/etc/poolsup"]}'))
    profile = runtime_default_profile(tmp_path) if seccomp == "runtime-default" else None
    container = containers(etc, network="none", seccomp=profile).start()
    wait_for(lambda: _serving(container), 30, message="the supervisor serving")

    check = container.exec("poolsup", "check")
    assert check.returncode == 0, check.stdout + check.stderr
    print(check.stdout)
    more = container.exec("poolsup", "check", "-c", "/etc/poolsup/more.toml")
    if seccomp == "runtime-default":
        assert "mount namespaces to hide paths no" in check.stdout, check.stdout
        assert more.returncode == 2, more.stdout + more.stderr
        assert more.stderr.strip() == (
            "poolsup: /etc/poolsup/more.toml: [handlers.hostile_strict] sandbox 'strict' "
            "needs mount namespaces to hide /etc/poolsup/more.toml inside writable "
            "/etc/poolsup (unshare: Operation not permitted)"), more.stderr
        for profile in ("default", "strict"):
            assert (f'"{profile}" gives: no_new_privs, hidden paths (Landlock file rules), '
                    "ptrace kept in the job (Landlock), signals and abstract sockets kept in "
                    "the job (Landlock)") in check.stdout, check.stdout
    else:  # a mount namespace hides the config wherever the job may write
        assert more.returncode == 0, more.stdout + more.stderr
        assert '"default" gives: no_new_privs, hidden paths (mount namespace)' in check.stdout
    driver = container.exec("python", "/etc/poolsup/systemd_hostile.py",
                            "/etc/poolsup/pool.toml", "1", "6379", "sqlite", "/tmp",
                            timeout=180)
    report = driver.stdout + driver.stderr
    assert driver.returncode == 0, f"{report}\n--- the supervisor's log\n{container.logs()}"
    assert "all refused" in report
    assert container.running(), container.logs()
