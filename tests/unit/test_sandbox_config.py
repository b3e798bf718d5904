"""`[handlers.X] sandbox` in pool.toml: both forms, the defaults, and one-line errors that
name the file and key; and what every sandboxed job of a pool has hidden."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.config import load_config
from supervisor.errors import ConfigError
from supervisor.sandbox_config import SandboxConfig, protected_paths


def write(tmp_path: Path, handler: str) -> Path:
    (tmp_path / "job.py").write_text("def run(job):\n    return None\n")
    (tmp_path / "out").mkdir(exist_ok=True)
    path = tmp_path / "pool.toml"
    path.write_text(f'[pool]\nname = "p"\n\n[handlers.h]\npath = "job.py"\n{handler}\n')
    return path


def sandbox_of(tmp_path: Path, handler: str) -> SandboxConfig:
    return load_config(write(tmp_path, handler), environ={}).handlers["h"].sandbox


def error_for(tmp_path: Path, handler: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, handler), environ={})
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_handler_that_says_nothing_gets_default(tmp_path: Path) -> None:
    assert sandbox_of(tmp_path, "") == SandboxConfig(profile="default", network="all")


def test_the_string_form(tmp_path: Path) -> None:
    assert sandbox_of(tmp_path, 'sandbox = "off"').profile == "off"
    strict = sandbox_of(tmp_path, 'sandbox = "strict"')
    assert (strict.profile, strict.network) == ("strict", "none")


def test_the_table_form(tmp_path: Path) -> None:
    sandbox = sandbox_of(tmp_path, '[handlers.h.sandbox]\nprofile = "strict"\n'
                                   'writable = ["out"]\nhidden = ["/srv/secrets"]\n'
                                   "network = [443, 6379, 443]\n")
    assert sandbox == SandboxConfig(profile="strict", writable=(tmp_path / "out",),
                                    hidden=(Path("/srv/secrets"),), network=(443, 6379))


def test_the_config_file_and_sqlite_store_are_protected(tmp_path: Path) -> None:
    handler = load_config(write(tmp_path, ""), environ={}).handlers["h"]
    database = tmp_path / "poolsup.db"
    assert handler.protected == (
        tmp_path / "pool.toml", database, Path(f"{database}-wal"), Path(f"{database}-shm"),
        Path(f"{database}-journal"),
    )
    assert protected_paths(Path("/etc/p.toml"), "redis://h:1/0") == (Path("/etc/p.toml"),)


@pytest.mark.parametrize(("handler", "expected"), [
    ('sandbox = "loose"', 'pool.toml:6: [handlers.h] sandbox must be "default", "strict" or '
                          '"off" (got "loose")'),
    ("sandbox = 3", 'sandbox must be "default", "strict", "off" or a table (got 3)'),
    ('[handlers.h.sandbox]\nprofile = "x"', '[handlers.h.sandbox] profile must be'),
    ('[handlers.h.sandbox]\nwritable = ["nowhere"]', 'writable "nowhere" does not exist'),
    ('[handlers.h.sandbox]\nwritable = ["out"]',
     'writable only means something with profile = "strict"'),
    ('[handlers.h.sandbox]\nprofile = "off"\nhidden = ["/srv"]',
     'hidden means nothing with profile = "off"'),
    ('[handlers.h.sandbox]\nnetwork = [0]', 'network must be "all", "none" or a list of TCP'),
    ('[handlers.h.sandbox]\nnetwork = "some"', 'network must be "all", "none"'),
    ('[handlers.h.sandbox]\nhidden = "/srv"', "hidden must be a list of paths"),
    ('[handlers.h.sandbox]\nports = [1]', 'unknown key "ports"'),
])
def test_errors_name_the_file_and_key(tmp_path: Path, handler: str, expected: str) -> None:
    assert expected in error_for(tmp_path, handler)
