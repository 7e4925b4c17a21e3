"""Secrets: how they are shown (never whole) and compared (in constant time, never raising)."""

import hmac


def mask_secret(secret: str) -> str:
    """The seed's masking: "" stays "", up to 8 characters become "****", else `abcd****wxyz`."""
    if not secret:
        return ""
    if len(secret) <= 8:
        return "****"
    return f"{secret[:4]}****{secret[-4:]}"


def key_matches(presented: bytes, expected: bytes) -> bool:
    """Constant-time comparison over bytes: any header value (long, short, non-ASCII) is safe."""
    return hmac.compare_digest(presented, expected)
