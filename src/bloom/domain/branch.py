"""Which git branch names a request may give (a clone's branch, a self-update's): plain ones,
never a ref path, a pseudo-ref, a revision expression or an option."""

import re

CHARACTERS = re.compile(r"[A-Za-z0-9._/-]{1,255}")
"""No `~`, `^`, `:`, `@{…}`, `?`, `*`, `[`, `\\`, spaces or control characters."""
PSEUDO_REF = re.compile(r"[A-Z_-]+")
"""What git reads as a pseudo-ref (`HEAD`, `FETCH_HEAD`, `ORIG_HEAD`, …) when it stands alone."""
PLAIN_BRANCH = (
    "a plain branch name: letters, digits, '.', '_' and '-' in parts joined by '/'; not "
    "refs/…, HEAD or FETCH_HEAD; no '..', no part starting with '.' or ending with '.lock', "
    "not starting with '-'"
)


def is_plain_branch(name: str) -> bool:
    """Whether `name` is a plain branch name (`PLAIN_BRANCH`): one `git check-ref-format
    --branch` takes, naming `refs/heads/<name>` and nothing else git might resolve it to."""
    parts = name.split("/")
    return (
        CHARACTERS.fullmatch(name) is not None
        and not name.startswith("-")
        and not name.endswith(".")
        and ".." not in name
        and parts[0] != "refs"
        and PSEUDO_REF.fullmatch(name) is None
        and all(
            part and not part.startswith(".") and not part.endswith(".lock") and part != "HEAD"
            for part in parts
        )
    )
