"""The image under test, built once per tree: a Debian base made with mmdebstrap (no
container registry is reachable on these machines), then deploy/Containerfile on it with
podman and runc (crun, which podman pulls in, refuses this machine's cgroup tree).

Both are cached in podman's own storage under a tag made of a hash of what went into them
(the base: its recipe and the host's CA certificates; the image: the Containerfile and
the package's files), so that a second run, or another pytest-xdist worker, builds
nothing. A file lock keeps two workers from building the same thing at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASE_REPOSITORY, IMAGE_REPOSITORY = "localhost/poolsup-test-base", "localhost/poolsup-test"
CA_DIRECTORY = Path("/usr/local/share/ca-certificates")
# podman with runc and cgroupfs; no rlimit above the host's (root here lacks
# CAP_SYS_RESOURCE). crun, which podman brings along, refuses this host's cgroup tree.
CONTAINERS_CONF = """\
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""
# The host reaches the package index through a proxy with its own certificate authority:
# the base trusts what the host trusts, and pip is told where the bundle is.
_CUSTOMIZE = (
    'for f in /usr/local/share/ca-certificates/*.crt; do [ -e "$f" ] && '
    'cp "$f" "$1/usr/local/share/ca-certificates/"; done; '
    'chroot "$1" update-ca-certificates >/dev/null; '
    'printf "[global]\\ncert = /etc/ssl/certs/ca-certificates.crt\\n" > "$1/etc/pip.conf"'
)
MMDEBSTRAP = ["mmdebstrap", "--quiet", "--variant=minbase",
              "--include=python3,python3-venv,ca-certificates",
              f"--customize-hook={_CUSTOMIZE}", "bookworm"]
_IMAGE_INPUTS = ("deploy/Containerfile", "pyproject.toml", "README.md", "supervisor", "sandbox")


class BuildError(Exception):
    """The base or the image could not be built."""


def containers_conf() -> Path:
    path = Path(tempfile.gettempdir()) / "poolsup-test-containers.conf"
    if not path.exists() or path.read_text() != CONTAINERS_CONF:
        staging = path.with_suffix(f".{os.getpid()}")
        staging.write_text(CONTAINERS_CONF)
        staging.replace(path)
    return path


def podman_environment() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(containers_conf())}


def podman(*args: str, check: bool = True, timeout: float = 60,
           ) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["podman", *args], capture_output=True, text=True,
                            env=podman_environment(), timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise BuildError(f"podman {' '.join(args[:3])}: {result.stderr.strip()[-2000:]}")
    return result


def _digest(paths: list[Path], *extra: str) -> str:
    digest = hashlib.sha256()
    for text in extra:
        digest.update(text.encode() + b"\0")
    for path in sorted(paths):
        digest.update(str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
                      .encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _tree_files(name: str) -> list[Path]:
    path = ROOT / name
    if path.is_file():
        return [path]
    return [file for file in path.rglob("*")
            if file.is_file() and "__pycache__" not in file.parts and file.suffix != ".pyc"]


def base_tag() -> str:
    certificates = sorted(CA_DIRECTORY.glob("*.crt")) if CA_DIRECTORY.is_dir() else []
    return f"{BASE_REPOSITORY}:{_digest(certificates, *MMDEBSTRAP)}"


def image_tag(base: str) -> str:
    files = [file for name in _IMAGE_INPUTS for file in _tree_files(name)]
    return f"{IMAGE_REPOSITORY}:{_digest(files, base)}"


@contextmanager
def _build_lock() -> Iterator[None]:
    with open(Path(tempfile.gettempdir()) / "poolsup-test-image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _exists(tag: str) -> bool:
    return podman("image", "exists", tag, check=False).returncode == 0


def _build_base(tag: str) -> None:
    with tempfile.TemporaryDirectory(prefix="poolsup-base-") as directory:
        tarball = Path(directory) / "base.tar"
        result = subprocess.run([*MMDEBSTRAP, str(tarball)], capture_output=True, text=True,
                                timeout=600, check=False)
        if result.returncode != 0:
            raise BuildError(f"mmdebstrap: {result.stderr.strip()[-2000:]}")
        podman("import", str(tarball), tag, timeout=300)


def _build_image(base: str, tag: str) -> None:
    # --layers=false: no intermediate image is kept (this tag is the cache).
    podman("build", "--quiet", "--layers=false", "--network=host", "--build-arg",
           f"BASE={base}", "-t", tag, "-f", str(ROOT / "deploy" / "Containerfile"), str(ROOT),
           timeout=600)


def _forget_older(repository: str, keep: str) -> None:
    """Untag this repository's other builds (an image a container still uses stays)."""
    listing = podman("images", "--format", "{{.Repository}}:{{.Tag}}", repository, check=False)
    for tag in listing.stdout.split():
        if tag.startswith(f"{repository}:") and tag != keep:
            podman("rmi", tag, check=False)


def ensure_image() -> tuple[str, str, dict[str, float]]:
    """The tags of the base and of the image of this tree, built if need be; and how long
    each build took (absent when cached)."""
    timings: dict[str, float] = {}
    for tool in ("podman", "runc", "mmdebstrap"):
        if shutil.which(tool) is None:
            raise BuildError(f"{tool} is not installed (apt-get install podman runc mmdebstrap)")
    with _build_lock():
        base = base_tag()
        if not _exists(base):
            started = time.monotonic()
            _build_base(base)
            timings["base"] = time.monotonic() - started
            _forget_older(BASE_REPOSITORY, base)
        image = image_tag(base)
        if not _exists(image):
            started = time.monotonic()
            _build_image(base, image)
            timings["image"] = time.monotonic() - started
            _forget_older(IMAGE_REPOSITORY, image)
    return base, image, timings


def image_size(tag: str) -> int:
    return int(podman("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip())
