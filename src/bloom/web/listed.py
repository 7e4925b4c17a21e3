"""A list setting's items, as the environment gives them: a JSON list, or comma-separated text."""

import json
from collections.abc import Iterable


def listed_items(value: object, what: str) -> Iterable[object]:
    """The items of `value`: parsed from text (a JSON list, else split at commas), or as given;
    ValueError ("expected a list of <what>") for anything else."""
    if isinstance(value, str):
        text = value.strip()
        items: object = json.loads(text) if text.startswith("[") else text.split(",")
    else:
        items = value
    if not isinstance(items, Iterable):
        raise ValueError(f"expected a list of {what}")
    return items
