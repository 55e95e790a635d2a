"""``Guard``: who may see the dashboard and send its forms.

Each browser has a session: a random id in an HttpOnly, SameSite=Strict cookie, signed with a
key (derived from the token when there is one, so that a session outlives a restart; a random
key of the process without a token). With a token, only signing in (a form that checks it)
starts a session, and a page needs one (scripts may send ``Authorization: Bearer TOKEN``
instead); without one, the first page a browser opens starts it. Every form carries a CSRF
value derived from the session's id by HMAC with the key, so one session's value is refused
in another, and a POST whose ``Origin`` is another site, or hidden (``null``), is refused, with or
without a token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import parse_qsl, urlsplit

from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request

MAX_FORM_BYTES = 1 << 20
SESSION_COOKIE = "jqueue_session"
FLASH_COOKIE = "jqueue_flash"


class Guard:
    """Checks sessions and form tokens.

    Parameters
    ----------
    token : str or None
        The service's token; None lets every request see the dashboard (loopback only, as
        ``jqueue serve`` enforces), though forms are still CSRF-checked.
    """

    def __init__(self, token: str | None) -> None:
        self.token = token
        secret = token.encode() if token is not None else secrets.token_bytes(32)
        self._key = hmac.new(secret, b"jqueue-dashboard", hashlib.sha256).digest()

    def _derived(self, purpose: str, value: str) -> str:
        return hmac.new(self._key, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()

    def new_session(self) -> str:
        """A new session cookie's value: a random id and its signature."""
        session_id = secrets.token_urlsafe(24)
        return f"{session_id}.{self._derived('session', session_id)}"

    def session_of(self, request: Request) -> str | None:
        """The session cookie ``request`` carries, if this dashboard signed it (else None)."""
        cookie = request.cookies.get(SESSION_COOKIE, "")
        session_id, _, signature = cookie.partition(".")
        expected = self._derived("session", session_id)
        return cookie if session_id and hmac.compare_digest(signature.encode(), expected.encode()) else None

    def csrf(self, session: str | None) -> str:
        """The value every form of the dashboard carries in ``session`` (none without one)."""
        return "" if session is None else self._derived("csrf", session)

    def token_matches(self, given: str) -> bool:
        """Whether ``given`` is the token (in constant time)."""
        return self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def signed_in(self, request: Request) -> bool:
        """Whether ``request`` may see the dashboard: no token is set, or it has a session
        cookie, or it sends the token as a bearer token."""
        if self.token is None or self.session_of(request) is not None:
            return True
        return self.token_matches(request.headers.get("authorization", "").removeprefix("Bearer "))

    def origin_allowed(self, request: Request) -> bool:
        """Whether a request may change something: it has no ``Origin`` (a client that is no
        browser: the CSRF value or the token guards it), or its ``Origin`` is this dashboard's.
        ``Origin: null`` (a sandboxed frame, a ``data:`` page, a redirect from another site)
        hides where the request came from, and is refused."""
        origin = request.headers.get("origin")
        return origin is None or (origin != "null" and urlsplit(origin).netloc == request.headers.get("host"))

    def form_allowed(self, request: Request, form_csrf: str) -> bool:
        """Whether a POST carries the CSRF value of its own session and comes from this
        dashboard's origin (``origin_allowed``)."""
        if not self.origin_allowed(request):
            return False
        expected = self.csrf(self.session_of(request))
        return bool(expected) and hmac.compare_digest(form_csrf.encode(), expected.encode())


MAX_TARGET_CHARS = 2_000
"""The longest page a form or a sign-in may ask to go to next."""


def local_target(wanted: str, default: str) -> str:
    """``wanted`` if it is a path of this dashboard (``/...``, not ``//host`` or ``/\\host``,
    which a browser reads as another site; no control characters; at most
    ``MAX_TARGET_CHARS``), else ``default``: where a redirect may go."""
    local = wanted.startswith("/") and wanted[1:2] not in ("/", "\\") and len(wanted) <= MAX_TARGET_CHARS
    return wanted if local and wanted.isprintable() else default


class FormTooLargeError(ValueError):
    """A form body over ``MAX_FORM_BYTES``."""


async def read_form(request: Request) -> FormData:
    """Return the URL-encoded form ``request`` posted (the dashboard's forms upload no files).

    Raises
    ------
    FormTooLargeError
        If the body is larger than ``MAX_FORM_BYTES``.
    """
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise FormTooLargeError(f"the form is larger than {MAX_FORM_BYTES} bytes")
    fields: list[tuple[str, str | UploadFile]] = []
    fields += parse_qsl(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return FormData(fields)
