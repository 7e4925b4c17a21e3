"""What a use-case can refuse. The API maps each kind to its HTTP status."""

from collections.abc import Mapping
from typing import TypeVar

T = TypeVar("T")


class ServiceError(Exception):
    """A refusal with a message fit for the client."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class Invalid(ServiceError):
    """The request cannot be taken as it is (400)."""


class InvalidField(Invalid):
    """A field of the request that cannot be taken (400, in the validation errors' shape)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class Forbidden(ServiceError):
    """The caller is known but may not do this (403)."""


class NotFound(ServiceError):
    """The named thing does not exist (404)."""


class Conflict(ServiceError):
    """The thing exists but its state forbids the operation (409)."""


class Unavailable(ServiceError):
    """Nothing can serve the request right now, e.g. no worker has a free slot (503); with
    `retry_after_sec`, when to try again (`Retry-After`)."""

    def __init__(self, message: str, *, retry_after_sec: int | None = None):
        super().__init__(message)
        self.retry_after_sec = retry_after_sec


class Throttled(ServiceError):
    """Too many attempts: refused unread until `retry_after_sec` has passed (429)."""

    def __init__(self, message: str, *, retry_after_sec: int):
        super().__init__(message)
        self.retry_after_sec = retry_after_sec


class BadGateway(ServiceError):
    """An upstream service (Membridge) could not be reached or answered nonsense (502)."""


def by_kind(exc: ServiceError, table: Mapping[type[ServiceError], T], default: T) -> T:
    """The entry of `table` for `exc`'s kind; for a subclass, its nearest listed base's."""
    return next((table[kind] for kind in type(exc).__mro__ if kind in table), default)
