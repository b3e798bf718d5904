"""Who may use the dashboard: the token, and the CSRF value of its forms.

With a token configured, every request presents it: `?token=...` once (answered with a
redirect that sets it as an HttpOnly, SameSite=Strict cookie), the cookie, or an
`Authorization: Bearer` header.  Without one the dashboard listens on loopback only, and
answers only requests whose Host names loopback: a web page that rebinds its own DNS name
to 127.0.0.1 would otherwise reach it from the user's browser.

Each browser gets a random CSRF value in a cookie; every form carries it, and a POST
whose form value does not match the cookie's is refused (403)."""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Mapping
from http.cookies import SimpleCookie
from urllib.parse import urlencode

from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

TOKEN_COOKIE = "poolsup_token"
CSRF_COOKIE = "poolsup_csrf"
CSRF_FIELD = "csrf"
_COOKIE_FLAGS = "; Path=/; HttpOnly; SameSite=Strict"


def is_loopback(host: str) -> bool:
    """`host` (a name or an address, maybe in brackets) is this machine's loopback."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def presented_token(request: Request) -> tuple[str | None, bool]:
    """The token the request carries, and whether it came in the query string."""
    if "token" in request.query_params:
        return request.query_params["token"], True
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and value:
        return value.strip(), False
    return request.cookies.get(TOKEN_COOKIE), False


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def csrf_value(request: Request) -> str:
    """The browser's CSRF value (set by `Gate` on every request)."""
    value: str = request.scope["poolsup.csrf"]
    return value


def csrf_ok(request: Request, form: Mapping[str, object]) -> bool:
    cookie = request.cookies.get(CSRF_COOKIE)
    given = form.get(CSRF_FIELD)
    return bool(cookie) and isinstance(given, str) and _same(given, cookie or "")


class Gate:
    """ASGI middleware: the token (or, without one, a loopback Host), and the CSRF
    cookie."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self._app = app
        self._token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        request = Request(scope)
        refusal = self._refusal(request)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        given, in_query = presented_token(request)
        if self._token is not None and in_query:
            await self._cookie_redirect(request, given or "")(scope, receive, send)
            return
        csrf = request.cookies.get(CSRF_COOKIE) or ""
        fresh = len(csrf) < 32
        if fresh:
            csrf = secrets.token_urlsafe(32)
        scope["poolsup.csrf"] = csrf

        async def send_with_cookie(message: Message) -> None:
            if fresh and message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"set-cookie", f"{CSRF_COOKIE}={csrf}{_COOKIE_FLAGS}".encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self._app(scope, receive, send_with_cookie)

    def _refusal(self, request: Request) -> Response | None:
        if self._token is None:
            host = request.url.hostname or ""
            if not is_loopback(host):
                return PlainTextResponse(
                    f"poolsup web: Host {host!r} is not loopback (without a token the "
                    "dashboard answers only on loopback)\n", status_code=403)
            return None
        given, _ = presented_token(request)
        if not given:
            return PlainTextResponse("poolsup web: a token is required (?token=..., "
                                     "or Authorization: Bearer ...)\n", status_code=401,
                                     headers={"www-authenticate": "Bearer"})
        if not _same(given, self._token):
            return PlainTextResponse("poolsup web: wrong token\n", status_code=403)
        return None

    def _cookie_redirect(self, request: Request, token: str) -> Response:
        """The same URL without the token, setting the token's cookie."""
        kept = [(name, value) for name, value in request.query_params.multi_items()
                if name != "token"]
        target = URL(path=request.url.path, query=urlencode(kept))
        response = RedirectResponse(str(target), status_code=303)
        cookie: SimpleCookie = SimpleCookie()
        cookie[TOKEN_COOKIE] = token
        response.headers.append(
            "set-cookie", f"{cookie[TOKEN_COOKIE].OutputString()}{_COOKIE_FLAGS}")
        return response
