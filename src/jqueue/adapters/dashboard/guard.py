"""``Guard``: who may see the dashboard and send its forms.

With a token, a browser signs in once with a form that sets an HttpOnly, SameSite=Strict
cookie derived from the token (scripts may send ``Authorization: Bearer TOKEN`` instead).
Every form carries a CSRF value derived from a secret the page alone reveals, and a POST whose
``Origin`` is another site is refused, with or without a token.
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
        self._secret = (token or secrets.token_hex(32)).encode()

    def _derived(self, purpose: str) -> str:
        return hmac.new(self._secret, purpose.encode(), hashlib.sha256).hexdigest()

    def session(self) -> str:
        """The session cookie's value."""
        return self._derived("jqueue-dashboard-session")

    def csrf(self) -> str:
        """The value every form of the dashboard carries."""
        return self._derived("jqueue-dashboard-csrf")

    def token_matches(self, given: str) -> bool:
        """Whether ``given`` is the token (in constant time)."""
        return self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def signed_in(self, request: Request) -> bool:
        """Whether ``request`` may see the dashboard: no token is set, or it has the session
        cookie, or it sends the token as a bearer token."""
        if self.token is None:
            return True
        cookie = request.cookies.get(SESSION_COOKIE, "")
        if hmac.compare_digest(cookie.encode(), self.session().encode()):
            return True
        return self.token_matches(request.headers.get("authorization", "").removeprefix("Bearer "))

    def form_allowed(self, request: Request, form_csrf: str) -> bool:
        """Whether a POST carries this dashboard's CSRF value and comes from its own origin."""
        origin = request.headers.get("origin")
        if origin is not None and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
            return False
        return hmac.compare_digest(form_csrf.encode(), self.csrf().encode())


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
