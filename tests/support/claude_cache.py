"""A Claude CLI cache laid out as npm leaves it, and executables for tests."""

import json
import stat
from pathlib import Path

from bloom.worker.agents.claude import install as claude_cli


def executable(path: Path, body: str = "#!/bin/sh\necho fake\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def lay_out(cache: Path, version: str = claude_cli.PINNED_VERSION) -> Path:
    """What `npm install @anthropic-ai/claude-code@<version>` leaves in the cache."""
    package = cache / "node_modules" / "@anthropic-ai" / "claude-code"
    package.mkdir(parents=True)
    (package / "package.json").write_text(
        json.dumps({"name": claude_cli.PACKAGE, "version": version})
    )
    suffix = claude_cli.platform_suffix()
    assert suffix is not None
    return executable(cache / "node_modules" / "@anthropic-ai" / f"claude-code-{suffix}" / "claude")
