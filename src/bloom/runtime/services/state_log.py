"""One INFO line per committed state change: the audit entries a transaction wrote, logged once it
has committed (never for one rolled back), with their ids, under the logger `bloom.audit`."""

import logging

import structlog

from bloom.domain.audit import AuditAction
from bloom.runtime.storage.repositories import Repositories

log = structlog.get_logger("bloom.audit")
ROUTINE = frozenset({AuditAction.WORKER_UPDATED})
"""Audited, but logged at DEBUG: a worker refreshes its registration every few seconds."""


def log_state_changes(tx: Repositories) -> None:
    for entry in tx.audited:
        log.log(
            logging.DEBUG if entry.action in ROUTINE else logging.INFO,
            str(entry.action),
            entity=entry.entity_type,
            id=entry.entity_id,
            task_id=entry.task_id,
            actor=entry.actor,
            detail=entry.detail,
        )
