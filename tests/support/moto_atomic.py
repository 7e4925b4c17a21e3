"""moto's S3 server with each PutObject decided atomically, as S3 decides it.

moto checks a conditional PUT's `If-Match` / `If-None-Match` and then writes, in a threaded
server with no lock between the two: two writers racing on one key can both pass the check.
Under a loaded CI run that elected two primaries for one project (both nodes' `If-None-Match: *`
writes succeeded). S3 itself serializes writes to a key, so here each PutObject holds one lock
from its check to its write (the body is read before, outside the lock), and the races the tests
make are judged as S3 would judge them. Run as `python -m tests.support.moto_atomic`, with
`python -m moto.server`'s arguments.
"""

import sys
import threading
from typing import Any

from moto import server
from moto.s3.responses import S3Response

_writes = threading.Lock()
_put_object = S3Response.put_object


def _put_object_atomically(self: S3Response) -> Any:
    with _writes:
        return _put_object(self)


if __name__ == "__main__":
    S3Response.put_object = _put_object_atomically  # type: ignore[method-assign]
    server.main(sys.argv[1:])
