"""A scripted stand-in for the ``(prompt, json_schema) -> str`` LLM callables in tests."""

from __future__ import annotations

from typing import Any


class FakeLLM:
    """Callable returning canned answers (or raising) and recording every call.

    With one answer it is returned on every call; with several they are used in turn.
    An answer that is an exception is raised; any other value (even a non-``str``) is
    returned as it is.
    """

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, prompt: str, schema: dict[str, Any]) -> str:
        self.calls.append((prompt, schema))
        answer = self.answers[0] if len(self.answers) == 1 else self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer
