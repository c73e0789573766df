"""QEMU's `info pci` (the human monitor's text, e.g. through QMP human-monitor-command), parsed:
each function's block of lines, its BARs, and an assigned BAR's address range. Standard library
only."""

import re

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
