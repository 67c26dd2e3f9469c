"""Numbered lines of a text file, read as bytes so that one bad line never hides the others.

Every line-oriented reader of jingpai (corpus readers of the indexer, domain corpora of the dictionary
builder, labelled-pair data of the reranker) reads files through :func:`numbered_lines`: the file is
split on ``\\n`` bytes, each line is decoded on its own, and a line that cannot be decoded, or that is
longer than a byte limit, comes out as a :class:`NumberedLine` carrying a :class:`LineError` that
names the file and line, instead of ending the whole read. What to do with it (quarantine, skip and
count, fail) is each caller's choice, and so is the wording of its own messages.

Example:
    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
    >>> _ = path.write_bytes(b"first\\r\\n\\xff\\xfe\\n" + b"x" * 9 + b"\\n")
    >>> for line in numbered_lines(path, max_bytes=8):
    ...     print(line.number, line.text, type(line.error).__name__ if line.error else "")
    1 first 
    2 None UndecodableLine
    3 None LineTooLong
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from jingpai.errors import UserError


class LineError(UserError, ValueError):
    """One line of a text file cannot be used as text; the message starts with ``path:line:``.

    Attributes:
        path: the file.
        number: the 1-based line number.
        raw: the line's bytes (without its line break).
    """

    def __init__(self, message: str, *, path: Path, number: int, raw: bytes) -> None:
        super().__init__(f"{path}:{number}: {message}")
        self.path = path
        self.number = number
        self.raw = raw


class LineTooLong(LineError):
    """A line longer than the reader's byte limit (it was not decoded).

    Attributes:
        limit: the byte limit.
    """

    def __init__(self, *, path: Path, number: int, raw: bytes, limit: int) -> None:
        super().__init__(f"line is {len(raw)} bytes, over the limit of {limit}", path=path, number=number, raw=raw)
        self.limit = limit


class UndecodableLine(LineError):
    """A line that is not valid text in the file's encoding.

    Attributes:
        encoding: the encoding tried.
        cause: the :class:`UnicodeDecodeError` (its ``reason`` and ``start`` locate the bad byte).
    """

    def __init__(self, *, path: Path, number: int, raw: bytes, encoding: str, cause: UnicodeDecodeError) -> None:
        super().__init__(
            f"not valid {encoding_label(encoding)}: {cause.reason} (byte 0x{raw[cause.start]:02x} at offset {cause.start})",
            path=path, number=number, raw=raw,
        )
        self.encoding = encoding
        self.cause = cause


def encoding_label(encoding: str) -> str:
    """``encoding`` as people write it (``utf_8`` → ``UTF-8``).

    >>> encoding_label("utf_8"), encoding_label("gb18030")
    ('UTF-8', 'GB18030')
    """
    return encoding.upper().replace("_", "-")


@dataclass(frozen=True)
class NumberedLine:
    """One line of a file.

    Attributes:
        number: 1-based line number.
        raw: the line's bytes without its line break (``\\n`` or ``\\r\\n``).
        text: the decoded line (``None`` when ``error`` is set).
        error: why the line has no text: :class:`LineTooLong` or :class:`UndecodableLine`.
    """

    number: int
    raw: bytes
    text: str | None
    error: LineError | None = None

    def require(self) -> str:
        """The line's text; its :class:`LineError` raised when it has none."""
        if self.error is not None:
            raise self.error
        assert self.text is not None
        return self.text


def numbered_lines(path: str | Path, *, encoding: str = "utf-8", max_bytes: int | None = None) -> Iterator[NumberedLine]:
    """Every line of ``path`` (blank ones too), numbered from 1.

    Args:
        path: a text file; lines end with ``\\n`` bytes (``encoding`` must be ASCII-compatible).
        encoding: the file's encoding.
        max_bytes: lines longer than this are not decoded and carry a :class:`LineTooLong`
            (``None``: no limit). Bounds the memory a caller spends on one line.

    Raises:
        OSError: the file cannot be opened.
    """
    path = Path(path)
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            raw = raw.rstrip(b"\r\n")
            if max_bytes is not None and len(raw) > max_bytes:
                yield NumberedLine(number, raw, None, LineTooLong(path=path, number=number, raw=raw, limit=max_bytes))
                continue
            try:
                text = raw.decode(encoding)
            except UnicodeDecodeError as exc:
                error = UndecodableLine(path=path, number=number, raw=raw, encoding=encoding, cause=exc)
                yield NumberedLine(number, raw, None, error)
                continue
            yield NumberedLine(number, raw, text)


__all__ = ["LineError", "LineTooLong", "NumberedLine", "UndecodableLine", "encoding_label", "numbered_lines"]
