"""Rule files a crawl reads and re-reads when they change (URL filters, www rules, focus rules):
the stamp that tells a changed file, and the text, with errors that name the file.

Each kind of file words its errors its own way (``cannot_read``, ``not_utf8``), so a message
names what the user gave (``--filter``, ``--www-rules``, ``--focus-rules``).
"""

from __future__ import annotations

import os

from webdb.errors import BadInput

__all__ = ["file_stamp", "read_text"]


def file_stamp(path: str, cannot_read: str = "cannot read") -> tuple[int, int]:
    """``(mtime_ns, size)`` of ``path``: a file whose stamp differs has changed."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise BadInput(f"{path}: {cannot_read}: {e.strerror}") from None
    return st.st_mtime_ns, st.st_size


def read_text(path: str, cannot_read: str = "cannot read", not_utf8: str = "not UTF-8 text") -> str:
    """The whole of ``path`` as UTF-8 text; BadInput naming the file if it cannot be read or
    is not UTF-8 (with the byte where decoding failed)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise BadInput(f"{path}: {cannot_read}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise BadInput(f"{path}: {not_utf8} ({e.reason} at byte {e.start})") from None
