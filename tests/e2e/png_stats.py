#!/usr/bin/python3
"""How much a PNG screenshot shows, with nothing but the standard library
(zlib): the e2e report test asks whether Chromium drew a page or a blank.

    png_stats.py FILE                  -> "WIDTH HEIGHT COLOURS NONWHITE_FRACTION"
    png_stats.py FILE --crop Y0 Y1 OUT -> rows [Y0, Y1) written to OUT as a PNG

Reads 8-bit RGB or RGBA, non-interlaced PNGs (what Chromium writes); anything
else is an error, so that a format change fails loudly instead of passing.
"""
import struct
import sys
import zlib


def read_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{path}: not a PNG")
    pos, idat, hdr = 8, [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if hdr is None:
        sys.exit(f"{path}: no IHDR")
    w, h, depth, ctype, _, _, interlace = hdr
    if depth != 8 or ctype not in (2, 6) or interlace:
        sys.exit(f"{path}: depth {depth}, colour type {ctype}, interlace {interlace}: not handled")
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = w * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(h):
        ftype = raw[i]
        line = bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if ftype == 1:
                line[x] = (line[x] + a) & 255
            elif ftype == 2:
                line[x] = (line[x] + b) & 255
            elif ftype == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[x] = (line[x] + pred) & 255
            elif ftype != 0:
                sys.exit(f"{path}: unknown filter {ftype}")
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def write_png(path, w, rows, bpp):
    ctype = 2 if bpp == 3 else 6
    raw = b"".join(b"\x00" + r for r in rows)

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", w, len(rows), 8, ctype, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 9)))
        f.write(chunk(b"IEND", b""))


def main():
    path = sys.argv[1]
    w, h, bpp, rows = read_png(path)
    if len(sys.argv) == 6 and sys.argv[2] == "--crop":
        y0, y1 = int(sys.argv[3]), int(sys.argv[4])
        write_png(sys.argv[5], w, rows[y0:y1], bpp)
        return
    colours, nonwhite = set(), 0
    for r in rows:
        for x in range(0, w * bpp, bpp):
            px = r[x:x + 3]
            colours.add(px)
            nonwhite += px != b"\xff\xff\xff"
    print(w, h, len(colours), f"{nonwhite / (w * h):.4f}")


if __name__ == "__main__":
    main()
