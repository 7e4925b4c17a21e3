"""Which Claude conversation continues which context, on this worker.

Claude keeps a conversation's transcript on the machine that ran it, so the map from `context_id`
to the newest conversation's id (Claude's `session_id`) is the worker's own, kept in a small JSON
file that survives restarts. Tasks of one context run one at a time here, so that each resumes
the conversation the previous one left.
"""

import asyncio
import json
import os
from pathlib import Path


class ConversationBook:
    def __init__(self, path: Path):
        self.path = path
        self._locks: dict[str, asyncio.Lock] = {}
        self._conversations: dict[str, str] = self._load()

    def _load(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {str(k): str(v) for k, v in data.items() if isinstance(v, str)}

    def lock(self, context_id: str) -> asyncio.Lock:
        return self._locks.setdefault(context_id, asyncio.Lock())

    def get(self, context_id: str) -> str | None:
        return self._conversations.get(context_id)

    def set(self, context_id: str, conversation_id: str) -> None:
        if self._conversations.get(context_id) != conversation_id:
            self._conversations[context_id] = conversation_id
            self._save()

    def forget(self, context_id: str) -> None:
        if self._conversations.pop(context_id, None) is not None:
            self._save()

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self._conversations))
        os.replace(temporary, self.path)
