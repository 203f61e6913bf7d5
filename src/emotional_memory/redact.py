"""Secrets out of text: one :func:`redact` for every URL and DSN form.

Every message, repr and log line that shows a store or state-store address passes it
through :func:`redact` first.
"""

from __future__ import annotations

import re

__all__ = ["MASK", "redact"]

MASK = "***"

# parameter names whose values are secrets, in a URL query or as libpq keywords
_SECRET_KEYS = r"(?:password|passwd|pwd|sslpassword|api[_-]?key|token|secret)"

# libpq ``key=value`` keywords: a quoted value (backslash escapes) or a bare word
_KEYWORD = re.compile(
    r"(?i)(^|[\s;])(" + _SECRET_KEYS + r"\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s;]*)"
)
# URL query / fragment parameters
_QUERY = re.compile(r"(?i)([?&;]" + _SECRET_KEYS + r"=)[^&#\s]*")
# URL user-info: ``scheme://user:secret@`` (the secret may hold ':' or an unescaped '@'
# up to the last '@' before the host)
_USERINFO = re.compile(r"(?i)([a-z][a-z0-9+.-]*://[^/:@\s]*):[^/\s]*@")


def redact(text: str) -> str:
    """``text`` with every password-like secret replaced by ``***``.

    Covers URL user-info (``postgresql://u:pw@host``, ``redis://:pw@host``), secret
    query parameters (``?password=``, ``&sslpassword=``, ``?api_key=``, ``?token=``)
    and libpq keywords (``password=pw``, ``password='p w'``), anywhere in the text.

    Args:
        text: a URL, a DSN, or a message containing some.

    Returns:
        The text with each secret value masked; everything else kept.
    """
    if not isinstance(text, str):
        text = str(text)
    out = _USERINFO.sub(lambda m: f"{m.group(1)}:{MASK}@", text)
    out = _QUERY.sub(lambda m: f"{m.group(1)}{MASK}", out)
    return _KEYWORD.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", out)
