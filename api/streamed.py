"""A request body streamed as text lines, in bounded memory: the recipient uploads' and the
streamed job imports' (``streams.campaigns.recipients.Lines`` cuts them)."""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator

from fastapi import Request

from streams.campaigns.recipients import MAX_LINE_BYTES, BadRow, Lines

LONG_LINE = BadRow(0, f"line longer than {MAX_LINE_BYTES} bytes")
NOT_UTF8 = BadRow(0, "invalid UTF-8")


async def body_lines(request: Request) -> AsyncIterator[str | BadRow]:
    """The body as text lines; a line that is too long or not UTF-8 comes out as the bad row it
    is (its number still to be set by the caller, who counts the lines)."""
    lines = Lines()
    async for piece in request.stream():
        for raw in lines.feed(piece):
            yield _decode(raw)
    for raw in lines.end():
        yield _decode(raw)


def _decode(raw: bytes | None) -> str | BadRow:
    if raw is None:
        return LONG_LINE
    try:
        return codecs.decode(raw.rstrip(b"\r"), "utf-8")
    except UnicodeDecodeError:
        return NOT_UTF8
