"""The bounds on what a JUnit report's values may hold: names and messages are capped (``cap``,
the cut marked) so that a warehouse row stays small, and attribute values are cut to a bound
before expat reads them (``LongValueCutter``), so that JUnit parsing stays linear.

Used by nightly_assets.testing.junit_stream; the stream still goes through defusedxml's parser
whole (only bytes inside over-long attribute values are dropped)."""

from __future__ import annotations

from typing import IO

MAX_NAME_CHARS = 1000  # classname and name, each
MAX_MESSAGE_CHARS = 8000
TRUNCATED = "…[truncated]"
CHUNK_BYTES = 64 * 1024  # about a hundred typical cases per feed: per-feed overhead is negligible
# Four bytes per character (UTF-8's most) of MAX_MESSAGE_CHARS (8000), with room: a longer
# attribute value is cut without changing any name or message the parser keeps.
MAX_ATTRIBUTE_BYTES = 256 * 1024
LONGEST_REFERENCE = 16  # "&#x0010FFFF;" and the named ones are shorter


def cap(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, the cut marked (a warehouse row stays small)."""
    return text if len(text) <= limit else text[: limit - len(TRUNCATED)] + TRUNCATED


class LongValueCutter:
    """The report file as the parser reads it, with every attribute value longer than
    MAX_ATTRIBUTE_BYTES cut there and marked.

    pyexpat hands expat at most 1 MiB per call, and expat 2.5 (no reparse deferral) scans a token
    that is not complete yet from its start again on every call: a 64 MiB `message` attribute was
    rescanned 64 times or more, quadratic (16 MiB 7.6 s, 64 MiB minutes). Nothing downstream keeps
    more than MAX_MESSAGE_CHARS of a value, so the rest of a long value is skipped here with
    bytes.find, in linear time. Only the bytes after the last `<` of each chunk are looked at
    (attribute values and text cannot hold a `<`), so ordinary reports pay one rfind per chunk.
    Long text is not cut: expat reports text as it goes, without rescanning.
    """

    def __init__(self, raw: IO[bytes], marker: bytes) -> None:
        self._raw = raw
        self._marker = marker  # put where a value was cut
        self._tag: bytes | None = None  # the bytes since the last `<`, while they may be a start tag
        self._skip_quote = b""  # the quote ending the value being skipped, b"" when not skipping
        self._in_reference = False  # the cut fell inside "&...;"
        self._in_character = False  # the bytes after the cut may still continue a UTF-8 character

    def read(self) -> bytes:
        """The next CHUNK_BYTES or so of the file as it is to be parsed; b"" at its end."""
        while chunk := self._raw.read(CHUNK_BYTES):
            if out := self._filter(chunk):
                return out
        return b""

    def _filter(self, chunk: bytes) -> bytes:
        kept = b""
        if self._skip_quote:
            kept, chunk = self._finish_cut(chunk)
            end = _value_end(chunk, 0, self._skip_quote)
            if end < 0:
                return kept
            kept += self._marker
            if chunk[end : end + 1] == b"<":  # malformed (a `<` in a value): expat says so
                self._tag, chunk = None, chunk[end:]
            else:  # after the closing quote: inside the tag, outside any value
                kept += self._skip_quote
                self._tag, chunk = b"<_ ", chunk[end + 1 :]
            self._skip_quote = b""
        last_lt = chunk.rfind(b"<")
        if last_lt >= 0:
            self._tag = chunk[last_lt:]
        elif self._tag is not None:
            self._tag += chunk
        if self._tag is None or len(self._tag) <= MAX_ATTRIBUTE_BYTES:
            return kept + chunk
        state, value_start = _open_value(self._tag)
        if state == "tag" or (state == "value" and len(self._tag) - value_start <= MAX_ATTRIBUTE_BYTES):
            return kept + chunk
        if state != "value":  # text, a comment, an end tag ...: nothing to cut until the next `<`
            self._tag = None
            return kept + chunk
        # Cut the value MAX_ATTRIBUTE_BYTES in (_finish_cut then completes a character or
        # reference cut in two); the value exceeded the limit in this chunk, so the cut is in it.
        fed = len(self._tag) - len(chunk)
        cut = max(0, value_start + MAX_ATTRIBUTE_BYTES - fed)
        window = self._tag[max(value_start, fed + cut - LONGEST_REFERENCE) : fed + cut]
        amp = window.rfind(b"&")
        self._in_reference = amp >= 0 and b";" not in window[amp:]
        self._in_character = True
        self._skip_quote = self._tag[value_start - 1 : value_start]
        self._tag = None
        return kept + chunk[:cut] + self._filter(chunk[cut:])

    def _finish_cut(self, data: bytes) -> tuple[bytes, bytes]:
        """The bytes after a cut that complete the reference or UTF-8 character it fell in (they
        may come in later chunks), and the rest of `data`."""
        done = 0
        if self._in_reference:
            semicolon = data.find(b";")
            if semicolon < 0:
                return data, b""
            done, self._in_reference = semicolon + 1, False
        while self._in_character and done < len(data):
            if 0x80 <= data[done] < 0xC0:
                done += 1
            else:
                self._in_character = False
        return data[:done], data[done:]


def _value_end(data: bytes, start: int, quote: bytes) -> int:
    """Where the value being skipped ends: its closing quote, or a `<` (malformed; expat says so)."""
    ends = [i for i in (data.find(quote, start), data.find(b"<", start)) if i >= 0]
    return min(ends) if ends else -1


def _open_value(tag: bytes) -> tuple[str, int]:
    """What `tag` (bytes from a `<` on) ends in: ("value", where its value starts) inside an
    attribute value of a start tag, "tag" inside a start tag outside a value, else "other" (text
    after the tag, or a comment, declaration, instruction or end tag)."""
    if len(tag) < 2 or not (tag[1:2].isalpha() or tag[1] >= 0x80 or tag[1:2] in b"_:"):
        return "other", 0
    i = 1
    while True:
        quote_at = min((j for j in (tag.find(b'"', i), tag.find(b"'", i)) if j >= 0), default=-1)
        close_at = tag.find(b">", i)
        if close_at >= 0 and (quote_at < 0 or close_at < quote_at):
            return "other", 0
        if quote_at < 0:
            return "tag", 0
        end = tag.find(tag[quote_at : quote_at + 1], quote_at + 1)
        if end < 0:
            return "value", quote_at + 1
        i = end + 1
