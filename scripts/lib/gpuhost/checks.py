"""scripts/test's judgements of what other programs printed, each a function returning its
error (None when it passed) and a command:

  python3 -m gpuhost.checks msrv README COMMON_SH < `cargo metadata --format-version 1` output
      the minimum Rust the workspace states (and the README and scripts/lib/common.sh repeat) is
      the newest rust-version among the locked dependencies
  python3 -m gpuhost.checks bench JSON           scripts/bench --json reported every figure
  python3 -m gpuhost.checks display-bench JSON   scripts/bench --display --json: ours answered
      (the ratios against the C backend are printed, never judged)
  python3 -m gpuhost.checks soak JSON            scripts/bench --soak 1000000 --json: every
      submission done and the backend's RSS flat
  python3 -m gpuhost.checks replay LIVE REPLAYED [--virtual]  a recorded guest run replayed:
      the replay's counts (`replay --json`), per node too, equal the live ones the backend
      left (FILE.stats.json), every answer matched and every context command was applied;
      with --virtual the live run must have used the virtual node

Exit 0 when the check passed; otherwise its error on stderr and exit 1. Standard library only.
"""

import json
import re
import sys

# What scripts/bench --json must report, each a positive number.
BENCH_FIGURES = [
    "memcpy_gbps", "scattered_memcpy_gbps", "scattered_memcpy_into_vram_gbps", "transfer_gbps",
    "transfer_vs_memcpy", "scattered_transfer_gbps", "scattered_vs_memcpy",
    "aperture_transfer_gbps", "aperture_vs_memcpy", "map_pages_per_s", "unmap_pages_per_s",
    "submit_rtt_us_p50", "submit_rtt_us_p99", "pingpong_us_p50", "submit_rtt_vs_pingpong",
    "pingpong_idle_us_p50", "submit_rtt_idle_us_p50", "backend_rss_mib",
]
SOAK_SUBMISSIONS = 1000000


def version_key(version):
    """"1.89" -> (1, 89, 0): a Rust version, comparable."""
    return tuple((list(map(int, version.split(".")[:3])) + [0, 0])[:3])


def msrv(meta, readme, common_sh, out=print):
    """The workspace's rust-version (from `cargo metadata` as a dict), the README's "cargo X.Y or
    newer" and common.sh's _RUST_MIN_VERSION against the newest rust-version of a locked
    dependency. Prints (out) the versions found; returns the errors joined, or None."""
    need = max(((version_key(p["rust_version"]), p["rust_version"], p["name"])
                for p in meta["packages"] if p.get("rust_version") and p["source"]))
    ours = {p["rust_version"] for p in meta["packages"] if p["source"] is None}
    stated = re.search(r"cargo (\d+\.\d+) or newer", readme)
    scripted = re.search(r"_RUST_MIN_VERSION=(\S+)", common_sh)
    errors = []
    if {version_key(v) for v in ours} != {need[0]}:
        errors.append(f"the workspace states rust-version {sorted(ours)}, the lock file needs "
                      f"{need[1]} ({need[2]})")
    if not stated or version_key(stated.group(1)) != need[0]:
        errors.append(f"the README states {stated.group(1) if stated else None}, the lock file "
                      f"needs {need[1]}")
    if not scripted or version_key(scripted.group(1)) != need[0]:
        errors.append(f"scripts/lib/common.sh checks for "
                      f"{scripted.group(1) if scripted else None}, the lock file needs {need[1]}")
    out(f"minimum Rust: {need[1]} ({need[2]}); workspace {sorted(ours)}")
    return "; ".join(errors) if errors else None


def bench(figures):
    """Every figure of BENCH_FIGURES is there and positive."""
    missing = [k for k in BENCH_FIGURES
               if not isinstance(figures.get(k), (int, float)) or figures[k] <= 0]
    if missing:
        return f"bench: missing or non-positive figures: {missing}"
    return None


def display_bench(result, out=print):
    """Ours ran without an error; prints (out) each ratio ours / C and its goal."""
    if "ours_error" in result:
        return f"display bench: ours failed: {result['ours_error']}"
    for key, ratio in result["ours_vs_c"].items():
        goal = (f" (goal {ratio['goal']}: {'met' if ratio['met'] else 'MISSED'})"
                if "goal" in ratio else "")
        out(f"display bench: {key} ours / C = {ratio['ratio']}{goal}")
    return None


def soak(figures):
    """Every submission of the soak was made, and the backend's RSS stayed flat."""
    if figures.get("soak_submissions") != SOAK_SUBMISSIONS or not figures.get("soak_rss_anon_kib"):
        return f"soak: figures missing: {figures}"
    if not figures.get("soak_rss_flat"):
        return (f"soak: the backend's RSS grew by {figures.get('soak_rss_growth_kib')} KiB: "
                f"{figures['soak_rss_anon_kib']}")
    return None


def replay_counts(stats):
    """The counts a replay must reproduce: per packet kind, per submission status, traffic, and
    per engine node (the virtual node's submissions are counted there)."""
    submissions = stats["submissions"]
    return {
        "packets": [(k["kind"], k["count"], k["faults"], k["bytes"], k["pages"])
                    for k in stats["packets"]],
        "submissions": (submissions["count"], submissions["faults"], submissions["bytes"],
                        submissions["packets"]),
        "by_status": [(s["status"], s["count"]) for s in submissions["by_status"]],
        "segments": stats["segments"],
        "nodes": [(n["node"], n["submissions"], n["faults"], n["packets"], n["bytes"])
                  for n in stats.get("nodes", [])],
    }


def virtual_submissions(counts):
    """Submissions the virtual node (node 1) answered, from replay_counts."""
    return sum(node[1] for node in counts["nodes"] if node[0] == 1)


def replay(live, replayed, out=print, need_virtual=False):
    """The replay answered every submission as recorded and applied every context command, with
    the live run's counts; prints (out) the submissions and packets compared. need_virtual: the
    live run must have used the virtual node."""
    summary = replayed.get("replay", {})
    mismatches = summary.get("mismatches")
    if mismatches:
        return f"replay: {len(mismatches)} answer(s) differ: {mismatches[:3]}"
    if mismatches is None:
        return "replay: no replay summary in the output"
    refusals = summary.get("refusals")
    if refusals:
        return f"replay: {len(refusals)} context command(s) refused: {refusals[:3]}"
    want, got = replay_counts(live), replay_counts(replayed)
    differing = [key for key in want if want[key] != got[key]]
    if differing:
        return "; ".join(f"replay: {key}: live {want[key]}, replayed {got[key]}"
                         for key in differing)
    if want["submissions"][0] == 0:
        return "replay: the live run made no submission"
    on_virtual = virtual_submissions(want)
    if need_virtual and on_virtual == 0:
        return "replay: the live run made no submission on the virtual node"
    virtual = f", {on_virtual} on the virtual node" if on_virtual else ""
    out(f"replay: {want['submissions'][0]} submissions, {want['submissions'][3]} packets, "
        f"{want['submissions'][2]} bytes{virtual}: the same counts as the live run")
    return None


def main(argv):
    if len(argv) == 3 and argv[0] == "msrv":
        with open(argv[1]) as f:
            readme = f.read()
        with open(argv[2]) as f:
            common_sh = f.read()
        error = msrv(json.load(sys.stdin), readme, common_sh)
    elif len(argv) == 2 and argv[0] == "bench":
        error = bench(json.loads(argv[1]))
    elif len(argv) == 2 and argv[0] == "display-bench":
        error = display_bench(json.loads(argv[1]))
    elif len(argv) == 2 and argv[0] == "soak":
        error = soak(json.loads(argv[1]))
    elif len(argv) in (3, 4) and argv[0] == "replay" and argv[3:] in ([], ["--virtual"]):
        with open(argv[1]) as f:
            live = json.load(f)
        with open(argv[2]) as f:
            replayed = json.load(f)
        error = replay(live, replayed, need_virtual=argv[3:] == ["--virtual"])
    else:
        sys.exit(__doc__)
    if error:
        sys.exit(error)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
