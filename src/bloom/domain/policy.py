"""A task's policy when it does not say otherwise: what one attempt may take and spend.

Apart from the entities (`models.py`): the client and the CLI read these defaults without
building the runtime's dataclasses."""

from typing import Any

DEFAULT_TIMEOUT_SEC = 120
"""How long one attempt may run when the task's policy does not say (the seed's default)."""
DEFAULT_POLICY: dict[str, Any] = {"timeout_sec": DEFAULT_TIMEOUT_SEC, "budget": 0}
