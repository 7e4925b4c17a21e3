"""The Membridge control plane: agent registry, projects, node heartbeats, per-project
leadership and the jobs log, persisted in its own tables (SQLite or PostgreSQL).

`bloom membridge serve` runs it; the runtime's Membridge client speaks to it. The HTTP contract
is the reference control plane's (API version 0.3.0), with its bugs fixed (docs/membridge.md).
"""

SERVICE_NAME = "membridge-control-plane"
API_VERSION = "0.3.0"
"""The reference control plane's API version, which ours is compatible with."""
