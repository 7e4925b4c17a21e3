"""What the object store can fail with, apart from the client (obstore) that `s3` loads: so that
a command or service can name these without paying for that import."""


class ObjectStoreUnavailable(Exception):
    """The store could not be reached, timed out or refused the request (credentials, 5xx)."""


class ObjectMissing(Exception):
    """No object under that key."""


class DigestMismatch(Exception):
    """The streamed content's SHA-256 is not the one expected; nothing was stored."""


class PreconditionFailed(Exception):
    """A conditional write lost: the object changed (If-Match) or exists (If-None-Match)."""
