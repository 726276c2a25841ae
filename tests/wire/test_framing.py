"""FrameReader and encode_frame: bytes in, whole frames out, never buffering past the limit."""

from __future__ import annotations

import pytest

from subagentd.wire.framing import BadHeader, FrameReader, Oversize, encode_frame


def feed_bytewise(reader: FrameReader, data: bytes) -> list:
    frames = []
    for i in range(len(data)):
        frames += reader.feed(data[i : i + 1])
    return frames


def lsp(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


# --- NDJSON --------------------------------------------------------------------------------


def test_ndjson_line_split_across_chunks_is_one_frame():
    reader = FrameReader("ndjson")
    assert reader.feed(b'{"jsonrpc":') == []
    assert reader.feed(b'"2.0","id"') == []
    assert reader.feed(b':1}\n{"b"') == [b'{"jsonrpc":"2.0","id":1}']
    assert reader.feed(b":2}\n") == [b'{"b":2}']
    assert reader._buf == b""


def test_ndjson_lines_fed_byte_by_byte_come_out_whole_and_in_order():
    reader = FrameReader("ndjson")
    assert feed_bytewise(reader, b'{"a":1}\n[2]\n"three"\n') == [b'{"a":1}', b"[2]", b'"three"']


def test_ndjson_crlf_line_endings_are_tolerated():
    reader = FrameReader("ndjson")
    assert reader.feed(b'{"a":1}\r\n{"b":2}\r') == [b'{"a":1}']
    assert reader.feed(b"\n") == [b'{"b":2}']


def test_ndjson_blank_and_whitespace_lines_produce_no_frames():
    reader = FrameReader("ndjson")
    assert reader.feed(b"\n\n   \n\r\n\t\n") == []
    assert reader.feed(b'  {"a":1}  \n') == [b'{"a":1}']


def test_several_lines_in_one_chunk_are_separate_frames():
    reader = FrameReader("ndjson")
    assert reader.feed(b"1\n2\n3\n") == [b"1", b"2", b"3"]


def test_over_long_ndjson_line_in_one_chunk_is_one_oversize_and_next_frame_is_intact():
    reader = FrameReader("ndjson", max_frame_bytes=16)
    frames = reader.feed(b"x" * 17 + b"\n" + b'{"ok":true}\n')
    assert frames == [Oversize(16), b'{"ok":true}']


def test_ndjson_line_of_exactly_the_limit_is_accepted():
    reader = FrameReader("ndjson", max_frame_bytes=16)
    assert reader.feed(b"1" * 16 + b"\n") == [b"1" * 16]
    assert reader.feed(b"1" * 17 + b"\n") == [Oversize(16)]


def test_over_long_ndjson_line_across_chunks_is_discarded_without_buffering_it():
    limit = 64
    reader = FrameReader("ndjson", max_frame_bytes=limit)
    frames = []
    for _ in range(50):
        frames += reader.feed(b"y" * 10)
        assert len(reader._buf) <= limit
    frames += reader.feed(b'yyy\n{"next":1}\n')
    assert frames == [Oversize(limit), b'{"next":1}']
    assert reader._buf == b""


def test_over_long_ndjson_line_fed_byte_by_byte_never_buffers_past_the_limit():
    limit = 32
    reader = FrameReader("ndjson", max_frame_bytes=limit)
    frames = []
    for byte in b"z" * 500 + b"\n" + b"[1]\n":
        frames += reader.feed(bytes([byte]))
        assert len(reader._buf) <= limit
    assert frames == [Oversize(limit), b"[1]"]


def test_two_over_long_lines_give_two_oversize_frames():
    reader = FrameReader("ndjson", max_frame_bytes=8)
    assert reader.feed(b"a" * 20) == []
    assert reader.feed(b"\n" + b"b" * 20 + b"\n" + b"{}\n") == [Oversize(8), Oversize(8), b"{}"]


def test_unterminated_last_line_is_returned_by_finish():
    reader = FrameReader("ndjson")
    assert reader.feed(b'{"a":1}\n{"b":2}') == [b'{"a":1}']
    assert reader.finish() == [b'{"b":2}']
    assert reader.finish() == []


def test_finish_reports_an_over_long_unterminated_line_as_oversize():
    reader = FrameReader("ndjson", max_frame_bytes=4)
    assert reader.feed(b"123456789") == []
    assert reader.finish() == [Oversize(4)]


def test_finish_with_only_whitespace_left_gives_nothing():
    reader = FrameReader("auto")
    assert reader.feed(b"  \r") == []
    assert reader.finish() == []


# --- auto-detection ------------------------------------------------------------------------


def test_auto_mode_picks_ndjson_for_a_json_first_byte():
    reader = FrameReader("auto")
    assert reader.feed(b'{"a":1}\n') == [b'{"a":1}']
    assert reader.mode == "ndjson"
    assert reader.lsp is False


def test_auto_mode_picks_lsp_for_a_content_length_header():
    reader = FrameReader("auto")
    assert reader.feed(lsp(b'{"a":1}')) == [b'{"a":1}']
    assert reader.mode == "lsp"
    assert reader.lsp is True


def test_auto_mode_detects_content_length_arriving_byte_by_byte():
    reader = FrameReader("auto")
    data = lsp(b'{"id":1}') + lsp(b'{"id":2}')
    frames = []
    for i, byte in enumerate(data):
        frames += reader.feed(bytes([byte]))
        if i < len("Content-Length") - 1:
            assert reader.mode == "auto", "decided before the prefix was complete"
    assert reader.mode == "lsp"
    assert frames == [b'{"id":1}', b'{"id":2}']


def test_auto_mode_falls_back_to_ndjson_when_the_prefix_diverges():
    reader = FrameReader("auto")
    assert reader.feed(b"Con") == []
    assert reader.mode == "auto"
    assert reader.feed(b"fusion\n") == [b"Confusion"]
    assert reader.mode == "ndjson"


def test_auto_mode_skips_leading_blank_lines_before_deciding():
    reader = FrameReader("auto")
    assert reader.feed(b"\n\r\n  ") == []
    assert reader.mode == "auto"
    assert reader.feed(b"[1]\n") == [b"[1]"]
    assert reader.mode == "ndjson"


def test_auto_mode_tolerates_blank_lines_before_an_lsp_header():
    reader = FrameReader("auto")
    assert reader.feed(b"\r\n\r\n") == []
    assert reader.feed(lsp(b"{}")) == [b"{}"]
    assert reader.mode == "lsp"


def test_forced_ndjson_mode_does_not_switch_to_lsp():
    reader = FrameReader("ndjson")
    assert reader.feed(b"Content-Length: 2\r\n\r\n{}\n") == [b"Content-Length: 2", b"{}"]


# --- LSP -----------------------------------------------------------------------------------


def test_lsp_frames_merged_in_one_chunk_are_split():
    reader = FrameReader("lsp")
    assert reader.feed(lsp(b"[1]") + lsp(b'{"x":"y"}') + lsp(b"2")) == [b"[1]", b'{"x":"y"}', b"2"]


@pytest.mark.parametrize("cut", range(1, 40))
def test_lsp_frame_split_at_any_byte_is_reassembled(cut):
    reader = FrameReader("lsp")
    data = lsp(b'{"jsonrpc":"2.0","id":7}') + lsp(b"[]")
    assert reader.feed(data[:cut]) + reader.feed(data[cut:]) == [b'{"jsonrpc":"2.0","id":7}', b"[]"]


def test_lsp_body_may_contain_newlines_and_header_like_text():
    reader = FrameReader("lsp")
    body = b'{"a":\n"Content-Length: 5\\r\\n\\r\\n"}'
    assert reader.feed(lsp(body)) == [body]


def test_lsp_extra_headers_and_case_insensitive_name_are_accepted():
    reader = FrameReader("lsp")
    data = b"content-length: 2\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{}"
    assert reader.feed(data) == [b"{}"]


def test_lsp_zero_length_body_is_an_empty_frame_at_once():
    reader = FrameReader("lsp")
    assert reader.feed(b"Content-Length: 0\r\n\r\n") == [b""]
    assert reader.feed(lsp(b"1")) == [b"1"]


def test_over_long_lsp_frame_is_skipped_without_buffering_it():
    limit = 64
    reader = FrameReader("lsp", max_frame_bytes=limit)
    data = lsp(b"x" * 10_000) + lsp(b'{"after":1}')
    frames = []
    for start in range(0, len(data), 7):
        frames += reader.feed(data[start : start + 7])
        assert len(reader._buf) <= limit
    assert frames == [Oversize(limit), b'{"after":1}']


def test_over_long_lsp_frame_in_one_chunk_is_one_oversize_and_next_frame_is_intact():
    reader = FrameReader("lsp", max_frame_bytes=10)
    assert reader.feed(lsp(b"1" * 11) + lsp(b"1" * 10)) == [Oversize(10), b"1" * 10]
    assert len(reader._buf) == 0


def test_oversize_is_reported_only_once_the_whole_body_was_skipped():
    reader = FrameReader("lsp", max_frame_bytes=10)
    assert reader.feed(b"Content-Length: 100\r\n\r\n" + b"x" * 99) == []
    assert reader.feed(b"x") == [Oversize(10)]


@pytest.mark.parametrize(
    ("header", "detail"),
    [
        (b"Content-Length: abc", "Content-Length is not a number"),
        (b"Content-Length: -5", "Content-Length is negative"),
        (b"Content-Type: text/plain", "missing Content-Length header"),
        (b"Content-Length: 2\r\nno colon here", "malformed header line b'no colon here'"),
    ],
)
def test_bad_lsp_headers_are_reported_and_the_next_frame_still_works(header, detail):
    reader = FrameReader("lsp")
    assert reader.feed(header + b"\r\n\r\n" + lsp(b"{}")) == [BadHeader(detail), b"{}"]


def test_endless_lsp_header_block_is_cut_off():
    reader = FrameReader("lsp")
    frames = []
    for _ in range(20):
        frames += reader.feed(b"X-Padding: " + b"p" * 1000 + b"\r\n")
        assert len(reader._buf) <= 8192 + 1100
    assert frames == [BadHeader("header block too long")] * len(frames)
    assert len(frames) >= 1


# --- encoding ------------------------------------------------------------------------------


def test_encode_frame_ndjson_appends_one_newline():
    assert encode_frame(b'{"a":1}', lsp=False) == b'{"a":1}\n'


def test_encode_frame_lsp_prefixes_the_byte_length():
    body = '{"t":"é"}'.encode()
    assert encode_frame(body, lsp=True) == b"Content-Length: 10\r\n\r\n" + body


def test_encoded_frames_decode_back_in_both_modes():
    bodies = [b"{}", b'{"a":[1,2]}', '["ü"]'.encode()]
    for mode, lsp_mode in (("ndjson", False), ("lsp", True)):
        reader = FrameReader(mode)
        data = b"".join(encode_frame(b, lsp_mode) for b in bodies)
        assert feed_bytewise(reader, data) == bodies
