"""The Python client: dispatch, stop, notify and watch jobs from any program."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import orjson

from supervisor.bulk import chunk_results, dispatch_chunks, item_fields
from supervisor.config import Config, HandlerConfig, ScheduleConfig, load_config
from supervisor.core.plans import Plan, PlanDiff
from supervisor.core.validation import (
    DEFAULT_MAX_PAYLOAD,
    validate_group,
    validate_key,
    validate_max_attempts,
    validate_payload_size,
    validate_priority,
    validate_unique_for,
)
from supervisor.errors import InvalidJob, NotRunning, UsageError
from supervisor.job_output import AttemptOutput, OutputFollower, attempt_output, of_attempt
from supervisor.observe import trace_context
from supervisor.observe.trace_context import TraceContext
from supervisor.pool.plan_apply import plan_diff
from supervisor.redaction import redact_url
from supervisor.reports.limits import limit_view
from supervisor.reports.schedules import schedule_views
from supervisor.reports.status import render_status_json
from supervisor.run_at import check_run_at
from supervisor.store import open_store
from supervisor.store.base import Store
from supervisor.store.records import (
    DISPATCH_CHUNK,
    FINISHED_STATES,
    DispatchRequest,
    JobState,
    RunOutput,
)
from supervisor.waiting import wait_for_end

T = TypeVar("T")

HANDLER_DEFAULT = 0  # max_attempts 0: the supervisor applies the handler's max_attempts
STOP_POLL_INTERVAL = 0.05
DEBUG_TIMEOUT = 10.0  # for the supervisor that runs the job to answer `debug`


def encode_payload(payload: Any, limit: int = DEFAULT_MAX_PAYLOAD) -> bytes:
    try:
        data = orjson.dumps(payload)
    except TypeError as error:
        raise InvalidJob(f"payload is not JSON-serializable: {error}") from error
    return validate_payload_size(data, limit)


def parse_payload(text: str | bytes, limit: int = DEFAULT_MAX_PAYLOAD) -> bytes:
    """Validate JSON text (the command line's, or a caller's) without re-encoding it:
    what reaches the store is always valid JSON."""
    data = text.encode() if isinstance(text, str) else text
    validate_payload_size(data, limit)
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise InvalidJob(f"payload is not valid JSON: {error}") from error
    return data.strip()


def client_options(config: Config) -> tuple[str, dict[str, Any]]:
    """The store URL and client options of a pool's config."""
    return config.pool.store, {
        "pool": config.pool.name,
        "retention": config.pool.retention,
        "handlers": config.handlers,
        "max_payload": config.pool.max_payload,
        "schedules": config.schedules,
        "wait_replicas": config.pool.wait_replicas,
    }


def client_for(config: Config) -> AsyncClient:
    """A client of the pool that `config` describes."""
    store, options = client_options(config)
    return AsyncClient(store, **options)


class AsyncClient:
    """Talks to a pool's store directly; needs no running supervisor."""

    def __init__(
        self,
        store: str,
        *,
        pool: str,
        retention: float = 86400.0,
        handlers: Mapping[str, HandlerConfig] | None = None,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        schedules: Mapping[str, ScheduleConfig] | None = None,
        wait_replicas: int = 0,
    ) -> None:
        self._url = store
        self._wait_replicas = wait_replicas
        self.pool = pool
        self._retention = retention
        self._handlers = dict(handlers or {})
        self._max_payload = max_payload
        self._schedules = dict(schedules or {})
        self._store: Store | None = None
        # The trace context a dispatch keeps when no span is current in the caller
        # (`poolsup dispatch` sets it from TRACEPARENT): docs/tracing.md.
        self.trace_fallback: TraceContext | None = None

    @property
    def max_payload(self) -> int:
        return self._max_payload

    @classmethod
    def from_config(cls, path: str | Path) -> AsyncClient:
        store, options = client_options(load_config(Path(path)))
        return cls(store, **options)

    async def _opened(self) -> Store:
        if self._store is None:
            self._store = await open_store(self._url, self.pool, retention=self._retention,
                                           wait_replicas=self._wait_replicas)
        return self._store

    def _resolve_handler(self, handler: str | None) -> str:
        if handler is None:
            if len(self._handlers) == 1:
                return next(iter(self._handlers))
            configured = ", ".join(self._handlers) or "none known"
            raise UsageError(f"name the handler (configured: {configured})")
        if self._handlers and handler not in self._handlers:
            configured = ", ".join(self._handlers)
            raise InvalidJob(f"unknown handler {handler!r} (configured: {configured})")
        return handler

    async def dispatch_json(
        self, key: str, payload_json: bytes, *, handler: str | None = None,
        max_attempts: int | None = None, run_at: float | None = None, priority: int = 0,
        group: str | None = None, unique_for: float = 0.0,
    ) -> dict[str, Any]:
        """Dispatch with the payload given as JSON text (checked: invalid JSON never
        reaches the store)."""
        return await self._dispatch(self.dispatch_request(
            key, parse_payload(payload_json, self._max_payload), handler=handler,
            max_attempts=max_attempts, run_at=run_at, priority=priority, group=group,
            unique_for=unique_for))

    async def dispatch(
        self, key: str, payload: Any = None, *, handler: str | None = None,
        max_attempts: int | None = None, run_at: float | None = None, priority: int = 0,
        group: str | None = None, unique_for: float = 0.0, connection: Any = None,
    ) -> dict[str, Any]:
        """Add a job.  Raises `JobExists` if the key is live.  With `run_at` (epoch
        seconds) it is not started before that time by the store's clock; `priority`
        0-9 (higher first within its handler), `group` (what max_running_per_group
        counts), `unique_for` (refused if the key finished within that many seconds).
        `connection` (PostgreSQL stores only, else `UsageError`): a psycopg
        AsyncConnection on the pool's database; the job is written in its current
        transaction and exists only once that commits."""
        request = self.dispatch_request(
            key, encode_payload(payload, self._max_payload), handler=handler,
            max_attempts=max_attempts, run_at=run_at, priority=priority, group=group,
            unique_for=unique_for)
        if connection is None:
            return await self._dispatch(request)
        store = await self.caller_store()
        (refused,) = await store.dispatch_on_async(connection, [request])
        if refused is not None:
            raise refused
        record: dict[str, Any] = (await store.record_on_async(connection, key)).to_json()
        return record

    async def caller_store(self) -> Any:
        """The store, for `connection=`: a PostgreSQL store with its schema ready, or
        `UsageError`."""
        store = await self._opened()
        if not hasattr(store, "dispatch_on"):
            raise UsageError(
                f"connection= needs a PostgreSQL store (postgresql://...); this pool's store "
                f"is {redact_url(self._url).partition('://')[0] or self._url!r}")
        await store.ready()  # type: ignore[attr-defined]
        return store

    def dispatch_request(
        self, key: str, payload_json: bytes, *, handler: str | None, max_attempts: int | None,
        run_at: float | None, priority: int = 0, group: str | None = None,
        unique_for: float = 0.0,
    ) -> DispatchRequest:
        """A checked request (raises `InvalidJob`/`UsageError`); the payload is valid JSON.
        It keeps the caller's current W3C trace context (docs/tracing.md)."""
        name = self._resolve_handler(handler)
        if max_attempts is None:
            known = self._handlers.get(name)
            max_attempts = known.max_attempts if known else HANDLER_DEFAULT
        else:
            validate_max_attempts(max_attempts)
        trace = trace_context.current() or self.trace_fallback
        return DispatchRequest(
            key=validate_key(key), handler=name, payload=payload_json, max_attempts=max_attempts,
            run_at=check_run_at(run_at), priority=validate_priority(priority),
            group=validate_group(group), unique_for=validate_unique_for(unique_for),
            traceparent=None if trace is None else trace.traceparent,
            tracestate=None if trace is None else trace.tracestate,
        )

    async def _dispatch(self, request: DispatchRequest) -> dict[str, Any]:
        store = await self._opened()
        return (await store.dispatch(request)).to_json()

    async def dispatch_many(self, items: Iterable[Mapping[str, Any]], *,
                            connection: Any = None) -> list[dict[str, Any]]:
        """Add many jobs, one store round trip per DISPATCH_CHUNK of them.  Each item is a
        dict with `key` and, as `dispatch` takes them, `payload`, `handler`, `priority`,
        `group`, `run_at`, `max_attempts`, `unique_for`.  Every item is checked first: a
        bad one raises `InvalidJob` naming it, and nothing is added.  Returns a result per
        item, in order: {"key", "added": True}, or {"key", "added": False, "error"}.
        `connection`: as `dispatch` takes it."""
        requests = self.item_requests(items)
        if connection is None:
            return await self.dispatch_requests(requests)
        store = await self.caller_store()
        results: list[dict[str, Any]] = []
        for start in range(0, len(requests), DISPATCH_CHUNK):
            chunk = requests[start:start + DISPATCH_CHUNK]
            results += chunk_results(chunk, await store.dispatch_on_async(connection, chunk))
        return results

    def item_requests(self, items: Iterable[Mapping[str, Any]]) -> list[DispatchRequest]:
        """Every `dispatch_many` item checked (the first bad one raises `InvalidJob`)."""
        requests = []
        for index, item in enumerate(items):
            try:
                requests.append(self.item_request(item))
            except UsageError as error:
                raise InvalidJob(f"item {index}: {error.message}") from None
        return requests

    def item_request(self, item: object) -> DispatchRequest:
        """The checked request of one `dispatch_many` item."""
        fields = item_fields(item)
        return self.dispatch_request(
            fields["key"], encode_payload(fields.get("payload"), self._max_payload),
            handler=fields.get("handler"), max_attempts=fields.get("max_attempts"),
            run_at=fields.get("run_at"), priority=fields.get("priority", 0),
            group=fields.get("group"), unique_for=fields.get("unique_for", 0.0))

    async def dispatch_requests(self, requests: Sequence[DispatchRequest]
                                ) -> list[dict[str, Any]]:
        """Checked requests (`item_request`) added as `dispatch_many` does."""
        return await dispatch_chunks(await self._opened(), requests)

    async def wait(self, key: str, timeout: float | None = None) -> dict[str, Any]:
        """The job's record (as `job`) once it has succeeded, failed or stopped.  Raises
        `JobNotFound`, or `TimeoutError` (`WaitTimedOut`) when `timeout` seconds pass
        first: the job goes on."""
        return (await wait_for_end(await self._opened(), key, timeout,
                                   where=f"the store at {redact_url(self._url)}")).to_json()

    async def retry(self, key: str) -> dict[str, Any]:
        """Run a failed or stopped job again: same handler and payload, attempts from 1.
        Raises `JobExists` (live), `DispatchRefused` (succeeded), `JobNotFound`."""
        store = await self._opened()
        await store.retry(key)
        return (await store.job(key)).to_json()

    async def job(self, key: str) -> dict[str, Any]:
        """Raises `JobNotFound`."""
        return (await (await self._opened()).job(key)).to_json()

    async def jobs(self, state: JobState | None = None) -> list[dict[str, Any]]:
        return [record.to_json() for record in await (await self._opened()).jobs(state)]

    async def jobs_page(self, state: JobState | None = None, *, prefix: str = "",
                        after: str = "", limit: int = 50) -> list[dict[str, Any]]:
        """One page of `jobs`, ordered by key: up to `limit` records (without `events`)
        whose key starts with `prefix` and sorts after `after`; the next page starts
        after the last key of this one.  Reads only the page's records."""
        page = await (await self._opened()).jobs_page(state, prefix=prefix, after=after,
                                                       limit=limit)
        return [record.to_json() for record in page]

    async def latest_finished(self, state: JobState, limit: int = 20) -> list[dict[str, Any]]:
        """The `limit` jobs that finished last in `state` (succeeded, failed or stopped),
        newest first, without `events`."""
        page = await (await self._opened()).latest_finished(state, limit)
        return [record.to_json() for record in page]

    async def stop(
        self, key: str, *, wait: bool = True, timeout: float | None = None
    ) -> dict[str, Any]:
        """Stop the job wherever it runs; with `wait`, return once its processes are gone."""
        store = await self._opened()
        await store.stop(key)
        record = await store.job(key)
        with anyio.fail_after(timeout):
            while wait and record.state not in FINISHED_STATES:
                await anyio.sleep(STOP_POLL_INTERVAL)
                record = await store.job(key)
        return record.to_json()

    async def notify(self, key: str, payload: Any) -> None:
        await (await self._opened()).notify(key, encode_payload(payload, self._max_payload))

    async def notify_json(self, key: str, payload_json: bytes) -> None:
        payload_json = parse_payload(payload_json, self._max_payload)
        await (await self._opened()).notify(key, payload_json)

    async def status(self) -> dict[str, Any]:
        store = await self._opened()
        snapshot = await store.snapshot()
        status = render_status_json(snapshot)
        status["schedules"] = await self.schedules()
        status["limits"] = {}
        for name, handler in self._handlers.items():
            if handler.limits.unlimited:
                continue
            starts = None
            if handler.limits.rate is not None:
                now, starts = await store.starts_within(name, handler.limits.rate.period)
            running = [record for record in snapshot.running if record.handler == name]
            status["limits"][name] = limit_view(handler.limits, running, starts,
                                                now if starts is not None else 0.0)
        return status

    async def schedules(self) -> list[dict[str, Any]]:
        """Each schedule configured here or recorded in the store: last and next tick,
        last outcome, who fired it."""
        return schedule_views(await (await self._opened()).schedules(), self._schedules)

    async def plan_diff(self, schedule: str, plan: Plan) -> PlanDiff:
        """What applying a producer's plan would change now; changes nothing."""
        return await plan_diff(await self._opened(), schedule, plan)

    async def debug(self, key: str, timeout: float = DEBUG_TIMEOUT) -> dict[str, Any]:
        """The running job's Python thread stacks, from whichever supervisor runs it:
        {"key", "supervisor", "token", "pid", "threads": [{"thread", "main", "frames":
        [{"file", "line", "function", "code"}, ...innermost last]}]}, or "error" instead
        of "threads" when the child could not answer (blocked in C code).  Raises
        `JobNotFound`, or `NotRunning` (not running, or no answer within `timeout`)."""
        store = await self._opened()
        record = await store.job(key)
        if record.state != "running":
            raise NotRunning(f"job {key!r} is {record.state}, not running")
        answer = await store.stacks_answer(await store.request_stacks(key), timeout)
        if answer is None:
            raise NotRunning(f"job {key!r}: no supervisor answered within {timeout:g} s "
                             "(it may have just ended, or its supervisor cannot reach the "
                             "store)")
        return {"key": key, **orjson.loads(answer)}

    async def logs(self, key: str, attempt: int | None = None) -> list[AttemptOutput]:
        """What each run of the job printed (of `attempt` only, if given), oldest first.
        Raises `JobNotFound`, or `AttemptNotFound` (one too) for an attempt without output."""
        return [attempt_output(run) for run in await self.output_runs(key, attempt)]

    async def output_runs(self, key: str, attempt: int | None = None) -> list[RunOutput]:
        """`logs` as the store keeps it: each run's bytes, undecoded."""
        return of_attempt(key, await (await self._opened()).output(key), attempt)

    async def output_follower(self, key: str, attempt: int | None = None) -> OutputFollower:
        """Reads the job's output on as it comes (`logs --follow`)."""
        return OutputFollower(await self._opened(), key, attempt)

    async def pause(self, handlers: Sequence[str] = ()) -> None:
        """No supervisor claims jobs of `handlers` (none: of the pool) until `resume`."""
        await (await self._opened()).pause(self._known_handlers(handlers))

    async def resume(self, handlers: Sequence[str] = ()) -> None:
        await (await self._opened()).resume(self._known_handlers(handlers))

    def _known_handlers(self, handlers: Sequence[str]) -> list[str]:
        """`handlers`, each checked against the config's when it has handlers."""
        return [self._resolve_handler(handler) for handler in handlers]

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()
            self._store = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _shut(async_client: AsyncClient, portal: anyio.from_thread.BlockingPortal, stack: ExitStack,
          *, cancel_pending: bool) -> None:
    try:
        portal.call(async_client.close)
    finally:
        if cancel_pending:
            # A call the program left running (Ctrl-C in `wait`) must not hold up its exit.
            with contextlib.suppress(RuntimeError):
                portal.call(portal.stop, True)
        stack.close()


async def _carrying(trace: TraceContext | None, method: Callable[..., Coroutine[Any, Any, T]],
                    *args: Any, **kwargs: Any) -> T:
    """`method` with the trace context of the caller's thread (the portal's task runs on
    another thread, whose context may not be the caller's)."""
    with trace_context.carried(trace):
        return await method(*args, **kwargs)


class Client:
    """The blocking twin of `AsyncClient`, for programs without an event loop."""

    def __init__(self, store: str, *, pool: str, **options: Any) -> None:
        self._async = AsyncClient(store, pool=pool, **options)
        self._stack = ExitStack()
        self._portal = self._stack.enter_context(anyio.from_thread.start_blocking_portal())
        # Calls go straight to the portal's loop (`_call`): a task of the portal's own
        # costs a call some 0.14 ms more CPU of the caller's and the portal's threads.
        self._loop = self._portal.call(asyncio.get_running_loop)
        # A program that never calls close() (or raises before it) is closed when it exits
        # or drops the client: left to the interpreter's teardown, the portal would wait
        # forever for its thread, frozen by then, and the program would never end.
        self._at_exit = weakref.finalize(self, _shut, self._async, self._portal, self._stack,
                                         cancel_pending=True)

    @classmethod
    def from_config(cls, path: str | Path) -> Client:
        store, options = client_options(load_config(Path(path)))
        return cls(store, **options)

    def _call(self, method: Callable[..., Coroutine[Any, Any, T]], *args: Any, **kwargs: Any) -> T:
        """`method`'s answer, run on the portal's loop. A call the caller leaves (Ctrl-C
        in `wait`) is cancelled there, as the portal's stop cancels its own tasks: else
        the client's close at exit would wait for it."""
        future = asyncio.run_coroutine_threadsafe(method(*args, **kwargs), self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # done already (the call raised): nothing happens
            raise

    def dispatch(self, key: str, payload: Any = None, *, connection: Any = None,
                 **options: Any) -> dict[str, Any]:
        """As AsyncClient.dispatch; `connection` is a psycopg Connection or a Django
        connection, used in this thread, in its current transaction."""
        if connection is None:
            return self._call(_carrying, trace_context.current(), self._async.dispatch, key,
                              payload, **options)
        request = self._async.dispatch_request(
            key, encode_payload(payload, self._async.max_payload),
            handler=options.pop("handler", None), max_attempts=options.pop("max_attempts", None),
            run_at=options.pop("run_at", None), **options)
        store = self._call(self._async.caller_store)
        (refused,) = store.dispatch_on(connection, [request])
        if refused is not None:
            raise refused
        record: dict[str, Any] = store.record_on(connection, key).to_json()
        return record

    def dispatch_many(self, items: Iterable[Mapping[str, Any]], *,
                      connection: Any = None) -> list[dict[str, Any]]:
        if connection is None:
            return self._call(_carrying, trace_context.current(), self._async.dispatch_many,
                              list(items))
        requests = self._async.item_requests(items)
        store = self._call(self._async.caller_store)
        results: list[dict[str, Any]] = []
        for start in range(0, len(requests), DISPATCH_CHUNK):
            chunk = requests[start:start + DISPATCH_CHUNK]
            results += chunk_results(chunk, store.dispatch_on(connection, chunk))
        return results

    def wait(self, key: str, timeout: float | None = None) -> dict[str, Any]:
        return self._call(self._async.wait, key, timeout)

    def retry(self, key: str) -> dict[str, Any]:
        return self._call(self._async.retry, key)

    def job(self, key: str) -> dict[str, Any]:
        return self._call(self._async.job, key)

    def jobs(self, state: JobState | None = None) -> list[dict[str, Any]]:
        return self._call(self._async.jobs, state)

    def jobs_page(self, state: JobState | None = None, *, prefix: str = "", after: str = "",
                  limit: int = 50) -> list[dict[str, Any]]:
        return self._call(self._async.jobs_page, state, prefix=prefix, after=after, limit=limit)

    def latest_finished(self, state: JobState, limit: int = 20) -> list[dict[str, Any]]:
        return self._call(self._async.latest_finished, state, limit)

    def stop(self, key: str, *, wait: bool = True, timeout: float | None = None) -> dict[str, Any]:
        return self._call(self._async.stop, key, wait=wait, timeout=timeout)

    def notify(self, key: str, payload: Any) -> None:
        self._call(self._async.notify, key, payload)

    def status(self) -> dict[str, Any]:
        return self._call(self._async.status)

    def schedules(self) -> list[dict[str, Any]]:
        return self._call(self._async.schedules)

    def debug(self, key: str, timeout: float = DEBUG_TIMEOUT) -> dict[str, Any]:
        return self._call(self._async.debug, key, timeout)

    def logs(self, key: str, attempt: int | None = None) -> list[AttemptOutput]:
        return self._call(self._async.logs, key, attempt)

    def pause(self, handlers: Sequence[str] = ()) -> None:
        self._call(self._async.pause, handlers)

    def resume(self, handlers: Sequence[str] = ()) -> None:
        self._call(self._async.resume, handlers)

    def close(self) -> None:
        if self._at_exit.detach() is not None:
            _shut(self._async, self._portal, self._stack, cancel_pending=False)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
