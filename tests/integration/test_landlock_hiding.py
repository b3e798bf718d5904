"""Hiding paths with Landlock alone (sandbox/landlock_hiding.py), for real: a child that
enforces the "default" plan of a host without mount namespaces, as an unprivileged
container is, tries the hidden files, their neighbours and the ways around."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbox.enforce import Enforcement
from sandbox.landlock import abi_version
from sandbox.policy import KernelSupport, SandboxSpec, plan

ABI = abi_version()[0]
pytestmark = pytest.mark.skipif(ABI < 1, reason="this kernel has no Landlock")
NO_NAMESPACES = KernelSupport(landlock_abi=ABI, seccomp=True, namespaces=False,
                              namespaces_error="unshare: Operation not permitted")


def confined(hidden: tuple[str, ...], attempts: dict[str, Callable[[], object]],
             profile: str = "default", writable: tuple[str, ...] = ()) -> dict[str, str]:
    """Run each attempt in a child confined as a job of `profile` would be; what each
    did: "ok" or the errno's name."""
    spec = SandboxSpec(profile=profile, hidden=hidden, writable=writable)
    enforcement = Enforcement(plan(spec, NO_NAMESPACES, "/nonexistent-scratch"), ("", ""))
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        outcome: dict[str, str] = {}
        try:
            enforcement.confine()
            for name, attempt in attempts.items():
                try:
                    attempt()
                    outcome[name] = "ok"
                except OSError as error:
                    outcome[name] = errno.errorcode.get(error.errno or 0, str(error))
            os.write(write_fd, json.dumps(outcome).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as reader:
        text = reader.read()
    os.waitpid(pid, 0)
    enforcement.close()
    return dict(json.loads(text))


def test_default_without_namespaces_hides_the_config_and_store_and_nothing_else(
    tmp_path: Path,
) -> None:
    etc = tmp_path / "etc"
    (etc / "jobs").mkdir(parents=True)
    config, handler, other = etc / "pool.toml", etc / "jobs" / "h.py", tmp_path / "other.txt"
    config.write_text("secret")
    handler.write_text("def run(job): pass\n")
    other.write_text("fine")
    (etc / "..data").mkdir()
    real = etc / "..data" / "store.db"
    real.write_text("rows")
    (etc / "store.db").symlink_to(real)  # as a Kubernetes ConfigMap's keys are
    database = str(etc / "store.db")
    (tmp_path / "out").mkdir()
    outcome = confined((str(config), database, database + "-journal"), {
        "read config": lambda: config.read_text(),
        "write config": lambda: config.open("a").close(),
        "read store through its symlink": lambda: Path(database).read_text(),
        "read store": lambda: real.read_text(),
        "make the store's journal": lambda: Path(database + "-journal").write_text("x"),
        "remove the config": lambda: config.unlink(),
        "rename the config": lambda: config.rename(etc / "moved.toml"),
        "hard-link the config elsewhere": lambda: os.link(config, tmp_path / "out" / "l"),
        "read a handler beside it": lambda: handler.read_text(),
        "write a file elsewhere": lambda: (tmp_path / "out" / "x").write_text("x"),
        "read elsewhere": lambda: other.read_text(),
        "list the config's directory": lambda: os.listdir(etc),
        "read /etc/hostname": lambda: Path("/etc/hostname").exists() and Path(
            "/etc/hostname").read_bytes(),
    })
    refused = ("EACCES", "EXDEV", "EPERM")
    for name in ("read config", "write config", "read store through its symlink",
                 "read store", "make the store's journal", "remove the config",
                 "rename the config", "hard-link the config elsewhere"):
        assert outcome[name] in refused, (name, outcome)
    for name in ("read a handler beside it", "write a file elsewhere", "read elsewhere",
                 "list the config's directory", "read /etc/hostname"):
        assert outcome[name] == "ok", (name, outcome)
    assert config.read_text() == "secret" and real.read_text() == "rows"


def test_strict_without_namespaces_is_read_only_around_the_hidden_paths(
    tmp_path: Path,
) -> None:
    config, out = tmp_path / "pool.toml", tmp_path / "out"
    config.write_text("secret")
    out.mkdir()
    outcome = confined((str(config),), {
        "read config": lambda: config.read_text(),
        "write in writable": lambda: (out / "x").write_text("x"),
        "write beside the config": lambda: (tmp_path / "y").write_text("y"),
        "read /etc/hostname": lambda: Path("/etc/hostname").exists() and Path(
            "/etc/hostname").read_bytes(),
        "write /dev/null": lambda: Path("/dev/null").write_text("x"),
    }, profile="strict", writable=(str(out),))
    assert outcome == {"read config": "EACCES", "write in writable": "ok",
                       "write beside the config": "EACCES", "read /etc/hostname": "ok",
                       "write /dev/null": "ok"}, outcome


def test_a_hidden_directory_is_not_even_listed(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "key").write_text("k")
    (tmp_path / "public").mkdir()
    outcome = confined((str(secrets),), {
        "list it": lambda: os.listdir(secrets),
        "read in it": lambda: (secrets / "key").read_text(),
        "list a neighbour": lambda: os.listdir(tmp_path / "public"),
    })
    assert outcome == {"list it": "EACCES", "read in it": "EACCES",
                       "list a neighbour": "ok"}, outcome


def test_a_config_map_s_config_is_hidden_by_every_path_to_it(tmp_path: Path) -> None:
    """A Kubernetes ConfigMap volume: each key a symlink through `..data` into a dated
    directory, which kubelet swaps on an update."""
    etc = tmp_path / "etc"
    dated = etc / "..2026_11_29_02_00_00.123"
    dated.mkdir(parents=True)
    (dated / "pool.toml").write_text("secret")
    (dated / "hello.py").write_text("def run(job): pass\n")
    (etc / "..data").symlink_to(dated.name)
    for key in ("pool.toml", "hello.py"):
        (etc / key).symlink_to(f"..data/{key}")
    outcome = confined((str(etc / "pool.toml"),), {
        "read the key": lambda: (etc / "pool.toml").read_text(),
        "read through ..data": lambda: (etc / "..data" / "pool.toml").read_text(),
        "read the dated file": lambda: (dated / "pool.toml").read_text(),
        "read the handler's key": lambda: (etc / "hello.py").read_text(),
    })
    assert outcome == {"read the key": "EACCES", "read through ..data": "EACCES",
                       "read the dated file": "EACCES", "read the handler's key": "ok"}, outcome
