"""Files written whole or not at all."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replaced_whole(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path`` to write; when the block ends without an error
    it is synced and renamed over ``path``, otherwise removed.

    A write that fails (a full disk, a file-size limit, an exception of the writer)
    leaves ``path`` as it was and no temporary file; a reader never sees half a file.

    Args:
        path: the file to write.

    Yields:
        The temporary path (same folder, so the rename is atomic).
    """
    target = Path(path)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        yield temporary
        with temporary.open("rb") as file:
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
