#!/usr/bin/env python3
"""Draws a Chrome/Perfetto trace written by `amk trace` (or Amk.Launcher.get_trace_json)
as a PNG timeline: one row per SM, one coloured bar per instruction, time to the right.

Usage: amk-trace-to-png.py trace.json timeline.png [--width 1600] [--row 6]

Needs only the Python standard library (the PNG is written with zlib)."""
import argparse
import json
import struct
import sys
import zlib

# one colour per opcode name; unknown names get grey
COLOURS = {
    "nop": (160, 160, 160), "copy": (31, 119, 180), "fill": (44, 160, 44),
    "add": (255, 127, 14), "trap": (214, 39, 40), "grid-sync": (148, 103, 189),
    "matvec": (31, 119, 180), "rmsnorm": (23, 190, 207), "silu-mul": (255, 127, 14),
    "embed": (140, 86, 75), "argmax-partial": (227, 119, 194), "argmax-final": (227, 119, 194),
    "rope-kv": (188, 189, 34), "attn-decode": (214, 39, 40), "attn-reduce": (148, 103, 189),
}


def write_png(path, width, height, pixels):
    """pixels: bytearray of width*height*3 RGB bytes."""
    raw = b"".join(b"\x00" + bytes(pixels[y * width * 3:(y + 1) * width * 3]) for y in range(height))

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xffffffff)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 9)))
        f.write(chunk(b"IEND", b""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("png")
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--row", type=int, default=6, help="pixels per SM row")
    args = ap.parse_args()

    with open(args.trace) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    if not events:
        sys.exit("amk-trace-to-png: the trace has no events")
    sms = sorted({e["tid"] for e in events})
    row_of = {sm: i for i, sm in enumerate(sms)}
    t0 = min(e["ts"] for e in events)
    t1 = max(e["ts"] + e["dur"] for e in events)
    span = max(t1 - t0, 1e-9)
    width, height = args.width, len(sms) * args.row
    px = bytearray([255]) * (width * height * 3)

    for e in events:
        x0 = int((e["ts"] - t0) / span * (width - 1))
        x1 = max(x0 + 1, int((e["ts"] + e["dur"] - t0) / span * (width - 1)))
        colour = COLOURS.get(e["name"], (90, 90, 90))
        y0 = row_of[e["tid"]] * args.row
        for y in range(y0, y0 + args.row - 1):   # one blank line between rows
            base = (y * width) * 3
            for x in range(x0, min(x1, width)):
                px[base + 3 * x:base + 3 * x + 3] = bytes(colour)
    write_png(args.png, width, height, px)
    print(f"{args.png}: {len(events)} instructions on {len(sms)} SMs over {span:.1f} us")


if __name__ == "__main__":
    main()
