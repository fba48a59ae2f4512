"""The HTTP headers the browser page (``web/``) is served with, wherever it is served.

One policy for both hosts: the local stack's gateway sends these headers with the page and its
files, and the VoicePage stack's CloudFront distribution sends them too (a response headers
policy). The browser tests then run the page under the same Content-Security-Policy as a
deployment, so a change that breaks it (an inline script, a CDN) fails here, not after deploy.

The page loads only its own files and opens WebSockets to whatever API the user enters (a local
``ws://`` one, or a deployed ``wss://`` one): ``connect-src`` allows exactly those schemes.

It lives with the tools, not in the shared library: the speech image copies ``voicewire/``, and a
change to the page's policy must not roll the speech endpoint.
"""

from __future__ import annotations

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self' ws: wss:",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
        "object-src 'none'",
    )
)

SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",  # a ticket in the page's address must not leak in Referer
    "x-frame-options": "DENY",
}
