"""Merge the guest's WDDM-GUEST-JSON report with what the backend logged, for scripts/demo
(`python3 -m gpuhost.demo_report ...`).

Arguments: QEMU log, backend log, guest exit code, a file holding `check-layout --json`
output (empty when the default layout is used): the layout the guest read from the device is
compared with it field by field; then optionally 1 when the guest ran its benchmark (the
`guest_bench` object must then be there, every backend kind measured and checked:
`guest_bench_ok`), and the files holding the backend's `stats --json` output (as
`backend_stats`) and why it is missing (as `backend_stats_missing`).

`--summary REPORT` prints the checks; `--bench REPORT` prints the guest benchmark per kind;
`--trace FILE` checks a backend `--trace` timeline (every packet inside its submission's span)
and prints what it holds.
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


# The backend's packet kind names: the guest benchmark reports one row per kind.
BENCH_KINDS = ("transfer", "fill", "discard_content", "read_physical", "write_physical",
               "map_aperture", "map_aperture2", "unmap_aperture", "fence")


def bench_ok(bench) -> bool:
    """Every backend kind was measured and its results checked."""
    if not isinstance(bench, dict) or bench.get("ok") is not True:
        return False
    kinds = bench.get("kinds", {})
    return all(kind in kinds and kinds[kind].get("verified") is True
               and (kinds[kind].get("count") or 0) > 0 for kind in BENCH_KINDS)


def bench_table(report_text: str) -> int:
    """Prints the guest benchmark, one line per kind."""
    bench = json.loads(report_text).get("guest_bench")
    if not isinstance(bench, dict) or "kinds" not in bench:
        error = bench.get("error") if isinstance(bench, dict) else None
        print(f"  no benchmark results{': ' + error if error else ''}")
        return 1

    def num(value, width, decimals=1):
        return f"{'-':>{width}}" if value is None else f"{value:{width}.{decimals}f}"

    print(f"  {'kind':16} {'count':>6} {'bytes':>11} {'pages':>7} {'p50_us':>9} {'p99_us':>9} "
          f"{'max_us':>9} {'MB/s':>9} {'pages/s':>10}  check")
    for kind in BENCH_KINDS:
        k = bench["kinds"].get(kind)
        if k is None:
            print(f"  {kind:16} (not measured)")
            continue
        print(f"  {kind:16} {k['count']:>6} {k['bytes']:>11} {k['pages']:>7} "
              f"{num(k['p50_us'], 9)} {num(k['p99_us'], 9)} {num(k['max_us'], 9)} "
              f"{num(k['mb_per_s'], 9)} {num(k['pages_per_s'], 10, 0)}  "
              f"{'ok' if k.get('verified') else 'FAIL'}")
    print(f"  ({bench.get('iterations')} iterations per operation, {bench.get('seconds')} s in all; "
          f"latency: {bench.get('latency')})")
    return 0 if bench_ok(bench) else 1


def check_trace(path: str) -> int:
    """Checks a Chrome trace-event timeline; exit status 0 when it is sound."""
    with open(path, encoding="utf-8") as f:
        text = f.read().rstrip()
    # The closing bracket is written when the backend exits; the format allows it missing.
    if not text.endswith("]"):
        text = text.rstrip(",") + "]"
    events = json.loads(text)
    submissions = {e["args"]["fence"]: e for e in events if e.get("cat") == "submission"}
    packets = [e for e in events if e.get("cat") == "packet"]
    problems = []
    for packet in packets:
        owner = submissions.get(packet["args"]["fence"])
        if owner is None:
            problems.append(f"packet at fence {packet['args']['fence']} has no submission")
            continue
        end = owner["ts"] + owner["dur"]
        if packet["ts"] < owner["ts"] or packet["ts"] + packet["dur"] > end + 1e-3:
            problems.append(f"packet {packet['name']} of fence {packet['args']['fence']} "
                            "lies outside its submission")
    kinds = sorted({p["name"] for p in packets})
    print(f"trace {path}: {len(submissions)} submissions, {len(packets)} packets "
          f"({', '.join(kinds)}); open it in ui.perfetto.dev or chrome://tracing")
    for problem in problems[:10]:
        print(f"  {problem}")
    return 0 if submissions and packets and not problems else 1


def read_text(path):
    """The file's text, stripped; None when there is no such file or it is empty."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip() or None
    except OSError:
        return None


def main() -> int:
    if sys.argv[1] == "--summary":
        return summary(sys.argv[2])
    if sys.argv[1] == "--bench":
        return bench_table(sys.argv[2])
    if sys.argv[1] == "--trace":
        return check_trace(sys.argv[2])
    qemu_log, backend_log, guest_rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
    expected_file = sys.argv[4] if len(sys.argv) > 4 else None
    with_bench = len(sys.argv) > 5 and sys.argv[5] == "1"
    stats_file = sys.argv[6] if len(sys.argv) > 6 else None
    stats_why_file = sys.argv[7] if len(sys.argv) > 7 else None
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
    if with_bench:
        report.setdefault("guest_bench", None)
        report["checks"]["guest_bench_ok"] = bench_ok(report["guest_bench"])
        stats = read_text(stats_file) if stats_file else None
        try:
            report["backend_stats"] = json.loads(stats) if stats else None
        except json.JSONDecodeError:
            report["backend_stats"] = None
        report["backend_stats_missing"] = None if report["backend_stats"] is not None else (
            (read_text(stats_why_file) if stats_why_file else None)
            or "`stats --json` gave no JSON")
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
