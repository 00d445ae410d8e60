"""Where a request ends (gateway/http/requestframing.py), as the front door sees bytes arrive: the
head, a length-framed or chunked body, and what it leaves to gunicorn's parser to judge."""

from __future__ import annotations

import pytest

from gateway.http.requestframing import MAX_HEAD, Framing, RequestReader

HEAD = b"POST /x HTTP/1.1\r\nHost: h\r\n"


def fed(*parts: bytes, max_body: int = 1 << 20) -> list[Framing]:
    reader = RequestReader(max_body)
    return [reader.feed(part) for part in parts]


def test_a_head_and_body_arriving_a_byte_at_a_time():
    request = HEAD + b"Content-Length: 5\r\n\r\nhello"
    states = fed(*[request[i : i + 1] for i in range(len(request))])
    assert states[-1] is Framing.WHOLE and set(states[:-1]) == {Framing.MORE}


def test_no_body_is_whole_at_the_empty_line():
    assert fed(b"GET / HTTP/1.1\r\nHost: h\r\n", b"\r\n") == [Framing.MORE, Framing.WHOLE]


def test_a_chunked_body_with_extensions_and_trailers():
    body = b"5;ext=1\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n"
    states = fed(HEAD + b"Transfer-Encoding: chunked\r\n\r\n", body[:9], body[9:20], body[20:])
    assert states == [Framing.MORE, Framing.MORE, Framing.MORE, Framing.WHOLE]


@pytest.mark.parametrize(
    "head",
    [
        HEAD + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n",  # repeated length
        HEAD + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",  # both framings
        HEAD + b"Transfer-Encoding: gzip\r\n\r\n",  # a coding without chunked
        HEAD + b"Content-Length: -1\r\n\r\n",
        b"GET / HTTP/1.1\nHost: h\n\n",  # bare LF
        HEAD + b"Content-Length: 99999999\r\n\r\n",  # larger than the loop buffers
    ],
)
def test_what_the_framing_cannot_be_sure_of_goes_to_the_parser(head):
    assert fed(head)[-1] is Framing.PARSE


def test_a_head_past_the_limit_is_too_large_even_unfinished():
    assert fed(HEAD + b"X: " + b"a" * MAX_HEAD)[-1] is Framing.TOO_LARGE


def test_expect_100_continue_is_wanted_until_the_body_arrives_and_then_taken_out():
    reader = RequestReader(1 << 20)
    assert reader.feed(HEAD + b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\n") is Framing.MORE
    assert reader.wants_continue
    assert reader.feed(b"ok") is Framing.WHOLE and not reader.wants_continue
    assert reader.without_expectation() == HEAD + b"Content-Length: 2\r\n\r\nok"
    http10 = RequestReader(1 << 20)
    http10.feed(b"POST /x HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
    assert not http10.wants_continue  # RFC 9110 10.1.1: ignored in HTTP/1.0
