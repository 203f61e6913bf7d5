"""Secrets out of text: one :func:`redact` for every URL and DSN form.

Every message, repr and log line that shows a store or state-store address passes it
through :func:`redact` first.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["MASK", "address_secrets", "redact", "redact_address"]

MASK = "***"

# the words that make a parameter name a secret's: the name is one of them or ends in
# one (``sslpassword``, ``access_token``, ``client_secret``)
_SECRET_WORDS = ("password", "passwd", "pwd", "api_key", "api-key", "apikey", "token",
                 "secret", "credential", "credentials")
# URL query parameters also: ``?key=`` (an API key in the URL), ``?auth=``, signed
# URLs' ``?signature=`` / ``?sig=`` (not as words in running text: ``key=`` names
# state keys there)
_QUERY_WORDS = (*_SECRET_WORDS, "key", "auth", "signature", "sig")
_SECRET_KEYS = r"[\w.-]*?(?:" + "|".join(re.escape(w) for w in _SECRET_WORDS) + ")"


def _encodable(word: str) -> str:
    """A pattern for ``word`` where any character may also be percent-encoded (libpq
    decodes URI query keys, so ``pass%77ord`` names the password)."""
    def one(ch: str) -> str:
        codes = {f"%{ord(c):02x}" for c in {ch.lower(), ch.upper()}}
        return "(?:" + "|".join([re.escape(ch), *sorted(codes)]) + ")"
    return "".join(one(ch) for ch in word)


_ENCODED_SECRET_KEYS = (
    r"(?:[\w.-]|%[0-9a-f]{2})*?(?:" + "|".join(_encodable(w) for w in _QUERY_WORDS) + ")"
)

# libpq ``key=value`` keywords: a quoted value (backslash escapes) or a bare word
_KEYWORD = re.compile(
    r"(?i)(^|[\s;])(" + _SECRET_KEYS + r"\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s;]*)"
)
# URL query / fragment parameters (the '=' may itself be percent-encoded)
_QUERY = re.compile(r"(?i)([?&;#]" + _ENCODED_SECRET_KEYS + r"(?:=|%3d))[^&#\s]*")
# HTTP credentials in text: ``Authorization: Bearer <token>``, ``Basic <b64>``
# (a word of 8 or more characters holding a digit, a symbol or both cases: "the bearer
# of bad news" and "basic authentication" stay)
_SCHEME_CREDENTIAL = re.compile(r"(?i)\b((?:bearer|basic)\s+)([\w.~+/=-]{8,})")


def _credential(m: re.Match[str]) -> str:
    value = m.group(2)
    token_like = any(not c.isalpha() for c in value) or (
        any(c.isupper() for c in value) and any(c.islower() for c in value)
    )
    return f"{m.group(1)}{MASK}" if token_like else m.group(0)
# URL user-info: ``scheme://user:secret@`` (the user may hold an unescaped '@', the
# secret ':' or '@': it runs up to the last '@' before the host). The scheme starts
# a word: a match tried at every letter of a long word rescanned it (quadratic time).
# A slash too many after the scheme (``redis:///:pw@host``) leaves it in the path.
_USERINFO = re.compile(r"(?i)((?<![a-z0-9+.-])[a-z][a-z0-9+.-]*:///*[^/:\s]*):[^/\s]*@")


# A lone address's user-info password may hold a raw '/', '?' or space (a generated
# password, not percent-encoded): libpq and urllib then read another host or fail, and
# their messages quote pieces of it. Seen alone, the whole address is known: the
# secret runs from the first ':' after the user to the last '@' before any '?'/'#'
# (first pattern) or to the last '@' before any '/' (second, a password with '?').
# When neither matches (a password with a '/' and a '?' or '#'), it runs to the last
# '@' of the address (_LONE_USERINFO_ANY: more than the password when a query holds
# an '@' too, never less). A slash too many after the scheme (``redis:///:pw@host``,
# as sqlite:///) or too few (``https:/u:pw@host``, none) puts the user-info in the
# path, where drivers quote it: masked too.
_LONE_USERINFO = (
    re.compile(r"(?is)^(\s*[a-z][a-z0-9+.-]*:/*[^/:\s]*):([^?#]*)@"),
    re.compile(r"(?is)^(\s*[a-z][a-z0-9+.-]*:/*[^/:\s]*):([^/\s]*)@"),
)
_LONE_USERINFO_ANY = re.compile(r"(?is)^(\s*[a-z][a-z0-9+.-]*:/*[^/:\s]*):(.*)@")


def _lone_userinfo(address: str) -> list[re.Match[str]]:
    """The matches of a lone address's user-info password (see _LONE_USERINFO)."""
    found = [m for m in (p.match(address) for p in _LONE_USERINFO) if m]
    if not found:
        last = _LONE_USERINFO_ANY.match(address)
        found = [last] if last else []
    return found
# a lone address's secret query parameter, its value up to the next '&' or '#'
# (spaces included: libpq quotes such a value back in its error)
_LONE_QUERY = re.compile(r"(?i)([?&;#]" + _ENCODED_SECRET_KEYS + r"(?:=|%3d))([^&#]*)")


def _unquoted(value: str) -> str:
    """A libpq keyword value without its quotes and backslash escapes."""
    if value.startswith("'"):
        value = re.sub(r"\\(.)", r"\1", value[1:].removesuffix("'"))
    return value


def address_secrets(address: str) -> tuple[str, ...]:
    """Every secret value in one store or service address, as written and decoded.

    A driver's error about the address may quote a secret in either form (libpq's
    ``invalid percent-encoded token: "pw%zz"``); pass these to :func:`redact`'s
    ``secrets`` to mask them in such messages.

    Args:
        address: one URL or libpq conninfo string (nothing else around it).

    Returns:
        The user-info password, the secret query parameters' and libpq keywords'
        values (also percent-decoded, or unquoted), and the tails of a password
        after each of its '/', '?' and '#' (with the '@'), longest first; empty when
        none.
    """
    if not isinstance(address, str):
        return ()
    found: set[str] = set()
    for m in _lone_userinfo(address):
        found.add(m.group(2))
        # a driver reading the password's '/', '?' or '#' as the address's next part
        # quotes what follows it, up to the host: each such tail with its '@'
        found.update(m.group(2)[i + 1:] + "@" for i, ch in enumerate(m.group(2))
                     if ch in "/?#" and i + 1 < len(m.group(2)))
    found.update(m.group(2) for m in _LONE_QUERY.finditer(address))
    found.update(_unquoted(m.group(3)) for m in _KEYWORD.finditer(address))
    found.update(m.group(3) for m in _KEYWORD.finditer(address))
    found |= {unquote(value) for value in found}
    found -= {"", MASK}
    return tuple(sorted(found, key=lambda s: (-len(s), s)))


def redact_address(address: str) -> str:
    """One store or service address (URL or DSN) with every secret masked.

    :func:`redact`, and also a user-info password holding a raw ``/``, ``?`` or
    space, and a secret query value holding spaces, which in running text could not
    be told from what follows them.

    Args:
        address: one URL or libpq conninfo string.

    Returns:
        The address with each secret value replaced by ``***``.
    """
    if not isinstance(address, str):
        address = str(address)
    out = address
    matches = _lone_userinfo(address)
    if matches:  # the widest reading of the password
        m = max(matches, key=lambda m: m.end())
        out = f"{m.group(1)}:{MASK}@{address[m.end():]}"
    out = _LONE_QUERY.sub(lambda m: f"{m.group(1)}{MASK}", out)
    return redact(out)


def redact(text: str, secrets: tuple[str, ...] | list[str] = ()) -> str:
    """``text`` with every password-like secret replaced by ``***``.

    Covers URL user-info (``postgresql://u:pw@host``, ``redis://:pw@host``), secret
    query and fragment parameters (``?password=``, ``&sslpassword=``, ``?api_key=``,
    ``#access_token=``: any name that is or ends in password, passwd, pwd, api key,
    token, secret or credential(s), also when percent-encoded; in URL queries also
    key, auth, signature and sig: ``?key=``), HTTP credentials (``Bearer <token>``,
    ``Basic <value>``) and libpq keywords (``password=pw``, ``password='p w'``),
    anywhere in the text.

    Args:
        text: a URL, a DSN, or a message containing some.
        secrets: known secret values (:func:`address_secrets` of the address the
            message is about) masked wherever they occur, first.

    Returns:
        The text with each secret value masked; everything else kept.
    """
    if not isinstance(text, str):
        text = str(text)
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, MASK)
    out = _USERINFO.sub(lambda m: f"{m.group(1)}:{MASK}@", text)
    out = _QUERY.sub(lambda m: f"{m.group(1)}{MASK}", out)
    out = _SCHEME_CREDENTIAL.sub(_credential, out)
    return _KEYWORD.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", out)
