"""Typed HTTP clients for the services the runtime talks to, with injectable transports.

Importing httpx imports its command line too (`httpx._main`, with click, pygments and rich's
progress and syntax) whenever those are installed, as they are here. No bloom process runs it,
and it was half of httpx's import time, which every `bloom` command that calls the runtime paid.
Marked as missing before any client imports httpx, it is left out (httpx's `main` then says its
dependencies are missing)."""

import sys

# None in sys.modules: "not importable" (ModuleNotFoundError), which typeshed does not spell
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
