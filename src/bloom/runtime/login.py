"""Logins: the signed cookie a browser holds once its user has logged in, with the CSRF token of
that login.

The cookie is `<payload>.<signature>`, both base64url: the payload is JSON `{"u": user id,
"s": password stamp, "c": CSRF token, "e": expiry (epoch s)}`, the signature an HMAC-SHA256 of
the payload with a key derived from the server's secret. It is `HttpOnly` and `SameSite=Lax`,
and `Secure` over HTTPS.
State-changing requests made with it must carry the CSRF token (`X-CSRF-Token` header, or the
`csrf_token` field of a form).
"""

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass

from bloom.runtime.secret_key import derive

COOKIE = "bloom_session"
LOGIN_CSRF_COOKIE = "bloom_login_csrf"
CSRF_HEADER = "x-csrf-token"
LIFETIME_SEC = 12 * 3600


@dataclass(frozen=True, slots=True)
class Login:
    user_id: str
    stamp: str
    """Of the user's password hash when they logged in: a new password ends older logins."""
    csrf: str
    expires: int


def password_stamp(password_hash: str) -> str:
    return hashlib.sha256(password_hash.encode()).hexdigest()[:16]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class LoginCodec:
    def __init__(self, secret: bytes):
        self._key = derive(secret, "session")  # the derivation's label: cookies issued stay valid

    def _sign(self, payload: str) -> str:
        raw = payload.encode("utf-8", "surrogatepass")
        return _b64(hmac.new(self._key, raw, hashlib.sha256).digest())

    def issue(self, user_id: str, stamp: str, now_sec: int) -> tuple[str, Login]:
        login = Login(user_id, stamp, secrets.token_urlsafe(24), now_sec + LIFETIME_SEC)
        body = json.dumps({"u": login.user_id, "s": stamp, "c": login.csrf, "e": login.expires})
        payload = _b64(body.encode())
        return f"{payload}.{self._sign(payload)}", login

    def read(self, cookie: str, now_sec: int) -> Login | None:
        """The login the cookie holds, if it is ours, intact and not expired."""
        payload, _, signature = cookie.partition(".")
        presented = signature.encode("utf-8", "surrogatepass")
        if not signature or not hmac.compare_digest(presented, self._sign(payload).encode()):
            return None
        try:
            data = json.loads(_unb64(payload))
            login = Login(str(data["u"]), str(data["s"]), str(data["c"]), int(data["e"]))
        except (ValueError, KeyError, TypeError):
            return None
        return login if login.expires > now_sec else None


def csrf_matches(expected: str, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(
        expected.encode(), presented.encode("utf-8", "surrogatepass")
    )
