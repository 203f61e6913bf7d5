"""Adapters between sync and async components (public in :mod:`emotional_memory.async_adapters`).

``SyncToAsync*`` wrap blocking components so they satisfy the async protocols (each
call runs in a worker thread). The private ``_AsyncToSync*`` bridges let the
synchronous engine core, running in a worker thread, call async components by
scheduling their coroutines back on the caller's event loop.

No deadlock: a ``SyncToAsync*`` adapter handed to :class:`AsyncEmotionalMemory` is
unwrapped (the engine core, already off the loop, calls the blocking component
directly), and the engine core itself runs on its own threads, never on the loop's
default executor, so a bridged coroutine that needs a default-executor thread always
finds one free, whatever the number of engines and cores.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import inspect
import os
import queue
import threading
from collections.abc import Callable, Coroutine, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from emotional_memory._scope_locks import AsyncScopeLocks
from emotional_memory.appraisal import AppraisalVector, GenericAppraisalVector
from emotional_memory.interfaces import (
    AppraisalEngine,
    AsyncAppraisalEngine,
    AsyncEmbedder,
    AsyncMemoryStore,
    Embedder,
    MemoryStore,
)
from emotional_memory.models import Memory

T = TypeVar("T")

_CLOSED_LOOP_POLL_S = 0.25
"""How often a worker waiting for the loop checks that the loop is still open."""

_EXITING = threading.Event()
"""Set as the interpreter starts exiting, before it joins the engine's worker threads."""


def watch_exit() -> None:
    """Have :data:`_EXITING` set when the interpreter exits, before the worker threads
    of the pools made so far are joined (``threading``'s exit hooks run last registered
    first): a worker waiting on a loop that no longer runs then gives up, instead of
    keeping the interpreter from exiting. Call it after creating a pool."""
    register = getattr(threading, "_register_atexit", None)
    if callable(register):
        with contextlib.suppress(RuntimeError):  # already exiting
            register(_EXITING.set)


CALLER_LOOP: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = contextvars.ContextVar(
    "emotional_memory_caller_loop", default=None
)
"""The event loop of the ``AsyncEmotionalMemory`` call a worker thread is running (set
in the worker's context only): its async components are called back on that loop,
whichever loop called the engine last (one engine may serve several loops at once)."""


class Nest:
    """The calls an operation's async components make back into the engine (an
    appraiser recalling memories, say) on a scope overlapping the operation's.

    Such a call cannot wait for the scope's turn, which the operation holds until its
    components answer. With a ``worker`` (the operation's engine thread, which holds the
    sync engine's re-entrant scope lock), the call is queued to that thread, which runs
    it while it waits for the component (:meth:`_LoopBridge.run`), as the sync engine
    runs a component's call back in its own thread; without one (the operation's turn
    is held on the loop alone: a batch's concurrent appraisals), it runs in a thread of
    its own in that turn.
    """

    def __init__(self, owner: object, path: tuple[str, ...], worker: bool) -> None:
        self.owner = owner  # the engine family (its sync scope locks)
        self.path = path
        self.worker = worker
        self.thread: int | None = None  # the worker's, once it runs
        self.jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._open = True

    def covers(self, owner: object, path: tuple[str, ...]) -> bool:
        """Whether a call on ``owner``'s scope ``path`` is nested in this operation."""
        n = min(len(path), len(self.path))
        return self._open and owner is self.owner and path[:n] == self.path[:n]

    def submit(self, job: Callable[[], None]) -> bool:
        """Queue ``job`` for the worker; False once the operation is over."""
        with self._lock:
            if self._open:
                self.jobs.put(job)
            return self._open

    def close(self) -> None:
        """End of the operation (on its worker, its turn still held): the calls queued
        meanwhile run now, still nested (their own components' calls back nest in
        turn), then later calls take turns as usual."""
        while True:
            with self._lock:
                try:
                    job = self.jobs.get_nowait()
                except queue.Empty:
                    self._open = False
                    return
            if job is not None:
                job()


NEST: contextvars.ContextVar[Nest | None] = contextvars.ContextVar(
    "emotional_memory_nest", default=None
)
"""The operation whose async components are running (set in its worker's context and
so in its bridged coroutines', or in a batch's appraisal tasks')."""


async def nested_call(nest: Nest, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn`` on ``nest``'s worker (see :class:`Nest`) and await its result.

    Raises:
        LookupError: the operation ended before the call was queued (take a turn).
    """
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()  # CALLER_LOOP and NEST: nested calls nest again

    def settle(ok: bool, value: Any) -> None:
        if not answer.done():
            answer.set_result(value) if ok else answer.set_exception(value)

    def job() -> None:
        try:
            out: tuple[bool, Any] = (True, context.run(no_stop_iteration, fn, *args, **kwargs))
        except BaseException as exc:  # handed to the caller on its loop
            out = (False, exc)
        with contextlib.suppress(RuntimeError):  # its loop closed meanwhile
            loop.call_soon_threadsafe(settle, *out)

    if not nest.submit(job):
        raise LookupError("the operation is over")
    return await asyncio.shield(answer)  # cancelled, the call still completes


STORE_METHODS = ("save", "get", "update", "delete", "list_all", "search_by_embedding", "count")
"""A memory store's protocol methods (async ones, or blocking ones, all alike)."""
STORE_REQUIRED = ("save", "get", "update", "delete")
"""The store methods every engine needs (the rest are used when present)."""
EMBEDDER_METHODS = ("embed", "embed_batch")
APPRAISAL_METHODS = ("appraise",)


def async_methods(obj: object, methods: Sequence[str]) -> list[str]:
    """The names among ``methods`` that ``obj`` has as coroutine functions.

    Args:
        obj: A component.
        methods: Its protocol's method names.

    Returns:
        Those that are ``async def`` on ``obj``, in order.
    """
    return [m for m in methods if _is_async_method(obj, m)]


def check_consistent(kind: str, obj: object, methods: Sequence[str]) -> bool:
    """Whether ``obj`` is an async component (its protocol methods coroutine
    functions), after checking that it is wholly one or the other.

    Args:
        kind: What it is, for the message ("store", "embedder", ...).
        obj: The component.
        methods: Its protocol's method names.

    Returns:
        True for an async component.

    Raises:
        TypeError: some of the methods it has are ``async def`` and others are not
            (named): an async component's would return coroutines never awaited, or
            a blocking one's be awaited in vain.
    """
    present = [m for m in methods if callable(getattr(obj, m, None))]
    is_async = async_methods(obj, present)
    if is_async and len(is_async) != len(present):
        blocking = [m for m in present if m not in is_async]
        raise TypeError(
            f"{kind} {type(obj).__name__} mixes async and blocking methods: "
            f"{', '.join(is_async)} async def, {', '.join(blocking)} not; an async "
            f"{kind}'s methods must all be coroutine functions, a blocking one's none"
        )
    return bool(is_async)


def _refuse_async(adapter: str, obj: object, methods: Sequence[str]) -> None:
    """A ``SyncToAsync*`` adapter wraps blocking components only."""
    found = async_methods(obj, methods)
    if found:
        raise TypeError(
            f"{adapter} wraps a blocking component, but {type(obj).__name__}.{found[0]} is "
            "a coroutine function (async def): pass the async component itself"
        )


def no_stop_iteration(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, a ``StopIteration`` it raises turned into a RuntimeError.

    A worker thread's StopIteration (a component calling ``next`` on an exhausted
    iterator) cannot be set on an asyncio future: the awaiting call would never
    return (and the engine's turn never be handed on). As a coroutine's does, it
    becomes a RuntimeError, the StopIteration its ``__cause__``.

    Args:
        fn: the callable.
        *args: its positional arguments.
        **kwargs: its keyword arguments.

    Returns:
        What ``fn`` returns.

    Raises:
        RuntimeError: ``fn`` raised StopIteration.
    """
    try:
        return fn(*args, **kwargs)
    except StopIteration as exc:
        name = getattr(fn, "__qualname__", type(fn).__name__)
        raise RuntimeError(
            f"{name} raised StopIteration (an exhausted iterator?), which cannot "
            "cross into a coroutine"
        ) from exc


async def to_thread(fn: Callable[..., T], *args: Any) -> T:
    """``asyncio.to_thread(fn, *args)``, a StopIteration made a RuntimeError
    (:func:`no_stop_iteration`).

    Returns:
        ``fn``'s result.
    """
    return await asyncio.to_thread(no_stop_iteration, fn, *args)


class SyncToAsyncEmbedder:
    """Async view of a blocking :class:`Embedder` (calls run in worker threads)."""

    def __init__(self, sync_embedder: Embedder) -> None:
        """Wrap ``sync_embedder``.

        Args:
            sync_embedder: The blocking embedder (``embed`` and ``embed_batch``).

        Raises:
            TypeError: ``sync_embedder`` is async (its methods would return coroutines
                that nobody awaits).
        """
        _refuse_async(type(self).__name__, sync_embedder, EMBEDDER_METHODS)
        self.sync = sync_embedder

    def __repr__(self) -> str:
        return f"{type(self).__name__}(inner={self.sync!r})"

    @property
    def identity(self) -> Any:
        """The wrapped embedder's ``identity`` (None without one)."""
        return getattr(self.sync, "identity", None)

    async def embed(self, text: str) -> list[float]:
        """Embed one text in a worker thread.

        Args:
            text: The text to embed.

        Returns:
            The embedding, shape (D,).
        """
        return await to_thread(self.sync.embed, text)

    async def embed_batch(self, texts: list[str]) -> list[list[float]]:
        """Embed many texts in a worker thread.

        Args:
            texts: The texts to embed.

        Returns:
            One embedding per text, in order, shape (len(texts), D); an embedder
            with ``embed`` alone embeds them one by one (as the sync engine does).
        """
        batch = getattr(self.sync, "embed_batch", None)
        if not callable(batch):
            return await to_thread(lambda: [self.sync.embed(t) for t in texts])
        return await to_thread(batch, texts)


class SyncToAsyncStore:
    """Async view of a blocking :class:`MemoryStore` (calls run in worker threads)."""

    def __init__(self, sync_store: MemoryStore) -> None:
        """Wrap ``sync_store``.

        Args:
            sync_store: The blocking memory store.

        Raises:
            TypeError: ``sync_store`` is async (its methods would return coroutines
                that nobody awaits).
        """
        _refuse_async(type(self).__name__, sync_store, STORE_METHODS)
        self.sync = sync_store

    def __repr__(self) -> str:
        return f"{type(self).__name__}(inner={self.sync!r})"

    async def save(self, memory: Memory) -> None:
        """Insert (or replace) a memory.

        Args:
            memory: The memory to store.
        """
        await to_thread(self.sync.save, memory)

    async def get(self, memory_id: str) -> Memory | None:
        """Look a memory up by id.

        Args:
            memory_id: The memory's id.

        Returns:
            The memory with this id, or None.
        """
        return await to_thread(self.sync.get, memory_id)

    async def update(self, memory: Memory) -> None:
        """Replace an existing memory.

        Args:
            memory: The new version (errors of the wrapped store propagate).
        """
        await to_thread(self.sync.update, memory)

    async def delete(self, memory_id: str) -> bool:
        """Remove a memory.

        Args:
            memory_id: The memory's id.

        Returns:
            True when it existed.
        """
        return await to_thread(self.sync.delete, memory_id)

    async def list_all(self) -> list[Memory]:
        """All memories in insertion order.

        Returns:
            A list of every stored memory.
        """
        return await to_thread(self.sync.list_all)

    async def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        """Nearest memories by cosine.

        Args:
            embedding: The query embedding, shape (D,).
            top_k: Maximum number of results.

        Returns:
            Up to ``top_k`` embedded memories, most similar first.
        """
        return await to_thread(self.sync.search_by_embedding, embedding, top_k)

    async def count(self) -> int:
        """Number of memories stored.

        Returns:
            ``len(store)`` of the wrapped store.
        """
        return await to_thread(len, self.sync)

    async def close(self) -> None:
        """Close the wrapped store when it can be closed."""
        close = getattr(self.sync, "close", None)
        if callable(close):
            await to_thread(close)


class SyncToAsyncAppraisalEngine:
    """Async view of a blocking :class:`AppraisalEngine`."""

    def __init__(self, sync_engine: AppraisalEngine) -> None:
        """Wrap ``sync_engine``.

        Args:
            sync_engine: The blocking appraisal engine.

        Raises:
            TypeError: ``sync_engine`` is async (its ``appraise`` would return
                coroutines that nobody awaits).
        """
        _refuse_async(type(self).__name__, sync_engine, APPRAISAL_METHODS)
        self.sync = sync_engine

    def __repr__(self) -> str:
        return f"{type(self).__name__}(inner={self.sync!r})"

    async def appraise(
        self, event_text: str, context: dict[str, Any] | None = None
    ) -> AppraisalVector | GenericAppraisalVector:
        """Appraise ``event_text`` in a worker thread.

        Args:
            event_text: The event description.
            context: Optional extra information for the appraiser.

        Returns:
            The appraisal of ``event_text``.
        """
        return await to_thread(self.sync.appraise, event_text, context)

    async def close(self) -> None:
        """Close the wrapped engine when it can be closed."""
        close = getattr(self.sync, "close", None)
        if callable(close):
            await to_thread(close)


class _LoopBridge:
    """Runs coroutines on the calling operation's event loop from a worker thread.

    ``loop`` is the loop of the engine's latest call: the loop used outside an
    operation's worker (the sync engine called directly), for its error messages.
    """

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the operation's loop (:data:`CALLER_LOOP`, else the latest
        caller's) and wait for its result (off that loop).

        Raises:
            RuntimeError: no loop yet, a closed one (also one closing while waited
                for: an operation cancelled by a caller whose ``asyncio.run`` ended,
                or one stopped when the interpreter exits),
                or called on the loop's own thread (waiting there would hang it: the
                sync engine was called directly instead of awaiting the
                ``AsyncEmotionalMemory`` method).
        """
        loop = CALLER_LOOP.get() or self.loop
        if loop is None or loop.is_closed() or asyncio._get_running_loop() is loop:
            coro.close()
            if loop is None:
                raise RuntimeError("async component used outside AsyncEmotionalMemory")
            if loop.is_closed():
                raise RuntimeError(
                    "the event loop of the async components is closed; await the "
                    "AsyncEmotionalMemory methods in a running loop"
                )
            raise RuntimeError(
                "the sync engine of an AsyncEmotionalMemory with async components was "
                "called on its event loop's thread, which would hang the loop; await "
                "the AsyncEmotionalMemory method instead"
            )
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        nest = NEST.get()
        if nest is not None and nest.thread != threading.get_ident():
            nest = None  # not the worker (holding the scope lock): a plain wait
        if nest is not None:  # run the component's calls back meanwhile
            future.add_done_callback(lambda _: nest.jobs.put(None))
        while True:  # a loop closed meanwhile never answers: the wait must end then
            try:
                if nest is None:
                    return future.result(timeout=_CLOSED_LOOP_POLL_S)
                job = nest.jobs.get(timeout=_CLOSED_LOOP_POLL_S)
                if job is not None:
                    job()  # a wait of its own may take this call's wake-up
                if future.done():  # (a None otherwise: a wake-up of a call of a job's)
                    return future.result()
                continue
            except (concurrent.futures.TimeoutError, queue.Empty):
                # a stopped loop may run again, unless the interpreter is exiting
                if loop.is_closed() or (_EXITING.is_set() and not loop.is_running()):
                    future.cancel()
                    if inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
                        coro.close()  # never started: no "never awaited" warning
                    raise RuntimeError(
                        "the event loop of the async components closed (or stopped as "
                        "the interpreter exits) before they answered (the operation was "
                        "cancelled and its loop ended)"
                    ) from None


class _AsyncToSyncStore:
    """Sync facade over an :class:`AsyncMemoryStore` for the engine core."""

    def __init__(self, store: AsyncMemoryStore, bridge: _LoopBridge) -> None:
        self.inner = store
        self.bridge = bridge

    def save(self, memory: Memory) -> None:
        self.bridge.run(self.inner.save(memory))

    def get(self, memory_id: str) -> Memory | None:
        return self.bridge.run(self.inner.get(memory_id))

    def update(self, memory: Memory) -> None:
        self.bridge.run(self.inner.update(memory))

    def delete(self, memory_id: str) -> bool:
        return self.bridge.run(self.inner.delete(memory_id))

    def list_all(self) -> list[Memory]:
        return self.bridge.run(self.inner.list_all())

    def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        return self.bridge.run(self.inner.search_by_embedding(embedding, top_k))

    def __len__(self) -> int:
        return self.bridge.run(self.inner.count())

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            result = close()
            if asyncio.iscoroutine(result):
                self.bridge.run(result)


class _AsyncToSyncEmbedder:
    def __init__(self, embedder: AsyncEmbedder, bridge: _LoopBridge) -> None:
        self.inner = embedder
        self.bridge = bridge

    @property
    def identity(self) -> Any:
        """The wrapped embedder's ``identity`` (None without one): the engine checks it
        against the store's (:mod:`emotional_memory.embedder_identity`)."""
        return getattr(self.inner, "identity", None)

    def embed(self, text: str) -> list[float]:
        return self.bridge.run(self.inner.embed(text))

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        batch = getattr(self.inner, "embed_batch", None)
        if not callable(batch):  # ``embed`` alone: one call per text, as the sync engine
            return [self.embed(t) for t in texts]
        return self.bridge.run(batch(texts))


class _AsyncToSyncAppraisal:
    def __init__(self, engine: AsyncAppraisalEngine, bridge: _LoopBridge) -> None:
        self.inner = engine
        self.bridge = bridge

    def appraise(
        self, event_text: str, context: dict[str, Any] | None = None
    ) -> AppraisalVector | GenericAppraisalVector:
        return self.bridge.run(self.inner.appraise(event_text, context))

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            result = close()
            if asyncio.iscoroutine(result):
                self.bridge.run(result)


async def all_or_none(coros: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """The results of ``coros`` run concurrently, in order; the first failure (or a
    cancellation) cancels the others and waits for them before it propagates, with
    its own type (no task, such as a paid appraisal, runs on once the call is over).

    Args:
        coros: The coroutines.

    Returns:
        Their results, in order.
    """
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _is_async_method(obj: object, name: str) -> bool:
    return asyncio.iscoroutinefunction(getattr(obj, name, None))


def _plain_adapter(obj: object, adapter: type, names: Sequence[str]) -> bool:
    """Whether ``obj`` is an ``adapter`` whose class overrides none of ``names``.

    Such an adapter only forwards to its blocking component, which the engine core
    (off the loop) then calls directly; a subclass overriding one of them (auditing,
    metrics, a cache) is called as the async component it is, its overrides kept.
    """
    return isinstance(obj, adapter) and all(
        getattr(type(obj), name, None) is getattr(adapter, name, None) for name in names
    )


def bridge_store(store: Any, bridge: _LoopBridge) -> Any:
    """A sync store for the engine core: sync stores pass through, async ones bridge.

    Args:
        store: A sync ``MemoryStore`` or an ``AsyncMemoryStore`` (async ``save``).
        bridge: Loop bridge used to run the async store's coroutines.

    Returns:
        ``store`` itself when sync, the wrapped store of a :class:`SyncToAsyncStore`
        (called directly from the engine's thread; a subclass overriding one of its
        methods is bridged instead, its overrides called), else a sync facade over it.

    Raises:
        TypeError: an async store without one of ``save, get, update, delete`` (as
            the sync engine refuses a blocking one), or one mixing async and blocking
            methods (named).
    """
    if _plain_adapter(store, SyncToAsyncStore, (*STORE_METHODS, "close")):
        return store.sync
    if not check_consistent("store", store, STORE_METHODS):
        return store
    missing = [m for m in STORE_REQUIRED if not callable(getattr(store, m, None))]
    if missing:
        raise TypeError(
            f"store must provide {', '.join(STORE_REQUIRED)}; got {type(store).__name__} "
            f"without {', '.join(missing)}"
        )
    return _AsyncToSyncStore(store, bridge)


def bridge_embedder(embedder: Any, bridge: _LoopBridge) -> Any:
    """A sync embedder for the engine core: sync ones pass through, async ones bridge.

    Args:
        embedder: A sync ``Embedder`` or an ``AsyncEmbedder`` (async ``embed``).
        bridge: Loop bridge used to run the async embedder's coroutines.

    Returns:
        ``embedder`` itself when sync, the wrapped embedder of a
        :class:`SyncToAsyncEmbedder` overriding none of its methods, else a sync
        facade over it.

    Raises:
        TypeError: an embedder mixing async and blocking methods (named).
    """
    if _plain_adapter(embedder, SyncToAsyncEmbedder, (*EMBEDDER_METHODS, "identity")):
        return embedder.sync
    if check_consistent("embedder", embedder, EMBEDDER_METHODS):
        return _AsyncToSyncEmbedder(embedder, bridge)
    return embedder


def bridge_appraisal(engine: Any, bridge: _LoopBridge) -> Any:
    """A sync appraisal engine for the engine core (None passes through).

    Args:
        engine: A sync or async appraisal engine (async ``appraise``), or None.
        bridge: Loop bridge used to run the async engine's coroutines.

    Returns:
        ``engine`` itself when None or sync, the wrapped engine of a
        :class:`SyncToAsyncAppraisalEngine` overriding none of its methods, else a
        sync facade over it.
    """
    if _plain_adapter(engine, SyncToAsyncAppraisalEngine, (*APPRAISAL_METHODS, "close")):
        return engine.sync
    if engine is not None and _is_async_method(engine, "appraise"):
        return _AsyncToSyncAppraisal(engine, bridge)
    return engine


class _NoTurn(AsyncScopeLocks):
    """The turns of a call nested in an operation holding its scope's: none to hand on."""

    def release(self, path: tuple[str, ...]) -> None:
        """Nothing: the enclosing operation hands its turn on."""


NO_TURN = _NoTurn()


def worker_body(nest: Nest, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """An operation's worker: ``fn``, the calls back of its async components run while
    it waits for them (:class:`~emotional_memory._async_bridge.Nest`)."""
    nest.thread = threading.get_ident()
    try:
        return no_stop_iteration(fn, *args, **kwargs)
    finally:
        nest.close()


def finish_detached(
    locks: AsyncScopeLocks, path: tuple[str, ...], worker: asyncio.Future[Any]
) -> None:
    """Hand the turn on once a worker whose caller was cancelled has finished."""
    if not worker.cancelled():
        worker.exception()  # retrieved: its caller is gone, nobody else will read it
    locks.release(path)


_EXECUTOR: ThreadPoolExecutor | None = None
_EXECUTOR_LOCK = threading.Lock()


def engine_executor() -> ThreadPoolExecutor:
    """The pool the engine cores run on (created on first use, shared).

    Separate from every event loop's default executor, which the bridged coroutines
    (e.g. the ``SyncToAsync*`` adapters' ``asyncio.to_thread``) use: an engine core
    waiting on such a coroutine never holds a thread that coroutine needs.

    Returns:
        The shared executor.
    """
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = ThreadPoolExecutor(
                max_workers=max(32, 4 * (os.cpu_count() or 1)),
                thread_name_prefix="emotional_memory-engine",
            )
            watch_exit()  # a worker waiting on a stopped loop must not block the exit
        return _EXECUTOR
