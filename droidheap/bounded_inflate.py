"""Inflating bytes someone else compressed: pprof files, stored results, an ELF file's compressed
sections and its MiniDebugInfo. A few KiB of zlib can claim (or be) gigabytes, so what anything
inflates is bounded by what its compressed bytes could honestly hold: real profiles, JSON and
DWARF compress 3 to 20 times, so past MAX_RATIO times (at least FLOOR, at most CEILING) the input
is refused, never inflated further.
"""
import lzma
import zlib

from droidheap.errors import DroidheapError

MAX_RATIO = 100
FLOOR = 1 << 20  # small inputs: a header and a few rows may compress better than MAX_RATIO
CEILING = 1 << 30  # however large the input, nothing droidheap reads inflates past this

GZIP = 16 + zlib.MAX_WBITS
ZLIB = zlib.MAX_WBITS
XZ = "xz"


def inflate_limit(compressed_size: int, ceiling: int = CEILING, ratio: int = MAX_RATIO) -> int:
    """The most that `compressed_size` bytes may honestly inflate to."""
    return min(ceiling, max(FLOOR, ratio * compressed_size))


def check_claim(what: str, claimed: int, compressed_size: int) -> None:
    """Refuses (DroidheapError) a header's claim that `compressed_size` bytes inflate to
    `claimed`, before anything is inflated."""
    limit = inflate_limit(compressed_size)
    if claimed > limit:
        raise DroidheapError(_too_large(what, limit, compressed_size))


def _too_large(what: str, limit: int, compressed_size: int, ratio: int = MAX_RATIO) -> str:
    # The ratio's limit, else the floor's or the ceiling's.
    past = f"{ratio} times its size" if limit == ratio * compressed_size else f"{limit} bytes"
    return f"{what} inflates to more than {past}: more than it could honestly hold"


def inflate(data: bytes, what: str, kind=GZIP, ceiling: int = CEILING,
            ratio: int = MAX_RATIO) -> bytes:
    """`data` (GZIP, ZLIB or XZ) inflated; DroidheapError naming `what` when it would pass
    inflate_limit, is damaged or ends before its compressed stream does. `ratio`: a tighter one
    for input whose every inflated byte costs several more once parsed."""
    limit = inflate_limit(len(data), ceiling, ratio)
    out = bytearray()
    rest = data
    while True:
        inflater = (lzma.LZMADecompressor(format=lzma.FORMAT_XZ) if kind == XZ
                    else zlib.decompressobj(wbits=kind))
        try:
            # One byte past the limit tells a stream that stops at it from one that goes on.
            out += inflater.decompress(rest, limit + 1 - len(out))
        except (zlib.error, lzma.LZMAError, EOFError) as e:
            raise DroidheapError(f"{what} is damaged: {e}") from e
        if len(out) > limit:
            raise DroidheapError(_too_large(what, limit, len(data), ratio))
        if not inflater.eof:
            raise DroidheapError(f"{what} is damaged: it ends before its compressed data does")
        # A gzip file may be several members one after the other (gzip(1) reads them all).
        rest = inflater.unused_data
        if kind != GZIP or not rest:
            return bytes(out)
