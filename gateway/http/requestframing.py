"""Where an HTTP/1.x request ends, read from the bytes received so far: the front door
(gateway/http/frontdoor.py) buffers a request until it is whole before a thread serves it. Pure,
no I/O.

Only the framing is judged here (RFC 9112 §6): the head ends at the first empty line; a body is
`Content-Length` bytes or a chunked body up to its last chunk and trailers. Anything the framing
cannot be sure of (a malformed or repeated length, both length and chunked, a bare-LF head, a
body too big to buffer) is `Framing.PARSE`: the thread's parser (gunicorn's) then reads it and
answers with its own words, as it would have without us.
"""

from __future__ import annotations

import enum
import re

# The longest head buffered: beyond it the request is refused with 431 before any thread sees it.
# gunicorn's own limits (a 4094-byte request line, 100 fields of 8190 bytes) are checked by its
# parser after this; 64 KiB is what nginx's and Apache's defaults allow a whole head, roughly.
MAX_HEAD = 64 * 1024

_LENGTH = re.compile(rb"\r?\ncontent-length[ \t]*:[ \t]*([^\r\n]*)", re.IGNORECASE)
_CHUNKED = re.compile(rb"\r?\ntransfer-encoding[ \t]*:[^\r\n]*chunked", re.IGNORECASE)
_ENCODING = re.compile(rb"\r?\ntransfer-encoding[ \t]*:", re.IGNORECASE)
_EXPECT = re.compile(rb"\r?\nexpect[ \t]*:[ \t]*100-continue[ \t]*(?=\r?\n)", re.IGNORECASE)
_HTTP11 = re.compile(rb"^[^\r\n]* HTTP/1\.1\r?\n")


class Framing(enum.Enum):
    MORE = "more"  # not whole yet: keep reading
    WHOLE = "whole"  # the request (head and body) is all in the buffer
    PARSE = "parse"  # hand it to the parser as it is (it judges, or reads the rest itself)
    TOO_LARGE = "too large"  # a head past MAX_HEAD: 431


class RequestReader:
    """One request's bytes as they arrive; `feed` says whether it is whole yet. Incremental: each
    call looks only at what is new (a chunked body is walked once, however it trickles in)."""

    def __init__(self, max_body: int) -> None:
        self.max_body = max_body
        self.buffer = bytearray()
        self.head_end = 0  # 0 until the head's empty line arrived
        self.body_end: int | None = None  # a length-framed body's end offset
        self._chunk_at = 0  # a chunked body: where the next chunk's size line starts
        self._in_trailers = False
        self.wants_continue = False  # an HTTP/1.1 `Expect: 100-continue` whose body has not all come

    def feed(self, data: bytes) -> Framing:
        searched_from = max(len(self.buffer) - 3, 0)
        self.buffer += data
        if not self.head_end:
            end = _head_end(self.buffer, searched_from)
            if end is None:
                return Framing.TOO_LARGE if len(self.buffer) > MAX_HEAD else Framing.MORE
            if end > MAX_HEAD:
                return Framing.TOO_LARGE
            self.head_end = end
            framing = self._frame_body(bytes(self.buffer[:end]))
            if framing is not Framing.MORE:
                return framing
        return self._body_state()

    def _frame_body(self, head: bytes) -> Framing:
        if b"\r\n\r\n" not in head[-4:]:
            return Framing.PARSE  # a bare-LF head: the parser refuses it with its 400
        lengths = _LENGTH.findall(head)
        chunked = _CHUNKED.search(head) is not None
        if (_ENCODING.search(head) and not chunked) or (lengths and chunked) or len(lengths) > 1:
            return Framing.PARSE  # ambiguous framing: the parser's refusal, not our guess
        if chunked:
            self._chunk_at = self.head_end
        elif lengths:
            value = lengths[0].strip()
            if not value.isdigit():
                return Framing.PARSE
            if int(value) > self.max_body:
                return Framing.PARSE  # too big to buffer here: the thread reads it (or refuses it)
            self.body_end = self.head_end + int(value)
        else:
            self.body_end = self.head_end  # no body
        self.wants_continue = bool(_HTTP11.match(head)) and _EXPECT.search(head) is not None
        return Framing.MORE

    def _body_state(self) -> Framing:
        if self.body_end is not None:
            framing = Framing.WHOLE if len(self.buffer) >= self.body_end else Framing.MORE
        else:
            framing = self._walk_chunks()
        if framing is not Framing.MORE:
            self.wants_continue = False
        return framing

    def _walk_chunks(self) -> Framing:
        """Past every chunk that has fully arrived; WHOLE after the last chunk's trailers."""
        buffer = self.buffer
        while True:
            line_end = buffer.find(b"\r\n", self._chunk_at)
            if line_end < 0:
                return Framing.PARSE if len(buffer) - self._chunk_at > MAX_HEAD else Framing.MORE
            line = bytes(buffer[self._chunk_at : line_end])
            if self._in_trailers:
                self._chunk_at = line_end + 2
                if not line:
                    return Framing.WHOLE
                continue
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                return Framing.PARSE  # the parser's 400
            if size == 0:
                self._in_trailers = True
                self._chunk_at = line_end + 2
                continue
            if line_end + 2 + size - self.head_end > self.max_body:
                return Framing.PARSE
            data_end = line_end + 2 + size + 2
            if len(buffer) < data_end:
                return Framing.MORE
            self._chunk_at = data_end

    def without_expectation(self) -> bytes:
        """The buffer with its `Expect: 100-continue` line taken out: the front door answered it."""
        head = _EXPECT.sub(b"", bytes(self.buffer[: self.head_end]), count=1)
        return head + bytes(self.buffer[self.head_end :])


def _head_end(buffer: bytearray, start: int) -> int | None:
    """The offset just past the head's empty line (CRLF CRLF, or a bare LF LF the parser will
    refuse), or None before it arrived."""
    crlf = buffer.find(b"\r\n\r\n", start)
    lf = buffer.find(b"\n\n", start)
    ends = [end + size for end, size in ((crlf, 4), (lf, 2)) if end >= 0]
    return min(ends) if ends else None
