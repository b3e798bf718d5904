"""pool.toml: every field parsed, defaults filled in, and each mistake reported on one line."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from supervisor.config import (
    Config,
    load_config,
    parse_duration,
    parse_size,
    resolve_config_path,
)
from supervisor.core.limits import Limits, Rate
from supervisor.errors import ConfigError

MINIMAL = """\
[pool]
name = "media"

[handlers.thumbnail]
path = "jobs/thumbnail.py"
"""

FULL = """\
[pool]
name = "media"
store = "redis://:secret@127.0.0.1:6379/0"
retention = 3600
max_payload = "2MiB"

[supervisor]
id = "web-1"
capacity = 8
lease_ttl = 5
drain_timeout = 12.5
stop_grace = 3

[handlers.thumbnail]
path = "jobs/thumbnail.py"
function = "make"
timeout = 60
max_attempts = 5
memory_limit = "512MiB"
rebalance = true
cpu_limit = 30
nice = 10
cwd = "jobs"
env = {MODE = "fast"}
inherit_env = true
user = "nobody"
group = "nogroup"

[handlers.feed]
path = "jobs/feed.py"
timeout = 0

[schedules.reindex]
cron = "*/5 * * * MON-FRI"
timezone = "Europe/Paris"
handler = "thumbnail"
key = "reindex-{tick}"
payload = {full = false, sizes = [1, 2]}

[schedules.feeds]
every = 300
producer = "jobs/feed.py:plan"
"""


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "jobs").mkdir(exist_ok=True)
    (tmp_path / "jobs" / "thumbnail.py").write_text("def run(job):\n    return None\n")
    (tmp_path / "jobs" / "feed.py").write_text("def run(job):\n    return None\n")
    path = tmp_path / "pool.toml"
    path.write_text(text)
    return path


def load(path: Path, *, require_handlers: bool = False) -> Config:
    return load_config(path, environ={}, require_handlers=require_handlers)


def error_for(tmp_path: Path, text: str, *, require_handlers: bool = False) -> str:
    with pytest.raises(ConfigError) as caught:
        load(write(tmp_path, text), require_handlers=require_handlers)
    message = caught.value.message
    assert "\n" not in message
    assert caught.value.exit_code == 2
    return message


# Valid configs


def test_full_config_round_trips_every_field(tmp_path: Path) -> None:
    config = load(write(tmp_path, FULL))

    assert config.path == tmp_path / "pool.toml"
    assert config.pool.name == "media"
    assert config.pool.store == "redis://:secret@127.0.0.1:6379/0"
    assert config.pool.retention == 3600.0
    assert config.pool.max_payload == 2 * 1024 * 1024
    sup = config.supervisor
    assert (sup.id, sup.capacity, sup.lease_ttl, sup.drain_timeout, sup.stop_grace) == (
        "web-1", 8, 5.0, 12.5, 3.0,
    )  # fmt: skip
    thumb = config.handlers["thumbnail"]
    assert thumb.name == "thumbnail"
    assert thumb.path == tmp_path / "jobs" / "thumbnail.py"
    assert thumb.path.is_absolute()
    assert thumb.function == "make"
    assert (thumb.timeout, thumb.max_attempts, thumb.memory_limit) == (60.0, 5, 512 * 2**20)
    assert thumb.rebalance is True
    assert (thumb.cpu_limit, thumb.nice, thumb.cwd) == (30.0, 10, tmp_path / "jobs")
    assert thumb.env == {"MODE": "fast"}
    assert (thumb.inherit_env, thumb.user, thumb.group) == (True, "nobody", "nogroup")
    assert list(config.handlers) == ["thumbnail", "feed"]
    reindex = config.schedules["reindex"]
    assert (reindex.cron, reindex.every) == ("*/5 * * * MON-FRI", None)
    assert reindex.timezone == "Europe/Paris"
    assert (reindex.handler, reindex.key) == ("thumbnail", "reindex-{tick}")
    assert reindex.payload == {"full": False, "sizes": [1, 2]}
    feeds = config.schedules["feeds"]
    assert (feeds.every, feeds.cron, feeds.handler, feeds.key) == (300.0, None, None, "feeds")
    assert feeds.producer == f"{tmp_path / 'jobs' / 'feed.py'}:plan"
    assert feeds.producer_path == tmp_path / "jobs" / "feed.py"
    assert feeds.producer_function == "plan"


def test_defaults_are_filled_in(tmp_path: Path) -> None:
    config = load(write(tmp_path, MINIMAL))

    assert config.pool.retention == 86400.0
    assert config.pool.max_payload == 1048576
    assert config.supervisor.id == socket.gethostname()
    sup = config.supervisor
    assert (sup.capacity, sup.lease_ttl, sup.drain_timeout, sup.stop_grace) == (4, 10.0, 30.0, 10.0)
    handler = config.handlers["thumbnail"]
    assert (handler.function, handler.timeout, handler.max_attempts) == ("run", 300.0, 3)
    assert [handler.memory_limit, handler.cpu_limit, handler.nice, handler.cwd] == [None] * 4
    assert handler.user is handler.group is None
    assert (handler.env, handler.inherit_env) == ({}, False)
    assert config.schedules == {}


def test_default_store_is_sqlite_file_beside_the_config(tmp_path: Path) -> None:
    config = load(write(tmp_path, MINIMAL))

    assert config.pool.store == f"sqlite:///{tmp_path}/poolsup.db"


def test_rebalance_defaults_to_true_only_for_handlers_without_timeout(tmp_path: Path) -> None:
    config = load(write(tmp_path, FULL.replace("rebalance = true\n", "")))

    assert config.handlers["thumbnail"].rebalance is False
    assert config.handlers["feed"].rebalance is True


def test_poolsup_store_overrides_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)

    config = load_config(path, environ={"POOLSUP_STORE": "sqlite:////var/tmp/x.db"})

    assert config.pool.store == "sqlite:////var/tmp/x.db"


@pytest.mark.parametrize("store", ["redis+cluster://u:pw@10.0.0.5:7000",
                                   "rediss+cluster://10.0.0.5:7000/0?ssl_cert_reqs=none"])
def test_a_redis_cluster_url_is_a_store(tmp_path: Path, store: str) -> None:
    text = MINIMAL.replace('name = "media"', f'name = "media"\nstore = "{store}"')

    assert load(write(tmp_path, text)).pool.store == store
    from_env = load_config(write(tmp_path, MINIMAL), environ={"POOLSUP_STORE": store})
    assert from_env.pool.store == store


def test_relative_config_path_resolves_against_the_config_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, MINIMAL)
    monkeypatch.chdir(tmp_path / "jobs")

    config = load(Path("../pool.toml"))

    assert config.path == tmp_path / "pool.toml"
    assert config.handlers["thumbnail"].path == tmp_path / "jobs" / "thumbnail.py"


def test_config_values_are_frozen(tmp_path: Path) -> None:
    config = load(write(tmp_path, MINIMAL))

    with pytest.raises(AttributeError):
        config.pool.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.handlers["x"] = config.handlers["thumbnail"]  # type: ignore[index]


def test_config_path_comes_from_option_then_environment_then_cwd() -> None:
    env = {"POOLSUP_CONFIG": "/etc/poolsup/pool.toml"}
    assert resolve_config_path("mine.toml", env) == Path("mine.toml")
    assert resolve_config_path(None, env) == Path("/etc/poolsup/pool.toml")
    assert resolve_config_path(None, {}) == Path("pool.toml")


# Errors


def test_malformed_toml_names_the_line(tmp_path: Path) -> None:
    message = error_for(tmp_path, '[pool]\nname = "x"\nstore "y"\n')

    assert message.startswith(f"{tmp_path / 'pool.toml'}:3: invalid TOML: ")
    assert "line 3" in message


def test_missing_file_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml: cannot read: \[Errno 2\] No such file"):
        load(tmp_path / "nope.toml")


def test_unknown_key_names_table_key_and_line(tmp_path: Path) -> None:
    text = MINIMAL + "timout = 5\n"

    message = error_for(tmp_path, text)

    assert message == (
        f'{tmp_path / "pool.toml"}:6: [handlers.thumbnail] unknown key "timout"'
        ' (did you mean "timeout"?)'
    )


def test_unknown_table_is_an_error(tmp_path: Path) -> None:
    message = error_for(tmp_path, MINIMAL + "\n[workers]\ncount = 2\n")

    assert message == f"{tmp_path / 'pool.toml'}:7: unknown table [workers]"


def test_string_for_a_number_is_a_type_error(tmp_path: Path) -> None:
    message = error_for(tmp_path, MINIMAL + '[supervisor]\nlease_ttl = "ten"\n')

    assert message.endswith(':7: [supervisor] lease_ttl must be a number of seconds (got "ten")')


def test_bool_is_not_an_integer(tmp_path: Path) -> None:
    message = error_for(tmp_path, MINIMAL + "[supervisor]\ncapacity = true\n")

    assert message.endswith(":7: [supervisor] capacity must be an integer (got true)")


def test_bool_is_not_a_duration(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[handlers.thumbnail\] timeout must be a number"):
        load(write(tmp_path, MINIMAL + "timeout = false\n"))


def test_capacity_zero_is_rejected(tmp_path: Path) -> None:
    message = error_for(tmp_path, MINIMAL + "[supervisor]\ncapacity = 0\n")

    assert message == f"{tmp_path}/pool.toml:7: [supervisor] capacity must be at least 1 (got 0)"


def test_lease_ttl_below_one_second_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"lease_ttl must be at least 1 \(got 0\.5\)"):
        load(write(tmp_path, "[supervisor]\nlease_ttl = 0.5\n" + MINIMAL))


def test_negative_timeout_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r":6: \[handlers.thumbnail\] timeout must be at least 0"):
        load(write(tmp_path, MINIMAL + "timeout = -1\n"))


def test_missing_handler_path_is_reported(tmp_path: Path) -> None:
    text = MINIMAL.replace("jobs/thumbnail.py", "jobs/missing.py")

    message = error_for(tmp_path, text)

    assert message.endswith(':5: [handlers.thumbnail] path "jobs/missing.py" does not exist')


def test_handler_without_path_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r":4: \[handlers.thumbnail\] path is required"):
        load(write(tmp_path, MINIMAL.replace('path = "jobs/thumbnail.py"', "timeout = 1")))


@pytest.mark.parametrize("size", ['"512MB"', '"lots"', '"1.5B"', "-1", '"512 mib"'])
def test_bad_size_is_rejected(tmp_path: Path, size: str) -> None:
    with pytest.raises(ConfigError, match=r"\[handlers.thumbnail\] memory_limit must"):
        load(write(tmp_path, MINIMAL + f"memory_limit = {size}\n"))


def test_zero_size_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"max_payload must be greater than 0 \(got 0\)"):
        load(write(tmp_path, MINIMAL.replace('name = "media"', 'name = "media"\nmax_payload = 0')))


def test_function_must_be_an_identifier(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r'function must be a Python identifier \(got "make-'):
        load(write(tmp_path, MINIMAL + 'function = "make-it"\n'))


def test_run_and_check_need_a_handler(tmp_path: Path) -> None:
    message = error_for(tmp_path, '[pool]\nname = "media"\n', require_handlers=True)

    assert message == f"{tmp_path}/pool.toml: run and check need at least one handler in [handlers]"


def test_no_handlers_is_fine_when_not_required(tmp_path: Path) -> None:
    config = load(write(tmp_path, '[pool]\nname = "media"\n'))

    assert config.handlers == {}


def test_pool_name_is_required(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[pool\] name is required"):
        load(write(tmp_path, "[pool]\n"))


def test_schedule_with_both_every_and_cron_is_rejected(tmp_path: Path) -> None:
    text = MINIMAL + '[schedules.tick]\nevery = 5\ncron = "* * * * *"\nhandler = "thumbnail"\n'

    message = error_for(tmp_path, text)

    assert message.endswith(":6: [schedules.tick] needs exactly one of every or cron")


def test_schedule_naming_an_unknown_handler_is_rejected(tmp_path: Path) -> None:
    text = MINIMAL + '[schedules.tick]\nevery = 5\nhandler = "thumbnial"\n'

    message = error_for(tmp_path, text)

    assert message.endswith(
        ':8: [schedules.tick] handler "thumbnial" is not in [handlers] (configured: thumbnail)'
    )


def test_cron_needs_five_fields(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[schedules.tick\] cron must be 5 fields"):
        load(write(tmp_path, MINIMAL + '[schedules.tick]\ncron = "* * *"\nhandler = "thumbnail"\n'))


def test_cron_with_a_field_out_of_range_is_rejected(tmp_path: Path) -> None:
    text = MINIMAL + '[schedules.tick]\ncron = "61 * * * *"\nhandler = "thumbnail"\n'
    expected = r'\[schedules.tick\] cron bad minute in "61 \* \* \* \*"'
    with pytest.raises(ConfigError, match=expected):
        load(write(tmp_path, text))


def test_jitter_must_stay_below_the_interval(tmp_path: Path) -> None:
    text = MINIMAL + '[schedules.tick]\nevery = 10\njitter = 10\nhandler = "thumbnail"\n'
    with pytest.raises(ConfigError, match=r"jitter must be below every \(10 s\), got 10"):
        load(write(tmp_path, text))


def test_a_schedule_has_a_handler_or_a_producer_not_both(tmp_path: Path) -> None:
    (tmp_path / "plan.py").write_text("def plan(job):\n    return {}\n")
    text = MINIMAL + ('[schedules.tick]\nevery = 10\nhandler = "thumbnail"\n'
                      'producer = "plan.py:plan"\n')
    with pytest.raises(ConfigError, match=r"needs a handler or a producer, not both"):
        load(write(tmp_path, text))


def test_schedule_jitter_and_producer_timeout_are_read(tmp_path: Path) -> None:
    (tmp_path / "plan.py").write_text("def plan(job):\n    return {}\n")
    text = MINIMAL + ('[schedules.feeds]\ncron = "*/5 * * * *"\njitter = 3\n'
                      'producer = "plan.py:plan"\ntimeout = 20\n')
    feeds = load(write(tmp_path, text)).schedules["feeds"]
    assert (feeds.jitter, feeds.timeout) == (3.0, 20.0)


def test_unknown_timezone_is_rejected(tmp_path: Path) -> None:
    text = MINIMAL + '[schedules.t]\nevery = 1\nhandler = "thumbnail"\ntimezone = "Mars/Base"\n'

    with pytest.raises(ConfigError, match=r'timezone is not a known time zone \(got "Mars/Base"\)'):
        load(write(tmp_path, text))


def test_bad_store_scheme_is_rejected_without_the_password(tmp_path: Path) -> None:
    text = MINIMAL.replace('name = "media"', 'name = "media"\nstore = "http://u:hunter2@h/0"')

    message = error_for(tmp_path, text)

    assert message.endswith(
        ':3: [pool] store must be a redis://, rediss://, redis+cluster://, rediss+cluster://, '
        'redis+sentinel://, rediss+sentinel://, unix://, postgresql://, postgres:// or '
        'sqlite:// URL '
        '(got "http://u:***@h/0")')
    assert "hunter2" not in message


def test_a_postgresql_store_url_is_taken_from_the_file_and_from_poolsup_store(
        tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace(
        'name = "media"', 'name = "media"\nstore = "postgresql://u:pw@db:5432/jobs"'))

    assert load_config(path, environ={}).pool.store == "postgresql://u:pw@db:5432/jobs"
    assert load_config(path, environ={"POOLSUP_STORE": "postgres://db/jobs"}).pool.store \
        == "postgres://db/jobs"


def test_bad_poolsup_store_names_the_variable(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL)

    with pytest.raises(ConfigError, match=r"^POOLSUP_STORE must be a redis://"):
        load_config(path, environ={"POOLSUP_STORE": "mysql://db/1"})


def test_invalid_handler_name_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r'\[handlers\] invalid handler name "a b"'):
        load(write(tmp_path, MINIMAL + '[handlers."a b"]\npath = "jobs/feed.py"\n'))


def test_inline_table_errors_still_name_the_key(tmp_path: Path) -> None:
    text = '[pool]\nname = "media"\n[handlers]\nthumbnail = {path = "jobs/thumbnail.py", x = 1}\n'

    message = error_for(tmp_path, text)

    assert message.endswith(':4: [handlers.thumbnail] unknown key "x"')


# Sizes, durations, URLs


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (2048, 2048),
        ("2048", 2048),
        ("10B", 10),
        ("100KiB", 102400),
        ("512MiB", 512 * 2**20),
        ("1 GiB", 2**30),
        ("1.5GiB", 3 * 2**29),
    ],
)
def test_parse_size(text: object, expected: int) -> None:
    assert parse_size(text, where="size") == expected


@pytest.mark.parametrize("text", ["1KB", "1kib", "1.5", "", True, 1.5, "GiB"])
def test_parse_size_rejects(text: object) -> None:
    with pytest.raises(ConfigError, match=r"^size must be"):
        parse_size(text, where="size")


def test_parse_duration_takes_numbers_but_not_bools() -> None:
    assert parse_duration(3, where="d") == 3.0
    assert parse_duration(0.25, where="d") == 0.25
    with pytest.raises(ConfigError, match=r"^d must be a number of seconds \(got true\)$"):
        parse_duration(True, where="d")
    with pytest.raises(ConfigError, match=r"finite"):
        parse_duration(float("inf"), where="d")


def test_pool_wide_limits_and_max_pending_are_read(tmp_path: Path) -> None:
    text = MINIMAL.replace('name = "media"', 'name = "media"\nmax_pending = 1000') + (
        'max_running = 8\nmax_running_per_group = 2\nrate_limit = "20/s"\n')

    config = load(write(tmp_path, text))

    assert config.pool.max_pending == 1000
    assert config.handlers["thumbnail"].limits == Limits(
        max_running=8, max_running_per_group=2, rate=Rate(20, 1.0))
    assert load(write(tmp_path, MINIMAL)).handlers["thumbnail"].limits.unlimited


@pytest.mark.parametrize(("line", "named"), [
    ('rate_limit = "5/d"', r'rate_limit must be "N/s", "N/m" or "N/h" .*\(got "5/d"\)'),
    ('rate_limit = "0/s"', r"rate_limit must be"),
    ("max_running = 0", r"max_running must be"),
    ("max_running_per_group = -1", r"max_running_per_group must be"),
])
def test_a_bad_limit_names_what_is_wrong(tmp_path: Path, line: str, named: str) -> None:
    assert re.search(named, error_for(tmp_path, MINIMAL + line + "\n"))


def test_a_bad_max_pending_names_what_is_wrong(tmp_path: Path) -> None:
    text = MINIMAL.replace('name = "media"', 'name = "media"\nmax_pending = 0')
    assert "max_pending must be" in error_for(tmp_path, text)


def with_max_log(value: str) -> str:
    return MINIMAL.replace('name = "media"', f'name = "media"\nmax_log = {value}')


def test_max_log_is_a_size_and_defaults_to_one_mebibyte(tmp_path: Path) -> None:
    assert load(write(tmp_path, MINIMAL)).pool.max_log == 1024 * 1024
    assert load(write(tmp_path, with_max_log('"256KiB"'))).pool.max_log == 256 * 1024
    assert load(write(tmp_path, with_max_log("0"))).pool.max_log == 0  # capture off


@pytest.mark.parametrize(("value", "says"), [
    ('"1MB"', 'max_log must be a size in bytes or a string like "512MiB" (got "1MB")'),
    ("-1", "max_log must not be negative"),
    ("true", "max_log must be a size"),
    ('"lots"', "max_log must be a size"),
])
def test_a_bad_max_log_is_one_line_naming_it(tmp_path: Path, value: str, says: str) -> None:
    message = error_for(tmp_path, with_max_log(value))
    assert says in message
    assert "[pool]" in message


def test_wait_replicas_is_read_for_redis_and_refused_on_sqlite(tmp_path: Path) -> None:
    redis = MINIMAL.replace('name = "media"', 'name = "media"\nstore = "redis+sentinel://'
                            'a:26379,b:26379/mymaster"\nwait_replicas = 1')
    assert load(write(tmp_path, redis)).pool.wait_replicas == 1
    assert load(write(tmp_path, MINIMAL)).pool.wait_replicas == 0
    sqlite = MINIMAL.replace('name = "media"', 'name = "media"\nwait_replicas = 1')
    message = error_for(tmp_path, sqlite)
    assert "wait_replicas is for Redis stores" in message and "\n" not in message
    negative = MINIMAL.replace('name = "media"', 'name = "media"\nwait_replicas = -1')
    assert "wait_replicas" in error_for(tmp_path, negative)


def test_child_concurrency_is_refused_for_a_plain_def_handler(tmp_path: Path) -> None:
    message = error_for(tmp_path, MINIMAL + "child_concurrency = 8\n")

    assert "[handlers.thumbnail] child_concurrency needs an async handler: run in" in message
    assert "is a plain def" in message


def test_child_concurrency_of_an_async_handler_is_kept(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "child_concurrency = 8\n")
    (tmp_path / "jobs" / "thumbnail.py").write_text("async def run(job):\n    return None\n")

    assert load(path).handlers["thumbnail"].child_concurrency == 8


def test_child_concurrency_with_reused_children_is_refused(tmp_path: Path) -> None:
    message = error_for(tmp_path, MINIMAL + "child_concurrency = 8\nmax_jobs_per_child = 10\n")

    assert "child_concurrency cannot be above 1 with max_jobs_per_child above 1" in message
