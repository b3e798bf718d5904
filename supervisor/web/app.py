"""The dashboard's routes.  Every read and every action is an `AsyncClient` call, the same
ones the CLI makes (`status`, `job`, `jobs`, `stop`, `retry`, `notify`, `pause`,
`resume`).  Pages are rendered on the server; the parts that change (`/parts/...`) are
fetched again every REFRESH_MS by the vendored htmx and swapped in place."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import jinja2
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from supervisor.client import AsyncClient, parse_payload
from supervisor.errors import JobNotFound, PoolsupError, StoreFailure
from supervisor.store.records import ALL_STATES
from supervisor.web.auth import CSRF_FIELD, Gate, csrf_ok, csrf_value
from supervisor.web.views import FILTERS, job_path

REFRESH_MS = 1500
PAGE_SIZE = 50
FAILED_ON_OVERVIEW = 20
FORM_OVERHEAD = 64 * 1024  # a form's other fields (its payload may be percent-encoded: x3)
HERE = Path(__file__).parent
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


@dataclass(frozen=True, kw_only=True)
class DashboardSettings:
    pool: str
    handlers: Sequence[str]  # the config's, for pause and resume
    token: str | None = None
    read_only: bool = False


def templates() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # keys, errors and outputs are the users' text: never markup
        undefined=jinja2.StrictUndefined,
    )
    environment.filters.update(FILTERS)
    return environment


def create_app(client: AsyncClient, settings: DashboardSettings) -> Starlette:
    pages = _Pages(client, settings, templates())
    routes = [
        Route("/", pages.overview),
        Route("/parts/overview", pages.overview_part),
        Route("/jobs", pages.jobs),
        Route("/parts/jobs/{key:path}", pages.job_part),
        Route("/jobs/{key:path}/stop", pages.stop, methods=["POST"]),
        Route("/jobs/{key:path}/retry", pages.retry, methods=["POST"]),
        Route("/jobs/{key:path}/notify", pages.notify, methods=["POST"]),
        Route("/jobs/{key:path}", pages.job),
        Route("/pause", pages.pause, methods=["POST"]),
        Route("/resume", pages.resume, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await client.close()

    return Starlette(routes=routes, lifespan=lifespan,
                     middleware=[Middleware(Gate, token=settings.token)])


class _Pages:
    def __init__(self, client: AsyncClient, settings: DashboardSettings,
                 environment: jinja2.Environment) -> None:
        self._client = client
        self._settings = settings
        self._environment = environment

    def _render(self, request: Request, template: str, status_code: int = 200,
                **values: Any) -> Response:
        page = self._environment.get_template(template).render(
            pool=self._settings.pool, read_only=self._settings.read_only,
            csrf=csrf_value(request), csrf_field=CSRF_FIELD, refresh_ms=REFRESH_MS,
            note=request.query_params.get("note"), error=request.query_params.get("error"),
            **values)
        return HTMLResponse(page, status_code=status_code, headers=SECURITY_HEADERS)

    async def _guarded(self, request: Request, read: Callable[[], Awaitable[Response]]
                       ) -> Response:
        """A page, or a one-line message when the store cannot answer or the job is
        unknown: never a traceback."""
        try:
            return await read()
        except JobNotFound as error:
            return self._render(request, "problem.html", 404, title="not found",
                                problem=error.message)
        except StoreFailure as error:
            return self._render(request, "problem.html", 503, title="store unreachable",
                                problem=error.message)

    async def _overview_values(self) -> dict[str, Any]:
        status = await self._client.status()
        failed = await self._client.latest_finished("failed", limit=FAILED_ON_OVERVIEW)
        paused = status["paused"]
        handlers = sorted({*self._settings.handlers, *paused["handlers"]})
        return {"status": status, "failed": failed,
                "more_failed": status["counts"]["failed"] > len(failed), "handlers": handlers,
                "states": ALL_STATES}

    async def overview(self, request: Request) -> Response:
        async def read() -> Response:
            return self._render(request, "overview.html", title="overview",
                                **await self._overview_values())
        return await self._guarded(request, read)

    async def overview_part(self, request: Request) -> Response:
        async def read() -> Response:
            return self._render(request, "overview_live.html", **await self._overview_values())
        return await self._guarded(request, read)

    async def jobs(self, request: Request) -> Response:
        query = request.query_params
        state = query.get("state") or None
        if state is not None and state not in ALL_STATES:
            return PlainTextResponse(f"poolsup web: unknown state {state!r} (one of "
                                     f"{', '.join(ALL_STATES)})\n", status_code=400)
        prefix, after = query.get("prefix", ""), query.get("after", "")

        async def read() -> Response:
            page = await self._client.jobs_page(state, prefix=prefix, after=after,
                                                limit=PAGE_SIZE + 1)
            more = len(page) > PAGE_SIZE
            page = page[:PAGE_SIZE]
            next_url = None
            if more:
                next_url = "/jobs?" + urlencode(
                    {"state": state or "", "prefix": prefix, "after": page[-1]["key"]})
            return self._render(request, "jobs.html", title="jobs", jobs=page, state=state,
                                prefix=prefix, after=after, next_url=next_url,
                                states=ALL_STATES)
        return await self._guarded(request, read)

    async def _job_values(self, key: str) -> dict[str, Any]:
        record = await self._client.job(key)
        return {"job": record, "outputs": await self._client.logs(key)}

    async def job(self, request: Request) -> Response:
        key = request.path_params["key"]

        async def read() -> Response:
            return self._render(request, "job.html", title=key, **await self._job_values(key))
        return await self._guarded(request, read)

    async def job_part(self, request: Request) -> Response:
        key = request.path_params["key"]

        async def read() -> Response:
            return self._render(request, "job_live.html", **await self._job_values(key))
        return await self._guarded(request, read)

    async def _act(self, request: Request, back: str,
                   action: Callable[[dict[str, Any]], Awaitable[str]]) -> Response:
        """A POST: refused (403) when read-only or without the CSRF value; then the
        action, and a redirect back (Post/Redirect/Get) with its note or its error."""
        if self._settings.read_only:
            return PlainTextResponse("poolsup web: read-only dashboard\n", status_code=403)
        form = await _form(request, 3 * self._client.max_payload + FORM_OVERHEAD)
        if form is None:
            return PlainTextResponse("poolsup web: the form is too large\n", status_code=413)
        if not csrf_ok(request, form):
            return PlainTextResponse("poolsup web: missing or wrong CSRF value (reload the "
                                     "page)\n", status_code=403)
        try:
            outcome = {"note": await action(form)}
        except PoolsupError as error:
            outcome = {"error": error.message}
        return RedirectResponse(f"{back}?{urlencode(outcome)}", status_code=303)

    async def stop(self, request: Request) -> Response:
        key = request.path_params["key"]

        async def action(_form: dict[str, Any]) -> str:
            # As `poolsup stop --no-wait`: the page follows the job to its end.
            record = await self._client.stop(key, wait=False)
            return f"stop requested: {key} is {record['state']}"
        return await self._act(request, job_path(key), action)

    async def retry(self, request: Request) -> Response:
        key = request.path_params["key"]

        async def action(_form: dict[str, Any]) -> str:
            record = await self._client.retry(key)
            return f"retried: {key} is {record['state']}"
        return await self._act(request, job_path(key), action)

    async def notify(self, request: Request) -> Response:
        key = request.path_params["key"]

        async def action(form: dict[str, Any]) -> str:
            text = form.get("payload")
            payload = parse_payload(text if isinstance(text, str) else "",
                                    self._client.max_payload)
            await self._client.notify_json(key, payload)
            return f"notified {key}"
        return await self._act(request, job_path(key), action)

    async def pause(self, request: Request) -> Response:
        async def action(form: dict[str, Any]) -> str:
            names = _handler_names(form)
            await self._client.pause(names)
            return f"paused {', '.join(names) or 'the pool'}"
        return await self._act(request, "/", action)

    async def resume(self, request: Request) -> Response:
        async def action(form: dict[str, Any]) -> str:
            names = _handler_names(form)
            await self._client.resume(names)
            return f"resumed {', '.join(names) or 'the pool'}"
        return await self._act(request, "/", action)


async def _form(request: Request, limit: int) -> dict[str, Any] | None:
    """The urlencoded form of a POST (its first value per name), or None above `limit`
    bytes.  Read here rather than with Starlette's parser, which needs another
    dependency (python-multipart) for what the dashboard's forms never send."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {name: values[0] for name, values in fields.items()}


def _handler_names(form: dict[str, Any]) -> list[str]:
    """The form's handler, or none (the whole pool)."""
    handler = form.get("handler")
    return [handler] if isinstance(handler, str) and handler else []
