"""Typed HTTP clients for the services the runtime talks to, with injectable transports.

Importing httpx imports its command line too (`httpx._main`, with click, pygments and rich's
progress and syntax) whenever those are installed, as they are here. No bloom process runs it,
and it was half of httpx's import time, which every `bloom` command that calls the runtime paid.
Marked as missing before any client imports httpx, it is left out (httpx's `main` then says its
dependencies are missing).

httpcore asks which async library runs by importing `sniffio` several times per request; when
sniffio is not installed (it is not here: httpcore then assumes asyncio), each of those imports
searched the whole import path and failed, about 0.1 ms apiece, on every call a worker makes.
Found missing once, it is marked so, and each later import fails at once."""

import importlib.util
import sys

# None in sys.modules: "not importable" (ModuleNotFoundError), which typeshed does not spell
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
    sys.modules["sniffio"] = None  # type: ignore[assignment]
