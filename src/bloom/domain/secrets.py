"""Secrets: how they are shown (never whole) and compared (in constant time, never raising)."""

import hmac


def mask_secret(secret: str) -> str:
    """The seed's masking: "" stays "", up to 8 characters become "****", else `abcd****wxyz`."""
    if not secret:
        return ""
    if len(secret) <= 8:
        return "****"
    return f"{secret[:4]}****{secret[-4:]}"


def last_four(masked: str) -> str:
    """A `mask_secret` mask cut to at most the secret's last four characters, `****wxyz`, for
    people (the API keeps the seed's mask)."""
    return masked if len(masked) <= 4 else f"****{masked[-4:]}"


def key_matches(presented: bytes, expected: bytes) -> bool:
    """Constant-time comparison over bytes: any header value (long, short, non-ASCII) is safe."""
    return hmac.compare_digest(presented, expected)
