"""QEMU's `info pci` (the human monitor's text, e.g. through QMP human-monitor-command), parsed:
each function's block of lines, its BARs, and an assigned BAR's address range. Standard library
only.

  python3 -m gpuhost.info_pci bar DEVICE FUNCTION BAR < info-pci.txt
      prints "0xSTART SIZE DESCRIPTION" of that BAR of bus 0's function when the firmware
      assigned it; exit 1 (nothing printed) when it is absent or not assigned
"""

import re
import sys

FUNCTION_RE = re.compile(r"^\s*Bus\s+(\d+), device\s+(\d+), function (\d+):")
BAR_RE = re.compile(r"^\s*BAR(\d): (.*)$")
BAR_AT_RE = re.compile(r"at (0x[0-9a-fA-F]+) \[(0x[0-9a-fA-F]+)\]")


def functions(text):
    """{(device, function): the function's lines} of bus 0 and every other bus alike."""
    found, current = {}, None
    for line in text.splitlines():
        m = FUNCTION_RE.match(line)
        if m:
            current = (int(m.group(2)), int(m.group(3)))
            found[current] = []
        if current is not None:
            found[current].append(line)
    return {key: "\n".join(lines) for key, lines in found.items()}


def bars(block):
    """{bar: description} of one function's block."""
    return {int(m.group(1)): m.group(2).strip()
            for m in map(BAR_RE.match, block.splitlines()) if m}


def bar_range(description):
    """(start, size) of an assigned BAR, or None."""
    m = BAR_AT_RE.search(description)
    if not m:
        return None
    start, end = int(m.group(1), 16), int(m.group(2), 16)
    return start, end - start + 1

# Where QEMU shows a BAR that is not mapped (PCI_BAR_UNMAPPED).
UNMAPPED = 0xFFFF_FFFF_FFFF_FFFF


def assigned_range(description):
    """(start, size) of a BAR the firmware assigned; None for one absent, at 0 or not mapped."""
    where = bar_range(description)
    if where is None or where[0] in (0, UNMAPPED) or "not mapped" in description:
        return None
    return where


def main(argv):
    if len(argv) != 4 or argv[0] != "bar" or not all(a.isdigit() for a in argv[1:]):
        print("usage: python3 -m gpuhost.info_pci bar DEVICE FUNCTION BAR < info-pci.txt",
              file=sys.stderr)
        return 2
    device, function, bar = (int(a) for a in argv[1:])
    description = bars(functions(sys.stdin.read()).get((device, function), "")).get(bar, "")
    where = assigned_range(description)
    if where is None:
        return 1
    print(f"{where[0]:#x} {where[1]} {description}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
