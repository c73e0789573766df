"""Merge the guest's WDDM-GUEST-JSON report with what the backend logged, for scripts/demo.

Arguments: QEMU log, backend log, guest exit code, and a file holding `check-layout --json`
output (empty when the default layout is used): the layout the guest read from the device is
compared with it field by field.
"""

import json
import re
import sys


def summary(report_text: str) -> int:
    """Prints the checks as a table; exit status 0 only when every check passed."""
    report = json.loads(report_text)
    for name, ok in report["checks"].items():
        print(f"  {name:36} {'PASS' if ok else 'FAIL'}")
    for mismatch in report.get("layout_mismatches", []):
        print(f"  mismatch: {mismatch}")
    return 0 if all(report["checks"].values()) else 1


def main() -> int:
    if sys.argv[1] == "--summary":
        return summary(sys.argv[2])
    qemu_log, backend_log, guest_rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
    expected_file = sys.argv[4] if len(sys.argv) > 4 else None
    report = None
    with open(qemu_log, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("WDDM-GUEST-JSON "):
                report = json.loads(line[len("WDDM-GUEST-JSON "):])
    if report is None:
        return 1
    with open(backend_log, encoding="utf-8", errors="replace") as f:
        mapped = re.findall(r"VRAM BAR mapped at guest-physical (0x[0-9a-f]+)", f.read())
    backend_bar = int(mapped[-1], 16) if mapped else None
    report["backend_bar_address"] = backend_bar
    report["checks"]["backend_saw_guest_bar_address"] = backend_bar == report.get("vram_bar_address")
    report["checks"]["guest_exit_ok"] = guest_rc == 0
    with open(expected_file, encoding="utf-8") as f:
        text = f.read().strip()
    if text:
        mismatches = compare_layouts(json.loads(text), report)
        report["layout_mismatches"] = mismatches
        report["checks"]["layout_matches_check_layout"] = not mismatches
    print(json.dumps(report))
    return 0


SEGMENT_FIELDS = ("id", "flags", "base_address", "size", "commit_limit", "bar_offset",
                  "system_memory_end_address", "banks")
LAYOUT_FIELDS = ("wddm_version", "paging_buffer_segment_id", "paging_buffer_size",
                 "paging_buffer_private_data_size")


def compare_layouts(host: dict, guest: dict) -> list:
    """Every field where the guest's view differs from the host's check-layout output."""
    mismatches = []
    for field in LAYOUT_FIELDS:
        if host.get(field) != guest.get(field):
            mismatches.append(f"{field}: host {host.get(field)!r}, guest {guest.get(field)!r}")
    host_segments, guest_segments = host["segments"], guest.get("segments", [])
    if len(host_segments) != len(guest_segments):
        mismatches.append(f"segment count: host {len(host_segments)}, guest {len(guest_segments)}")
    for h, g in zip(host_segments, guest_segments):
        for field in SEGMENT_FIELDS:
            if h.get(field) != g.get(field):
                mismatches.append(
                    f"segment {h['id']} {field}: host {h.get(field)!r}, guest {g.get(field)!r}")
    return mismatches


if __name__ == "__main__":
    sys.exit(main())
