"""Merge the guest's WDDM-GUEST-JSON report with what the backend logged, for scripts/demo."""

import json
import re
import sys


def main() -> int:
    qemu_log, backend_log, guest_rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
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
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
