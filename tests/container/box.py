"""One container of the image under test, run as a pod would run it: its own user (the
image's, uid 10001), no capability, no_new_privs, a read-only root, and a seccomp profile
(podman's default, or `runtime_default_profile`'s), with /etc/poolsup mounted read-only.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path

from tests.container.image import podman, podman_environment

PODMAN_PROFILE = Path("/usr/share/containers/seccomp.json")
# What containerd's and Docker's default profiles allow only with CAP_SYS_ADMIN (podman's
# allows them to all): new namespaces and mounts. Kubernetes' RuntimeDefault is containerd's.
ADMIN_ONLY = ("unshare", "setns", "mount", "umount", "umount2", "pivot_root", "open_tree",
              "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr")


def runtime_default_profile(directory: Path) -> Path:
    """podman's default seccomp profile less `ADMIN_ONLY` (refused with EPERM), as a pod
    without CAP_SYS_ADMIN gets it from containerd."""
    profile = json.loads(PODMAN_PROFILE.read_text())
    rules = []
    for rule in profile["syscalls"]:
        names = [name for name in rule["names"] if name not in ADMIN_ONLY]
        if names:
            rules.append({**rule, "names": names})
    rules.append({"names": list(ADMIN_ONLY), "action": "SCMP_ACT_ERRNO", "errnoRet": 1})
    path = directory / "runtime-default.json"
    path.write_text(json.dumps({**profile, "syscalls": rules}))
    return path


class Container:
    """`start` it, `exec` in it, `stop` or `kill` it; `remove` always."""

    def __init__(self, image: str, etc: Path, *, network: str = "host",
                 seccomp: Path | None = None, env: dict[str, str] | None = None) -> None:
        self.image = image
        self.etc = etc
        self.name = f"poolsup-test-{uuid.uuid4().hex[:10]}"
        self.network = network
        self.seccomp = seccomp
        self.env = env or {}
        self.started_at = 0.0

    def start(self) -> Container:
        options = ["--network", self.network, "--cap-drop=ALL",
                   "--security-opt=no-new-privileges", "--read-only",
                   "--volume", f"{self.etc}:/etc/poolsup:ro"]
        if self.seccomp is not None:
            options += ["--security-opt", f"seccomp={self.seccomp}"]
        for name, value in self.env.items():
            options += ["--env", f"{name}={value}"]
        self.started_at = time.monotonic()
        podman("run", "--detach", "--name", self.name, *options, self.image)
        return self

    def exec(self, *command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return podman("exec", self.name, *command, check=False, timeout=timeout)

    def running(self) -> bool:
        state = podman("inspect", "--format", "{{.State.Running}}", self.name, check=False)
        return state.stdout.strip() == "true"

    def exit_code(self) -> int:
        return int(podman("inspect", "--format", "{{.State.ExitCode}}", self.name).stdout)

    def stop(self, grace: float) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds (as a kubelet does)."""
        podman("stop", "--time", str(int(grace)), self.name, timeout=grace + 30)

    def kill(self) -> None:
        podman("kill", "--signal", "KILL", self.name)

    def logs(self) -> str:
        result = podman("logs", self.name, check=False)
        return result.stdout + result.stderr

    def remove(self) -> None:
        podman("rm", "--force", "--volumes", "--time", "0", self.name, check=False)


def write_etc(directory: Path, pool_toml: str, handlers: list[Path]) -> Path:
    """A directory for /etc/poolsup, readable by the container's user."""
    directory.mkdir(mode=0o755, exist_ok=True)
    directory.chmod(0o755)
    for handler in handlers:
        shutil.copy(handler, directory / handler.name)
        (directory / handler.name).chmod(0o644)
    (directory / "pool.toml").write_text(pool_toml)
    (directory / "pool.toml").chmod(0o644)
    return directory


def podman_available() -> str | None:
    """Why containers cannot be run here, or None."""
    missing = [tool for tool in ("podman", "runc", "mmdebstrap") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} missing (apt-get install podman runc mmdebstrap)"
    probe = subprocess.run(["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"],
                           capture_output=True, text=True, env=podman_environment(),
                           check=False, timeout=60)
    if probe.returncode != 0:
        return f"podman does not work here: {probe.stderr.strip()[-300:]}"
    return None
