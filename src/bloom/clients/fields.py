"""Reading a server's JSON replies into typed values: what the clients' parsers share.

A parser takes the fields it knows and ignores the rest (a newer server may add some); a field it
needs that is missing, null or of the wrong type raises `WireError`, naming the field's path.
"""

import json
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, TypeVar

T = TypeVar("T")
E = TypeVar("E", bound=StrEnum)
Parser = Callable[[Any, str], T]
"""Reads a JSON value found at a path (`task.policy`) into a T."""


class WireError(ValueError):
    """A reply without the shape the client reads; the message names the field."""


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


class Fields:
    """One JSON object's fields, read by type; errors name the field (`grant.task.status`)."""

    __slots__ = ("data", "where")

    def __init__(self, data: Any, where: str = ""):
        if not isinstance(data, Mapping):
            raise WireError(f"{where or 'the reply'}: expected an object, got {_kind(data)}")
        self.data: Mapping[str, Any] = data
        self.where = where

    def path(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def _optional(self, name: str, kinds: tuple[type, ...], expected: str) -> Any:
        value = self.data.get(name)
        if value is None or (
            isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool))
        ):
            return value
        raise WireError(f"{self.path(name)}: expected {expected}, got {_kind(value)}")

    def _required(self, name: str, kinds: tuple[type, ...], expected: str) -> Any:
        value = self._optional(name, kinds, expected)
        if value is None:
            state = "null" if name in self.data else "missing"
            raise WireError(f"{self.path(name)}: {state}, expected {expected}")
        return value

    def text(self, name: str) -> str:
        value: str = self._required(name, (str,), "a string")
        return value

    def optional_text(self, name: str) -> str | None:
        value: str | None = self._optional(name, (str,), "a string")
        return value

    def integer(self, name: str) -> int:
        value: int = self._required(name, (int,), "an integer")
        return value

    def optional_integer(self, name: str) -> int | None:
        value: int | None = self._optional(name, (int,), "an integer")
        return value

    def number(self, name: str, default: float) -> float:
        value: float | None = self._optional(name, (int, float), "a number")
        return default if value is None else float(value)

    def flag(self, name: str, default: bool) -> bool:
        value: bool | None = self._optional(name, (bool,), "true or false")
        return default if value is None else value

    def texts(self, name: str) -> tuple[str, ...]:
        """A list of strings; absent or null is empty."""
        values: list[Any] = self._optional(name, (list,), "a list") or []
        for index, value in enumerate(values):
            if not isinstance(value, str):
                raise WireError(
                    f"{self.path(name)}[{index}]: expected a string, got {_kind(value)}"
                )
        return tuple(values)

    def mapping(self, name: str) -> Mapping[str, Any]:
        """An object taken as it is; absent or null is empty."""
        value: Mapping[str, Any] | None = self._optional(name, (Mapping,), "an object")
        return value or {}

    def state(self, name: str, states: type[E]) -> E:
        """One of an enumeration's values (a task's status, …)."""
        value = self.text(name)
        try:
            return states(value)
        except ValueError:
            raise WireError(f"{self.path(name)}: unknown {states.__name__} {value!r}") from None

    def optional_state(self, name: str, states: type[E]) -> E | None:
        return None if self.data.get(name) is None else self.state(name, states)

    def nested(self, name: str, parse: Parser[T]) -> T:
        if self.data.get(name) is None:
            raise WireError(f"{self.path(name)}: missing, expected an object")
        return parse(self.data[name], self.path(name))

    def optional_nested(self, name: str, parse: Parser[T]) -> T | None:
        value = self.data.get(name)
        return None if value is None else parse(value, self.path(name))


def parse_list(data: Any, parse: Parser[T], where: str = "") -> list[T]:
    """A JSON list of values, each read by `parse`."""
    if not isinstance(data, list):
        raise WireError(f"{where or 'the reply'}: expected a list, got {_kind(data)}")
    return [parse(item, f"{where}[{index}]") for index, item in enumerate(data)]


def parse_body(body: bytes, parse: Parser[T]) -> T:
    """A reply's JSON body read by `parse`; WireError if it is not JSON."""
    try:
        data = json.loads(body)
    except ValueError:
        raise WireError("not JSON") from None
    return parse(data, "")
