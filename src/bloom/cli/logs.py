"""Logging: structlog, JSON lines (or console for people), with the stdlib routed through it."""

import logging
import sys

import structlog


class _UvicornSteps(logging.Filter):
    """Uvicorn's start and stop as one line each ("Uvicorn running on …", "Shutting down"): its
    other lifecycle steps at DEBUG."""

    DEMOTED = frozenset(
        {
            "Started server process [%d]",
            "Waiting for application startup.",
            "Application startup complete.",
            "Waiting for application shutdown.",
            "Application shutdown complete.",
            "Finished server process [%d]",
        }
    )

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or record.msg not in self.DEMOTED:
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger().isEnabledFor(logging.DEBUG)


_UVICORN_STEPS = _UvicornSteps()


def configure_logging(level: str = "info", fmt: str = "auto") -> None:
    """structlog for every process: `json` lines, `console` for people, or `auto` (console on a
    terminal, JSON otherwise)."""
    if fmt == "auto":
        fmt = "console" if sys.stderr.isatty() else "json"
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        # Below the level, a call costs one check: nothing is rendered or timestamped.
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.error").addFilter(_UVICORN_STEPS)  # once: it is one object
    logging.getLogger("uvicorn.access").disabled = True  # our middleware logs requests
    # httpx logs every outgoing request at INFO (the worker sync's poll every 10 s): noise but
    # at debug level; failures are logged by the callers that know what they mean
    quiet = root.level > logging.DEBUG
    logging.getLogger("httpx").setLevel(logging.WARNING if quiet else logging.NOTSET)
    # Alembic's plugins and each migration step: `Schema.upgrade` says what a run did, in a line
    logging.getLogger("alembic").setLevel(logging.WARNING if quiet else logging.NOTSET)
