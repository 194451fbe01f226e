"""Line offsets of a JSONL file that may still be growing, so that any line can be read by seeking
to it instead of reading the file from the top.

Only complete lines (ending in a newline) are indexed: a writer mid-line (or a kill) leaves a last
line without one, and that line is neither indexed nor read until its newline arrives. `refresh()`
reads only the bytes appended since the last call; a file that shrank (a resumed run rewrites
metrics.jsonl up to its checkpoint's step) is indexed again from the start.
"""

from __future__ import annotations

import os
from array import array

_CHUNK = 1 << 22  # 4 MiB per read: few system calls, bounded memory on a 300 MB dump


class LineIndex:
    """Start offsets of the complete lines of `path`; `len(index)` lines, `index.end` bytes covered."""

    def __init__(self, path: str):
        self.path = path
        self.starts = array("q")  # start byte of line i; 8 bytes a line: 1M lines are 8 MB
        self.end = 0  # byte just after the last complete line
        self.generation = 0  # bumped when the file shrank and was indexed again (offsets given out are stale)
        self._mtime_size: tuple[float, int] | None = None

    def __len__(self) -> int:
        return len(self.starts)

    def refresh(self) -> bool:
        """Index lines appended since the last call; True when the file changed. A missing file is empty."""
        try:
            st = os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):  # NotADirectory: a file was given where a folder goes
            st = None
        key = (st.st_mtime, st.st_size) if st else (0.0, 0)
        if key == self._mtime_size:
            return False
        self._mtime_size = key
        size = key[1]
        if size < self.end:  # truncated or rewritten: start over
            self.starts, self.end = array("q"), 0
            self.generation += 1
        if size > self.end:
            self._scan(size)
        return True

    def _scan(self, size: int) -> None:
        with open(self.path, "rb") as f:
            f.seek(self.end)
            pos = self.end
            while pos < size:
                chunk = f.read(min(_CHUNK, size - pos))
                if not chunk:
                    break
                start = 0
                while (nl := chunk.find(b"\n", start)) != -1:
                    self.starts.append(self.end)
                    self.end = pos + nl + 1
                    start = nl + 1
                pos += len(chunk)

    def read(self, first: int, last: int) -> list[bytes]:
        """Lines first..last-1 (clipped to the indexed ones), without their newlines."""
        first, last = max(0, first), min(last, len(self.starts))
        if first >= last:
            return []
        stop = self.starts[last] if last < len(self.starts) else self.end
        with open(self.path, "rb") as f:
            f.seek(self.starts[first])
            data = f.read(stop - self.starts[first])
        return data.split(b"\n")[: last - first]

    def read_from(self, offset: int) -> tuple[list[bytes], int]:
        """Complete lines from byte `offset` (a former `end`) to the current end, and the new end."""
        if offset >= self.end:
            return [], self.end
        with open(self.path, "rb") as f:
            f.seek(offset)
            data = f.read(self.end - offset)
        return data.split(b"\n")[:-1], self.end
