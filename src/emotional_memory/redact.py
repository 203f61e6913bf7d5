"""Secrets out of text: one :func:`redact` for every URL and DSN form.

Every message, repr and log line that shows a store or state-store address passes it
through :func:`redact` first.
"""

from __future__ import annotations

import re

__all__ = ["MASK", "redact"]

MASK = "***"

# the words that make a parameter name a secret's: the name is one of them or ends in
# one (``sslpassword``, ``access_token``, ``client_secret``)
_SECRET_WORDS = ("password", "passwd", "pwd", "api_key", "api-key", "apikey", "token",
                 "secret")
_SECRET_KEYS = r"[\w.-]*?(?:" + "|".join(re.escape(w) for w in _SECRET_WORDS) + ")"


def _encodable(word: str) -> str:
    """A pattern for ``word`` where any character may also be percent-encoded (libpq
    decodes URI query keys, so ``pass%77ord`` names the password)."""
    def one(ch: str) -> str:
        codes = {f"%{ord(c):02x}" for c in {ch.lower(), ch.upper()}}
        return "(?:" + "|".join([re.escape(ch), *sorted(codes)]) + ")"
    return "".join(one(ch) for ch in word)


_ENCODED_SECRET_KEYS = (
    r"(?:[\w.-]|%[0-9a-f]{2})*?(?:" + "|".join(_encodable(w) for w in _SECRET_WORDS) + ")"
)

# libpq ``key=value`` keywords: a quoted value (backslash escapes) or a bare word
_KEYWORD = re.compile(
    r"(?i)(^|[\s;])(" + _SECRET_KEYS + r"\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s;]*)"
)
# URL query / fragment parameters (the '=' may itself be percent-encoded)
_QUERY = re.compile(r"(?i)([?&;#]" + _ENCODED_SECRET_KEYS + r"(?:=|%3d))[^&#\s]*")
# URL user-info: ``scheme://user:secret@`` (the user may hold an unescaped '@', the
# secret ':' or '@': it runs up to the last '@' before the host). The scheme starts
# a word: a match tried at every letter of a long word rescanned it (quadratic time).
_USERINFO = re.compile(r"(?i)((?<![a-z0-9+.-])[a-z][a-z0-9+.-]*://[^/:\s]*):[^/\s]*@")


def redact(text: str) -> str:
    """``text`` with every password-like secret replaced by ``***``.

    Covers URL user-info (``postgresql://u:pw@host``, ``redis://:pw@host``), secret
    query and fragment parameters (``?password=``, ``&sslpassword=``, ``?api_key=``,
    ``#access_token=``: any name that is or ends in password, passwd, pwd, api key,
    token or secret, also when percent-encoded) and libpq keywords (``password=pw``,
    ``password='p w'``), anywhere in the text.

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
