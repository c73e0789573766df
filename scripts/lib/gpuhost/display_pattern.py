"""Screendumps for the display tests: read QEMU's PPM screendump, compare it pixel for pixel with
the known pattern guest-tests/display/display-check.c draws, or describe its colours.

  python3 -m gpuhost.display_pattern compare FILE.ppm WIDTH HEIGHT   exit 0 iff FILE is exactly the pattern
  python3 -m gpuhost.display_pattern stats FILE.ppm                  exit 0 iff FILE is not a single colour

Standard library only.
"""

import collections
import sys


class PpmError(Exception):
    """The file is not a binary 8-bit PPM (P6) QEMU would write."""


def read_ppm(path):
    """(width, height, rgb bytes) of a binary PPM."""
    with open(path, "rb") as f:
        data = f.read()
    fields, pos = [], 0
    while len(fields) < 4:
        while pos < len(data) and data[pos:pos + 1].isspace():
            pos += 1
        if data[pos:pos + 1] == b"#":
            pos = data.index(b"\n", pos) + 1
            continue
        end = pos
        while end < len(data) and not data[end:end + 1].isspace():
            end += 1
        if end == pos:
            raise PpmError(f"{path}: truncated header")
        fields.append(data[pos:end])
        pos = end
    magic, width, height, maxval = fields[0], int(fields[1]), int(fields[2]), int(fields[3])
    if magic != b"P6" or maxval != 255:
        raise PpmError(f"{path}: {magic!r} with maxval {maxval}, expected P6 with 255")
    pixels = data[pos + 1:]
    if len(pixels) != width * height * 3:
        raise PpmError(f"{path}: {len(pixels)} pixel bytes for {width}x{height}")
    return width, height, pixels


def pattern_row(y, width, variant="a"):
    """Row y of the pattern as RGB bytes (display-check.c: pattern_rgb); variant "b" is "a" with
    every byte inverted (guest-tests/src/scenario/scanout.rs draws both)."""
    row = bytearray(width * 3)
    for x in range(width):
        row[3 * x] = (x ^ y) & 0xFF
        row[3 * x + 1] = ((x + y) >> 2) & 0xFF
        row[3 * x + 2] = (7 * x + 13 * y) & 0xFF
    if variant == "b":
        row = bytearray(b ^ 0xFF for b in row)
    return row


def compare(path, width, height, variant="a"):
    """(ok, detail): is the screendump exactly the width x height pattern (variant a or b)?"""
    got_w, got_h, pixels = read_ppm(path)
    if (got_w, got_h) != (width, height):
        return False, f"screendump is {got_w}x{got_h}, the guest drew {width}x{height}"
    stride = width * 3
    bad, first = 0, None
    for y in range(height):
        want = pattern_row(y, width, variant)
        got = pixels[y * stride:(y + 1) * stride]
        if got == want:
            continue
        for x in range(width):
            if got[3 * x:3 * x + 3] != want[3 * x:3 * x + 3]:
                bad += 1
                if first is None:
                    first = (x, y, tuple(got[3 * x:3 * x + 3]), tuple(want[3 * x:3 * x + 3]))
    total = width * height
    if bad == 0:
        return True, f"{width}x{height}: all {total} pixels match pattern {variant}"
    x, y, got, want = first
    return False, (f"{width}x{height}: {bad} of {total} pixels differ from pattern {variant};"
                   f" first at ({x},{y}):"
                   f" rgb{got}, expected rgb{want}")


def colour_count(path):
    """(distinct colours, detail): how many colours, and how much of the screen the commonest
    covers."""
    width, height, pixels = read_ppm(path)
    counts = collections.Counter(pixels[i:i + 3] for i in range(0, len(pixels), 3))
    (top, n), total = counts.most_common(1)[0], width * height
    detail = (f"{width}x{height}: {len(counts)} distinct colours; commonest rgb{tuple(top)}"
              f" covers {100.0 * n / total:.1f}%")
    return len(counts), detail


# QEMU's console shows its own text while no guest frame is up ("Guest has not initialized the
# display (yet)", "Display output is not active"): white on black, two colours. A frame the
# firmware drew (OVMF's logo, its text) has more.
PLACEHOLDER_COLOURS = 2


def firmware_frame(path):
    """(ok, detail): ok when the screen has more colours than QEMU's placeholder text, so a
    guest drew it; detail as colour_count."""
    colours, detail = colour_count(path)
    return colours > PLACEHOLDER_COLOURS, detail


def colour_stats(path):
    """(ok, detail): ok when the screen is not a single colour; detail as colour_count."""
    colours, detail = colour_count(path)
    return colours > 1, detail


def main():
    try:
        if len(sys.argv) == 5 and sys.argv[1] == "compare":
            ok, detail = compare(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        elif len(sys.argv) == 3 and sys.argv[1] == "stats":
            ok, detail = colour_stats(sys.argv[2])
        else:
            sys.exit(__doc__)
    except (OSError, PpmError, ValueError) as err:
        print(err)
        return 1
    print(detail)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
