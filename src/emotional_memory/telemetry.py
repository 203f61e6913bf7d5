"""OpenTelemetry spans around the engine's work (extra ``otel``).

With ``opentelemetry-api`` installed, :func:`traced_span` opens a span on the tracer
named ``"emotional_memory"`` of the global tracer provider (configure your own
``TracerProvider`` and exporter as usual). Without it, every helper is a no-op
(:class:`contextlib.nullcontext`). A body that raises records the exception on the
span and sets its status to ERROR, then the exception propagates.

The engine emits ``emotional_memory.encode`` / ``.encode_batch`` / ``.observe``
(``content_length`` / ``batch_size``), ``.retrieve`` / ``.retrieve_with_explanations``
(``query_length``, ``top_k``, ``store_size``), ``.embed``,
``.store.search_by_embedding`` (``limit``), ``.elaborate`` (``memory_id``) and
``.prune`` (``threshold``) spans, as the original library does.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

__all__ = ["RETRIEVE_ATTRIBUTES", "TRACER_NAME", "AttributeRule", "traced", "traced_span"]

TRACER_NAME = "emotional_memory"
"""Instrumentation scope name of every span this package emits."""
_TRACER_NAME = TRACER_NAME

_F = TypeVar("_F", bound=Callable[..., Any])

_tracer: Any | None = None
_otel_unavailable = False
_SCALARS = (str, bool, int, float)
_INT64 = range(-(2**63), 2**63)  # OTLP attribute integers are signed 64-bit


def _get_tracer() -> Any | None:
    """The package's tracer, or None when ``opentelemetry`` is not installed."""
    global _tracer, _otel_unavailable
    if _tracer is not None:
        return _tracer
    if _otel_unavailable:
        return None
    try:
        trace = importlib.import_module("opentelemetry.trace")
    except ImportError:
        _otel_unavailable = True
        return None
    # The global provider may be set later: the API's proxy tracer follows it.
    _tracer = trace.get_tracer(TRACER_NAME)
    return _tracer


def _live_tracer() -> Any | None:
    """The tracer when spans can go anywhere, else None (the no-op fast path).

    With OpenTelemetry installed but no tracer provider configured (the API's default
    proxy provider, or the no-op one), spans would be discarded: skip them entirely.
    """
    tracer = _get_tracer()
    if tracer is None:
        return None
    trace = sys.modules.get("opentelemetry.trace")
    if (
        trace is not None
        and isinstance(tracer, trace.ProxyTracer)
        and isinstance(
            trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        )
    ):
        return None
    return tracer


def _reset_tracer_cache() -> None:
    """Forget the cached tracer (tests that install another provider call this)."""
    global _tracer, _otel_unavailable
    _tracer = None
    _otel_unavailable = False


def _fits(value: Any) -> bool:
    """A scalar an exporter can hold (an int beyond signed 64 bits it drops)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value in _INT64
    return isinstance(value, _SCALARS)


def _otel_value(value: Any) -> Any:
    """``value`` as an OpenTelemetry attribute value (scalars, homogeneous lists, str).

    An int beyond signed 64 bits (or a list holding one) becomes its ``str``.
    """
    if _fits(value):
        return value
    if isinstance(value, Sequence) and all(_fits(v) for v in value):
        items = list(value)
        if len({type(v) for v in items}) <= 1:
            return items
    return str(value)


def traced_span(
    name: str, attributes: Mapping[str, Any] | None = None
) -> contextlib.AbstractContextManager[Any]:
    """A context manager running its body in an OpenTelemetry span.

    Args:
        name: Span name, e.g. ``"emotional_memory.encode"``.
        attributes: Span attributes; None values are dropped, values OpenTelemetry
            cannot hold (integers beyond signed 64 bits included) are converted to
            ``str``.

    Returns:
        A context manager yielding the span, or a no-op one yielding None when
        OpenTelemetry is not installed or no tracer provider is configured.
    """
    tracer = _live_tracer()
    if tracer is None:
        return contextlib.nullcontext(None)
    attrs = (
        {k: _otel_value(v) for k, v in attributes.items() if v is not None} if attributes else None
    )
    return _recording_span(tracer, name, attrs)


@contextlib.contextmanager
def _recording_span(tracer: Any, name: str, attrs: dict[str, Any] | None) -> Iterator[Any]:
    """A current span; an exception is recorded, sets status ERROR(str(exc)), propagates."""
    with tracer.start_as_current_span(
        name, attributes=attrs, record_exception=False, set_status_on_exception=False
    ) as span:
        try:
            yield span
        except Exception as exc:
            _mark_failed(span, exc)
            raise


def _mark_failed(span: Any, exc: Exception) -> None:
    """Record ``exc`` on ``span``, status ERROR(str(exc)). One whose ``str()`` raises
    gets its type name as the status, no event (recording it would raise in its place)."""
    try:
        description = str(exc)
    except Exception:
        description = type(exc).__name__
    else:
        span.record_exception(exc)
    trace = importlib.import_module("opentelemetry.trace")
    span.set_status(trace.Status(trace.StatusCode.ERROR, description))


AttributeRule = tuple[str, Callable[[Any], Any]]
"""``(parameter name, function of its value)``: how :func:`traced` derives an attribute."""


RETRIEVE_ATTRIBUTES: dict[str, AttributeRule] = {
    "query_length": ("query", len),
    "top_k": ("top_k", int),
    "store_size": ("self", len),
}
"""The attributes of the engine's retrieval spans (``store_size``: the memories the
engine sees, a scoped view's own, not its whole store's)."""


def traced(name: str, **attributes: AttributeRule) -> Callable[[_F], _F]:
    """Decorator: run every call of the function inside ``traced_span(name)``.

    The wrapped function keeps its name, docstring and signature; when OpenTelemetry
    is not installed it is called directly. Attributes are computed only for spans
    that record (a configured SDK), and one that cannot be computed (bad input the
    function itself will reject) is left out.

    Args:
        name: Span name.
        **attributes: ``attribute=(parameter, function)``, e.g.
            ``content_length=("content", len)``.

    Returns:
        The decorator.
    """

    def decorate(fn: _F) -> _F:
        signature = inspect.signature(fn)
        rules = dict(attributes)

        def span_attributes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return {}
            bound.apply_defaults()
            out: dict[str, Any] = {}
            for key, (param, derive) in rules.items():
                try:
                    value = derive(bound.arguments[param])
                except Exception:
                    continue
                out[key] = _otel_value(value)
            return out

        def annotate(span: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if rules and span is not None and span.is_recording():
                span.set_attributes(span_attributes(args, kwargs))

        if inspect.iscoroutinefunction(fn):
            # The span must cover the awaited body, not just the coroutine's creation.
            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                if _live_tracer() is None:
                    return await fn(*args, **kwargs)
                with traced_span(name) as span:
                    annotate(span, args, kwargs)
                    return await fn(*args, **kwargs)

            return cast(_F, async_wrapper)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if _live_tracer() is None:
                return fn(*args, **kwargs)
            with traced_span(name) as span:
                annotate(span, args, kwargs)
                return fn(*args, **kwargs)

        return cast(_F, wrapper)

    return decorate
