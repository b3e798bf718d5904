"""The image of deploy/Containerfile, built once (tests/container/image.py), and containers
of it (tests/container/box.py). Outside CI these tests skip, saying why, where podman,
runc or mmdebstrap is missing; in CI (CI=true, whose .ci/run installs them) they fail."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.container.box import Container, podman_available
from tests.container.image import BuildError, ensure_image

IN_CI = os.environ.get("CI") == "true"


@pytest.fixture(scope="session")
def image() -> str:
    problem = podman_available()
    if problem is None and os.geteuid() != 0:
        problem = "these tests run podman as root"
    if problem is not None:
        if IN_CI:
            pytest.fail(f"containers cannot run here: {problem}")
        pytest.skip(problem)
    try:
        _base, tag, timings = ensure_image()
    except BuildError as error:
        pytest.fail(str(error))
    for what, seconds in timings.items():
        print(f"built the {what} in {seconds:.1f} s")
    return tag


@pytest.fixture
def containers(image: str) -> Iterator[Callable[..., Container]]:
    """Make containers of the image (not started); all removed at the end of the test."""
    made: list[Container] = []

    def make(etc: Path, **options: object) -> Container:
        container = Container(image, etc, **options)  # type: ignore[arg-type]
        made.append(container)
        return container

    yield make
    for container in made:
        container.remove()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
