"""The compressing step: zlib, only when it makes the body smaller, and
decompression bounded so that a small body cannot expand without limit."""
from __future__ import annotations

import zlib

from kale.codec.pipeline import COMPRESSION as HEADER
from kale.codec.pipeline import Frame
from kale.exceptions import DecodeError

#: Header values: 'z' when the data is zlib-compressed, '-' when not.
COMPRESSED, PLAIN = 'z', '-'


def base64_length(n: int) -> int:
    """Characters that ``n`` bytes take in base64."""
    return 4 * ((n + 2) // 3)


class CompressStep:
    """Compress payloads of at least ``min_bytes`` when that saves space on the wire."""

    name = 'compress'
    plain_header = (HEADER, PLAIN)       # not compressed: decode does nothing

    def __init__(self, min_bytes: int, max_decompressed_bytes: int):
        self.min_bytes = min_bytes
        self.max_decompressed_bytes = max_decompressed_bytes

    def encode(self, frame: Frame) -> None:
        frame.headers[HEADER] = PLAIN
        if len(frame.data) < self.min_bytes:
            return
        squeezed = zlib.compress(frame.data, 6)
        # Compressed data always travels as base64; compare the wire sizes.
        wire_length = len(frame.data) if frame.text else base64_length(len(frame.data))
        if base64_length(len(squeezed)) < wire_length:
            frame.data, frame.text = squeezed, False
            frame.headers[HEADER] = COMPRESSED

    def decode(self, frame: Frame) -> None:
        flag = frame.headers.get(HEADER, PLAIN)
        if flag == PLAIN:
            return
        if flag != COMPRESSED:
            raise DecodeError(DecodeError.CORRUPT, 'unknown compression flag %r' % (flag,))
        inflater = zlib.decompressobj()
        try:
            raw = inflater.decompress(frame.data, self.max_decompressed_bytes)
        except zlib.error as exc:
            raise DecodeError(DecodeError.CORRUPT, 'zlib: %s' % exc) from exc
        if inflater.unconsumed_tail:
            raise DecodeError(DecodeError.CORRUPT, 'decompresses to more than %d bytes '
                              '(MAX_DECOMPRESSED_BYTES)' % self.max_decompressed_bytes)
        if not inflater.eof:
            raise DecodeError(DecodeError.CORRUPT, 'compressed data is truncated')
        frame.data = raw

