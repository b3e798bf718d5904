"""One rule hides every secret of a store URL, wherever the URL is shown."""

from __future__ import annotations

import pytest

from supervisor.redaction import redact_in, redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # The user info's password, whatever it holds.
        ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
        ("rediss://user:pw@host/0", "rediss://user:***@host/0"),
        ("rediss://user:p%40ss@[::1]:6380/2", "rediss://user:***@[::1]:6380/2"),
        ("redis://:pa/ss@host/0", "redis://:***@host/0"),
        ("redis+cluster://:pw@node-1:7000", "redis+cluster://:***@node-1:7000"),
        ("unix://user:pw@/run/redis.sock?db=1", "unix://user:***@/run/redis.sock?db=1"),
        # Query parameters that hold a secret, by name, in any case or spelling.
        ("unix:///run/redis.sock?db=1&password=pw", "unix:///run/redis.sock?db=1&password=***"),
        ("rediss://h/0?ssl_keyfile=/k.pem&ssl_password=pw",
         "rediss://h/0?ssl_keyfile=/k.pem&ssl_password=***"),
        ("redis+sentinel://:pw@s1:26379,s2:26379/main?sentinel_password=pw2",
         "redis+sentinel://:***@s1:26379,s2:26379/main?sentinel_password=***"),
        ("redis://h/0?PASSWORD=pw&pass%77ord=pw", "redis://h/0?PASSWORD=***&pass%77ord=***"),
        ("redis://h/0?auth_token=t&client_secret=s&api_key=k&pass=p&auth=a",
         "redis://h/0?auth_token=***&client_secret=***&api_key=***&pass=***&auth=***"),
        ("redis://h/0?password=", "redis://h/0?password=***"),
        ("redis://h/0?password", "redis://h/0?password=***"),
        ("redis://h/0?x=1#frag-with-pw", "redis://h/0?x=1#***"),
        # Nothing secret: shown as written.
        ("redis://user@host/0", "redis://user@host/0"),
        ("rediss://h/0?ssl_keyfile=/k.pem&ssl_certfile=/c.pem&client_name=web&username=u",
         "rediss://h/0?ssl_keyfile=/k.pem&ssl_certfile=/c.pem&client_name=web&username=u"),
        ("unix:///run/redis@1.sock", "unix:///run/redis@1.sock"),
        ("sqlite:////var/lib/pool.db", "sqlite:////var/lib/pool.db"),
        ("not a url", "not a url"),
    ],
)
def test_every_secret_of_a_store_url_is_hidden(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_a_drivers_message_quoting_the_url_or_a_piece_of_it_shows_no_secret() -> None:
    url = "postgresql://u:p%40ss@[h/db?sslpassword=s3&sslmode=x"
    message = f'bad URI: "{url}"; invalid percent-encoded token: "p%40ss"; also p@ss, s3'

    shown = redact_in(message, url)

    assert shown == ('bad URI: "postgresql://u:***@[h/db?sslpassword=***&sslmode=x"; '
                     'invalid percent-encoded token: "***"; also ***, ***')


@pytest.mark.parametrize(("text", "shown"), [
    ("host=h user=u password=pw dbname=d", "host=h user=u password=*** dbname=d"),
    ("host=h sslpassword='p w' port=5432", "host=h sslpassword=*** port=5432"),
    ("postgresql:u:pw@h/d", "postgresql:u:***@h/d"),
    ("u:pw@h:5432/d", "u:***@h:5432/d"),
    ("pool.db", "pool.db"),
])
def test_a_store_setting_that_is_not_a_url_has_its_secrets_hidden(text: str,
                                                                  shown: str) -> None:
    assert redact_url(text) == shown
