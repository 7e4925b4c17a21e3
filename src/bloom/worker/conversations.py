"""Which Claude conversation continues which context, on this worker.

Claude keeps a conversation's transcript on the machine that ran it, so the map from `context_id`
to the newest conversation's id (Claude's `session_id`) is the worker's own, kept in a small file
that survives restarts. Tasks of one context run one at a time here, so that each resumes the
conversation the previous one left.

The file is JSON lines, each an object of contexts and their conversations (`null`: forgotten),
later lines winning. A task's change is one line appended: writing the whole map again, as it
once was, cost each task 20 ms at 10,000 contexts, on its way to the complete. The file is
written whole, as one line, when the worker starts and once the lines appended outnumber the
contexts (1,000 at least). A file of the earlier format, one JSON object, is read as it is.
"""

import asyncio
import json
import os
from pathlib import Path

COMPACT_AFTER = 1000
"""Lines appended, at least, before the file is written whole again."""


class ConversationBook:
    def __init__(self, path: Path):
        self.path = path
        self._locks: dict[str, asyncio.Lock] = {}
        self._conversations: dict[str, str] = self._load()
        self._appended = 0
        if self.path.exists():
            self._rewrite()

    def _load(self) -> dict[str, str]:
        """The map the file holds; a line that is not an object (one cut short by a crash as it
        was appended) is passed over."""
        conversations: dict[str, str] = {}
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            return conversations
        for line in lines:
            try:
                changes = json.loads(line)
            except ValueError:
                continue
            for context, conversation in changes.items() if isinstance(changes, dict) else ():
                if isinstance(conversation, str):
                    conversations[str(context)] = conversation
                else:
                    conversations.pop(str(context), None)
        return conversations

    def lock(self, context_id: str) -> asyncio.Lock:
        return self._locks.setdefault(context_id, asyncio.Lock())

    def get(self, context_id: str) -> str | None:
        return self._conversations.get(context_id)

    def set(self, context_id: str, conversation_id: str) -> None:
        if self._conversations.get(context_id) != conversation_id:
            self._conversations[context_id] = conversation_id
            self._append({context_id: conversation_id})

    def forget(self, context_id: str) -> None:
        if self._conversations.pop(context_id, None) is not None:
            self._append({context_id: None})

    def _append(self, change: dict[str, str | None]) -> None:
        self._appended += 1
        if self._appended > max(COMPACT_AFTER, len(self._conversations)):
            self._rewrite()
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as file:
            file.write(json.dumps(change) + "\n")

    def _rewrite(self) -> None:
        """The whole map as one line, replacing the file at once."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self._conversations) + "\n")
        os.replace(temporary, self.path)
        self._appended = 0
