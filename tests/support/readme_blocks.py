"""The README's integration examples, extracted so tests can run them as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def integration_examples() -> dict[str, str]:
    """``first import line -> code`` for each python block of the Integrations section."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Integrations (optional extras)", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    out: dict[str, str] = {}
    for code in blocks:
        modules = re.findall(r"^from (emotional_memory\.[\w.]+) import", code, flags=re.M)
        out[modules[-1] if modules else code.splitlines()[0]] = code
    return out
