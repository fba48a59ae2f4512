"""Which browser origins may open a connection: the defence against cross-site WebSocket
hijacking, where a page on another site opens a WebSocket to the API with the visitor's
credentials. Browsers always send ``Origin`` on a WebSocket handshake and pages cannot forge it;
other clients (wscat, servers) may send anything, so for them the connect ticket is the guard.
"""

from __future__ import annotations

from collections.abc import Mapping

from functions.settings import normalize_origin


def origin_of(headers: Mapping[str, str] | None) -> str | None:
    """The request's ``Origin`` header (API Gateway keeps the client's spelling of the name)."""
    for name, value in (headers or {}).items():
        if name.lower() == "origin":
            return value
    return None


def origin_allowed(headers: Mapping[str, str] | None, allowed: frozenset[str] | None) -> bool:
    """True without an allow-list, or without an Origin header (not a browser); otherwise the
    origin must be on the list. ``null`` (a sandboxed frame, a file page) never is."""
    if allowed is None:
        return True
    origin = origin_of(headers)
    return origin is None or normalize_origin(origin) in allowed
