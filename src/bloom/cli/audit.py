"""`bloom audit export`: the audit log to the S3 bucket now, rather than at the next interval."""

from typing import TYPE_CHECKING

import typer
from rich.console import Console

from bloom.cli.admin import on_runtime
from bloom.cli.output import fail

if TYPE_CHECKING:
    from bloom.runtime.container import Container
    from bloom.runtime.services.audit_export import ExportReport

app = typer.Typer(no_args_is_help=True)  # its help: bloom.cli.main's


@app.command("export")
def export() -> None:
    """Export every settled audit entry not yet exported (older than BLOOM_AUDIT_EXPORT_SETTLE_SEC)
    to the bucket as gzip JSONL, each entry exactly once. Works on the runtime's database directly
    (DATABASE_URL, MINIO_*), while the runtime serves."""

    async def run(container: "Container") -> "ExportReport":
        if container.audit_export is None:
            fail("audit export needs the object store: set MINIO_ENDPOINT (or BLOOM_S3_ENDPOINT)")
        return await container.audit_export.export_pending()

    report = on_runtime(run)
    Console(stderr=True, highlight=False).print(
        f"exported {report.rows} audit entries in {report.objects} objects"
        + (f"; pruned {report.pruned} past retention" if report.pruned else "")
    )
