"""LangChain adapters (extra ``langchain``: ``pip install 'emotional-memory-jax[langchain]'``).

- :class:`EmotionalMemoryChatHistory`: a ``BaseChatMessageHistory`` whose messages
  also feed an :class:`~emotional_memory.engine.EmotionalMemory`. A *message policy*
  decides per message whether it becomes a retrievable memory (``"store"``), only
  moves the affective state (``"state_only"``) or is just kept in the transcript
  (``"ignore"``).
- :class:`EmotionalMemoryRetriever`: a ``BaseRetriever`` over the engine's
  mood-aware retrieval; each ``Document`` carries the memory's score and the
  breakdown of its six signals in ``metadata``.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, TypeAlias

from pydantic import ConfigDict, Field, PrivateAttr, field_validator

from emotional_memory._extras import install_hint

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.documents import Document
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
    from langchain_core.retrievers import BaseRetriever
except ImportError as exc:  # the README's import path, without the extra
    raise ImportError(
        f"the LangChain adapters need langchain-core: {install_hint('langchain')}"
    ) from exc

from emotional_memory.engine import EmotionalMemory
from emotional_memory.integrations._engine import check_sync_engine
from emotional_memory.retrieval import RetrievalExplanation

__all__ = [
    "EmotionalMemoryChatHistory",
    "EmotionalMemoryRetriever",
    "MessageHandlingMode",
    "MessagePolicy",
    "explanation_to_document",
    "recommended_conversation_policy",
    "store_all_messages",
]

MessageHandlingMode: TypeAlias = Literal["store", "state_only", "ignore"]
"""What the chat history does with a message besides keeping it in the transcript."""

MessagePolicy: TypeAlias = Callable[[BaseMessage], MessageHandlingMode]
"""Chooses the :data:`MessageHandlingMode` of each message."""

_MODES = ("store", "state_only", "ignore")
_COMMAND_WORDS = ("recall", "remember")
_ENGINE_METHODS = ("encode", "observe", "list_all", "delete", "reset_state")


def _text(message: BaseMessage) -> str:
    """The message content as one string (multimodal blocks are ``str()``-ed)."""
    content = message.content
    return content if isinstance(content, str) else str(content)


def _role(message: BaseMessage) -> str:
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    return str(message.type)


def store_all_messages(message: BaseMessage) -> MessageHandlingMode:
    """Policy: every message becomes a retrievable memory.

    Args:
        message: Any message.

    Returns:
        Always ``"store"``.
    """
    del message
    return "store"


def _is_control_message(content: str) -> bool:
    """Whether ``content`` is a ``recall`` / ``remember`` command rather than an event.

    As in the original: after stripping and lower-casing, the text is the command word
    alone or the word followed by a space (``"remember\\nI like cats"`` is an event).
    """
    text = content.strip().lower()
    return any(text == word or text.startswith(word + " ") for word in _COMMAND_WORDS)


_coerce_content = _text


def recommended_conversation_policy(message: BaseMessage) -> MessageHandlingMode:
    """Policy for an agent that remembers what the user says.

    User messages are stored, except ``recall`` / ``remember`` commands (which are
    requests, not events); assistant messages only move the affective state; system,
    tool and other messages are ignored.

    Args:
        message: The message to classify.

    Returns:
        ``"store"``, ``"state_only"`` or ``"ignore"``.
    """
    if isinstance(message, AIMessage):
        return "state_only"
    if isinstance(message, HumanMessage):
        return "ignore" if _is_control_message(_text(message)) else "store"
    return "ignore"


def _message_for(role: str, content: str) -> BaseMessage:
    if role == "assistant":
        return AIMessage(content=content)
    if role == "system":
        return SystemMessage(content=content)
    return HumanMessage(content=content)


class EmotionalMemoryChatHistory(BaseChatMessageHistory):
    """A LangChain chat history backed by an :class:`EmotionalMemory`.

    The transcript (:attr:`messages`) holds every message added, in order. Stored
    messages are encoded with ``metadata={"role": ...}``, so a new history over the
    same (durable) store starts with the stored part of the transcript.
    """

    def __init__(
        self,
        em: EmotionalMemory,
        *,
        message_policy: MessagePolicy | None = None,
        scope: Sequence[str] | None = None,
    ) -> None:
        """Wrap an engine.

        Args:
            em: The engine (store, embedder, appraisal already configured).
            message_policy: Chooses what happens to each message; default
                :func:`store_all_messages`.
            scope: Optional scope path: the history is then the engine view
                ``em.scoped(*scope)`` (one conversation or user per scope; its
                transcript, mood and ``clear`` are that scope's alone).

        Raises:
            TypeError: When ``em`` lacks an engine method (``scoped`` too, given a
                ``scope``) or has coroutine ones (an ``AsyncEmotionalMemory``),
                ``message_policy`` is not callable or ``scope`` not a sequence.
            ValueError: A malformed ``scope`` part.
        """
        check_sync_engine(em, _ENGINE_METHODS if scope is None else (*_ENGINE_METHODS, "scoped"))
        if message_policy is not None and not callable(message_policy):
            raise TypeError("message_policy must be callable")
        if scope is not None:
            if isinstance(scope, str):
                scope = (scope,)
            if not isinstance(scope, Sequence):
                kind = type(scope).__name__
                raise TypeError(f"scope must be a str or a sequence of str, got {kind}")
            em = em.scoped(*scope)
        self._em = em
        self._message_policy: MessagePolicy = message_policy or store_all_messages
        params = inspect.signature(em.observe).parameters
        self._observe_takes_metadata = "metadata" in params
        self._messages: list[BaseMessage] = self._stored_transcript()

    @property
    def em(self) -> EmotionalMemory:
        """The engine this history feeds."""
        return self._em

    def _stored_transcript(self) -> list[BaseMessage]:
        memories = sorted(self._em.list_all(), key=lambda m: m.tag.timestamp)  # stable
        return [_message_for(str(m.metadata.get("role", "user")), m.content) for m in memories]

    @property
    def messages(self) -> list[BaseMessage]:
        """A copy of the transcript, oldest first."""
        return list(self._messages)

    @messages.setter
    def messages(self, value: Sequence[BaseMessage]) -> None:
        """Replace the transcript: :meth:`clear`, then add each message.

        The messages are checked first (as in :meth:`add_messages`): a bad one raises
        before anything is cleared.
        """
        planned = self._planned(value)
        self.clear()
        for message, mode in planned:
            self._apply(message, mode)

    def _mode(self, message: object, name: str) -> MessageHandlingMode:
        """The policy's mode for ``message``, checked (``name`` names it in errors).

        Raises:
            TypeError: ``message`` is not a ``BaseMessage``.
            ValueError: The policy returns an unknown mode, or the engine would refuse
                the content of a message it encodes or observes (``name.content``).
        """
        if not isinstance(message, BaseMessage):
            raise TypeError(f"{name} must be a LangChain BaseMessage, got {type(message).__name__}")
        mode = self._message_policy(message)
        if mode not in _MODES:
            raise ValueError(
                f"unknown message handling mode {mode!r} for {name}; expected one of {_MODES}"
            )
        check_content = getattr(self._em, "check_content", None)  # a duck engine may lack it
        if mode != "ignore" and callable(check_content):
            check_content(_text(message), f"{name}.content")
        return mode

    def _planned(
        self, messages: Sequence[BaseMessage]
    ) -> list[tuple[BaseMessage, MessageHandlingMode]]:
        """Each message with its mode, every one checked before any is applied.

        Raises:
            TypeError: ``messages`` is not a sequence of ``BaseMessage`` (the bad one
                named ``messages[i]``).
            ValueError: The policy returns an unknown mode, or content the engine
                refuses (over ``max_content_length``, not valid Unicode).
        """
        if isinstance(messages, (str, BaseMessage)) or not isinstance(messages, Iterable):
            raise TypeError(
                f"messages must be a sequence of BaseMessage, got {type(messages).__name__}"
            )
        listed = list(messages)
        return [(m, self._mode(m, f"messages[{i}]")) for i, m in enumerate(listed)]

    def _apply(self, message: BaseMessage, mode: MessageHandlingMode) -> None:
        content = _text(message)
        metadata = {"role": _role(message)}
        if mode == "store":
            self._em.encode(content, metadata=metadata)
        elif mode == "state_only":
            if self._observe_takes_metadata:
                self._em.observe(content, metadata=metadata)
            else:
                self._em.observe(content)
        self._messages.append(message)

    def add_message(self, message: BaseMessage) -> None:
        """Append ``message`` and apply the policy to it.

        Args:
            message: The message.

        Raises:
            TypeError: ``message`` is not a ``BaseMessage`` (nothing is added).
            ValueError: When the policy returns an unknown mode (the message is not
                added).
        """
        self._apply(message, self._mode(message, "message"))

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Add several messages in order (see :meth:`add_message`).

        Every message and its policy mode are checked first: a bad one adds none.

        Args:
            messages: The messages.

        Raises:
            TypeError: A message that is not a ``BaseMessage`` (named ``messages[i]``).
            ValueError: When the policy returns an unknown mode, or content the engine
                refuses (named ``messages[i].content``).
        """
        for message, mode in self._planned(messages):
            self._apply(message, mode)

    def add_user_message(self, message: HumanMessage | str) -> None:
        """Add a user message.

        Args:
            message: Its text (or a ready ``HumanMessage``).
        """
        self.add_message(message if isinstance(message, HumanMessage) else HumanMessage(message))

    def add_ai_message(self, message: AIMessage | str) -> None:
        """Add an assistant message.

        Args:
            message: Its text (or a ready ``AIMessage``).
        """
        self.add_message(message if isinstance(message, AIMessage) else AIMessage(message))

    def clear(self) -> None:
        """Forget everything: the transcript, every memory in the engine, its state."""
        self._messages = []
        for memory in self._em.list_all():
            self._em.delete(memory.id)
        self._em.reset_state()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(messages={len(self._messages)})"


def explanation_to_document(explanation: RetrievalExplanation) -> Document:
    """A LangChain ``Document`` for one retrieval result.

    Args:
        explanation: One result of ``EmotionalMemory.retrieve_with_explanations``.

    Returns:
        A Document with the memory's content and id; ``metadata`` holds the memory's
        own metadata plus ``memory_id``, ``score``, ``breakdown`` (weights, raw and
        weighted signals, total), ``activation_level``, ``pass1_rank``,
        ``pass2_rank``, ``valence``, ``arousal``, ``emotion_label`` and ``timestamp``
        (these win over a metadata key of the same name: keep your own keys apart,
        e.g. under a prefix, when they matter).
    """
    memory = explanation.memory
    tag = memory.tag
    label = tag.emotion_label
    metadata: dict[str, Any] = dict(memory.metadata)
    metadata.update(
        {
            "memory_id": memory.id,
            "score": float(explanation.score),
            "breakdown": explanation.breakdown.model_dump(mode="json"),
            "activation_level": float(explanation.activation_level),
            "pass1_rank": explanation.pass1_rank,
            "pass2_rank": explanation.pass2_rank,
            "valence": float(tag.core_affect.valence),
            "arousal": float(tag.core_affect.arousal),
            "emotion_label": None if label is None else label.model_dump(mode="json"),
            "timestamp": tag.timestamp.isoformat(),
        }
    )
    return Document(page_content=memory.content, metadata=metadata, id=memory.id)


class EmotionalMemoryRetriever(BaseRetriever):
    """A LangChain retriever over :meth:`EmotionalMemory.retrieve_with_explanations`.

    Retrieval has the engine's side effects (reconsolidation, Hebbian links, ...),
    exactly as calling the engine directly.

    Attributes:
        memory: The engine to retrieve from.
        top_k: Number of documents per query.
        scope: Optional scope path: retrieve through ``memory.scoped(*scope)``.
        where: Optional filter (:mod:`emotional_memory.filters`) deciding the
            candidates of every query.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, validate_assignment=True)

    memory: EmotionalMemory
    top_k: int = Field(default=4, ge=1)
    scope: tuple[str, ...] | None = None
    where: dict[str, Any] | None = None
    _view_cache: tuple[EmotionalMemory, tuple[str, ...] | None, EmotionalMemory] | None = (
        PrivateAttr(default=None)
    )
    _view_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @field_validator("top_k", mode="before")
    @classmethod
    def _top_k_an_int(cls, value: Any) -> Any:
        """An int as the engine's ``retrieve`` takes it (numpy integers too): ``True``,
        ``2.0`` or ``"3"`` is a mistake, not a number of documents."""
        from emotional_memory._validation import integer

        return integer("top_k", value)

    @field_validator("scope", mode="before")
    @classmethod
    def _scope_from_str(cls, value: Any) -> Any:
        """A single string is a one-part scope, as in the chat history; an empty path
        is refused as ``scoped()`` refuses it (None is the whole engine)."""
        if isinstance(value, str):
            return (value,)
        if value is not None and isinstance(value, Sequence) and len(value) == 0:
            raise ValueError("scope needs at least one path part (None for the whole engine)")
        return value

    @field_validator("scope")
    @classmethod
    def _check_scope_parts(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        """Refuse a part ``scoped()`` refuses (empty, NUL, too long) when set, so an
        assignment cannot leave a path every later query fails on."""
        from emotional_memory.models import scope_path

        return value if value is None else scope_path("scope", value)

    @field_validator("where")
    @classmethod
    def _check_where(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """Reject a malformed filter when set (construction or assignment)."""
        from emotional_memory.filters import parse_where

        parse_where(value)
        return value

    def _view(self) -> EmotionalMemory:
        """The engine (view) queries go to: ``memory.scoped(*scope)`` or ``memory``.

        The view is built once per (``memory``, ``scope``) pair and kept, so it keeps
        its own mood across queries; assigning another ``memory`` or ``scope`` (or a
        ``model_copy`` that updates them) builds the view of the new pair.
        """
        with self._view_lock:  # one view per pair, also under batch()'s threads
            memory, scope = self.memory, self.scope
            cached = self._view_cache
            if cached is not None and cached[0] is memory and cached[1] == scope:
                return cached[2]
            view = memory.scoped(*scope) if scope else memory
            self._view_cache = (memory, scope, view)
            return view

    def model_post_init(self, context: Any, /) -> None:
        """Build the view at once, so a malformed ``scope`` fails at construction."""
        self._view()

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        """The ``top_k`` memories for ``query`` as Documents, best first."""
        del run_manager
        results = self._view().retrieve_with_explanations(
            query, top_k=self.top_k, where=self.where
        )
        return [explanation_to_document(e) for e in results]
