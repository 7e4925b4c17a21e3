"""Secrets at rest: AES-256-GCM under a key derived from the server's secret key.

A sealed value is text, `enc:v1:<urlsafe base64 of nonce ‖ ciphertext ‖ tag>`, bound to what it
is (`context`, the associated data), so a sealed value moved to another row does not open.
Values stored before encryption existed (plain text) are still read as they are; whoever reads
one should seal it (`is_sealed` tells).
"""

import base64
import binascii
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from bloom.runtime.secret_key import derive

PREFIX = "enc:v1:"
NONCE_BYTES = 12


class SecretUnreadable(ValueError):
    """A sealed value that this key cannot open (another secret key, or damaged)."""


class SecretBox:
    def __init__(self, secret_key: bytes):
        self._aead = AESGCM(derive(secret_key, "encryption"))

    def seal(self, plaintext: str, context: str) -> str:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, plaintext.encode(), context.encode())
        return PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode()

    def open(self, stored: str, context: str) -> str:
        """The plaintext of a sealed value; a value that was never sealed, as it is."""
        if not is_sealed(stored):
            return stored
        try:
            raw = base64.urlsafe_b64decode(stored[len(PREFIX) :])
            plain = self._aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], context.encode())
        except (InvalidTag, ValueError, binascii.Error):
            raise SecretUnreadable(
                f"the stored {context} cannot be decrypted with this server's secret key"
            ) from None
        return plain.decode()


def is_sealed(stored: str) -> bool:
    return stored.startswith(PREFIX)
