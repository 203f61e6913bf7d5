"""Schema-driven fuzzing of the MCP tools: arguments from each tool's ``inputSchema``.

Each tool is called (in process, through the SDK's client) with arguments
generated from the input schema it publishes (:func:`from_schema`, for the JSON
Schema keywords the tools' schemas use), and with
malformed ones: wrong types, unknown names, values out of range, NaN and
infinities, lone surrogates, anything JSON. Every call must answer either a result
(whose structured content matches the tool's output schema) or a clean tool error
(the SDK's ``Error executing tool NAME: message``, never its bare crash answer
``Error executing tool NAME`` and no traceback), and an error must leave the
memories and the affective state as they were.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the server extra is not installed")
import jsonschema
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from emotional_memory import EmotionalMemory, InMemoryStore
from emotional_memory.affect import CoreAffect
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.server.mcp_tools import build_mcp, fixed_principal
from emotional_memory.server.service import BatchItem, MemoryService

EXAMPLES = int(os.environ.get("EM_FUZZ_EXAMPLES", "10"))
SCOPE = ("a",)
_TEXT_CHARS = st.characters(categories=["L", "N", "P", "Zs", "Cc", "Cs"])
_TEXT = st.text(_TEXT_CHARS, max_size=12)
# the SDK's client cannot encode a lone surrogate in an object's key, and sends NaN
# and infinities as null: keys are valid text, numbers finite
_KEY = st.text(st.characters(categories=["L", "N", "P", "Zs", "Cc"]), max_size=12)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEY, inner, max_size=4),
    max_leaves=10,
)
"""Any JSON value (lone surrogates and integers past 64 bits included)."""


def from_schema(schema: dict[str, Any], root: dict[str, Any] | None = None) -> Any:
    """A strategy for the values a JSON Schema allows (the keywords pydantic writes for
    the tools' arguments: type, properties, required, additionalProperties, anyOf,
    $ref, minimum, maximum, minLength).

    Args:
        schema: the (sub)schema.
        root: the whole schema ($ref's base); None: ``schema`` itself.

    Returns:
        The strategy.
    """
    root = schema if root is None else root
    if "$ref" in schema:
        return from_schema(root["$defs"][schema["$ref"].rsplit("/", 1)[-1]], root)
    if "anyOf" in schema:
        return st.one_of([from_schema(s, root) for s in schema["anyOf"]])
    kind = schema.get("type")
    low, high = schema.get("minimum"), schema.get("maximum")
    if kind == "object":
        props = schema.get("properties", {})
        if not props and schema.get("additionalProperties", True) is not False:
            return st.dictionaries(_KEY, JSON, max_size=4)
        required = set(schema.get("required", ()))
        return st.fixed_dictionaries(
            {k: from_schema(v, root) for k, v in props.items() if k in required},
            optional={k: from_schema(v, root) for k, v in props.items() if k not in required})
    if kind == "string":
        return st.text(_TEXT_CHARS, min_size=schema.get("minLength", 0), max_size=24)
    if kind == "integer":
        return st.integers(low, high)
    if kind == "number":
        return st.floats(low, high, allow_nan=False, allow_infinity=False)
    if kind == "null":
        return st.none()
    raise AssertionError(f"a schema keyword this fuzzer does not know: {schema}")


class Tools:
    """An MCP client on a service in a portal's event loop, and what it publishes."""

    def __init__(self, portal: BlockingPortal, client: Client, service: MemoryService) -> None:
        self.portal, self.client, self.service = portal, client, service
        listed = portal.call(client.list_tools).tools
        self.inputs = {t.name: t.input_schema for t in listed}
        self.outputs = {t.name: t.output_schema for t in listed}
        self.ids = [portal.call(service.remember, SCOPE, BatchItem(text, {"n": i}, affect)).id
                    for i, (text, affect) in enumerate([
                        ("the demo crashed", CoreAffect(valence=-0.7, arousal=0.8)),
                        ("a walk in the park", CoreAffect(valence=0.6, arousal=0.3))])]

    def snapshot(self) -> Any:
        """The scope's memories (with retrieval counts) and its affective state."""
        memories = self.portal.call(self.service.list, SCOPE, None, 1000, 0)
        state = self.portal.call(self.service.state, SCOPE)
        return ([(m.id, m.content, m.metadata, m.tag.retrieval_count) for m in memories],
                state.model_dump())

    def call(self, name: str, args: dict[str, Any]) -> Any:
        return self.portal.call(self.client.call_tool, name, args)


@pytest.fixture(scope="module")
def tools() -> Iterator[Tools]:
    service = MemoryService(EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16)))
    with start_blocking_portal() as portal, \
            portal.wrap_async_context_manager(
                Client(build_mcp(service, fixed_principal(SCOPE)))) as client:
        yield Tools(portal, client, service)


def _malformed(tools: Tools, name: str) -> st.SearchStrategy[dict[str, Any]]:
    """Arguments ``name``'s schema does not (necessarily) allow: a valid call with
    one argument replaced by any JSON value, or added under an unknown name; or any
    JSON object."""
    schema = tools.inputs[name]
    names = [*schema.get("properties", {}), "bogus", "Content", ""]
    valid = from_schema(schema)
    replaced = st.builds(lambda args, key, value: {**args, key: value},
                         valid, st.sampled_from(names), JSON)
    anything = st.dictionaries(st.sampled_from(names) | _KEY, JSON, max_size=5)
    return replaced | anything


def _arguments(tools: Tools, name: str) -> st.SearchStrategy[dict[str, Any]]:
    valid = from_schema(tools.inputs[name])
    if name == "forget":  # now and then a memory that exists
        valid = valid | st.sampled_from(tools.ids).map(lambda i: {"id": i})
    return valid | _malformed(tools, name)


def _text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


@pytest.mark.parametrize("name", ["remember", "recall", "forget", "mood", "set_mood"])
def test_every_tool_answers_a_result_or_a_clean_error(
    tools: Tools, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert name in tools.inputs

    @settings(max_examples=EXAMPLES * 4, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(args=_arguments(tools, name))
    def run(args: dict[str, Any]) -> None:
        caplog.clear()
        before = tools.snapshot()
        with caplog.at_level(logging.INFO):
            result = tools.call(name, args)
        text = _text(result)
        crashes = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert not crashes, (args, [r.getMessage() for r in crashes])
        assert "Traceback" not in text, (args, text)
        if result.is_error:
            assert text.startswith(f"Error executing tool {name}: "), (args, text)
            assert tools.snapshot() == before, (args, text)
        else:
            assert result.structured_content is not None, (args, text)
            jsonschema.validate(result.structured_content, tools.outputs[name])
            valid = _is_valid(tools.inputs[name], args)
            assert valid, ("a call outside the input schema succeeded", args, text)

    run()


def _is_valid(schema: dict[str, Any], args: dict[str, Any]) -> bool:
    """Whether ``args`` fit the schema."""
    return bool(jsonschema.Draft202012Validator(schema).is_valid(args))
