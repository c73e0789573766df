# shellcheck shell=bash
# The kernel-mode driver's guest (guest-tests/kmod, docs/kernel-driver.md): build it and boot it
# with the GPU. Source it after gpu.sh:
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/gpu.sh"
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/kmod.sh"
#   kmod_build; kmod_start_backend; kmod_run_guest || rc=$?
#   kmod_start_backend; kmod_run_tdr_guest || rc=$?   # drm_sched's timeout and the TDR path
#
# Variables read: GPU_QEMU and GPU_BAR_MODE as gpu_run_guest reads them (the driver binds mode 1:
# GPU_BAR_MODE=ivshmem), KMOD_COUNT (submissions of the MSI-X run, default 32), KMOD_VRAM_SIZE
# (the backend's VRAM for kmod_start_backend, default 16M: the TTM test allocates buffer objects
# totalling twice the VRAM segment and checks every byte after every move, under TCG).

if [[ -n "${_WDDM_KMOD_SH:-}" ]]; then
    return 0
fi
_WDDM_KMOD_SH=1

KMOD_GUEST_DIR="${REPO_ROOT}/target/kmod-guest"

# kmod_build: scripts/build-guest --kind kmod: the driver built against the guest kernel's own
# headers (downloaded once into the kernel's cache), the kernel package's DRM modules, the static
# test program and the guest's /init, in KMOD_GUEST_DIR.
kmod_build() {
    "${REPO_ROOT}/scripts/build-guest" --kind kmod --out "$KMOD_GUEST_DIR" >&2
}

# _kmod_with_vram CMD...: runs CMD with VRAM_SIZE=KMOD_VRAM_SIZE (default 16M) exported, then
# puts VRAM_SIZE back as it was (gpu_start_backend exports it; later blocks keep their own).
_kmod_with_vram() {
    local was_set="${VRAM_SIZE+1}" saved="${VRAM_SIZE-}" rc=0
    export VRAM_SIZE="${KMOD_VRAM_SIZE:-16M}"
    "$@" || rc=$?
    if [[ -n "$was_set" ]]; then VRAM_SIZE="$saved"; else unset VRAM_SIZE; fi
    return "$rc"
}

# kmod_start_backend: gpu_start_backend with the kernel-driver guest's VRAM size.
kmod_start_backend() {
    _kmod_with_vram gpu_start_backend
}

# kmod_run_guest [QEMU_ARG...]: boots the kernel-driver guest (the command kmod: the driver over
# INTx, then over MSI-X, each with the test program) with the GPU of gpu_start_backend; reads the
# device's stats socket while the guest holds after its TTM test and compares it with the
# guest's count (kmod_compare_traffic, KMOD_TRAFFIC_RC). Returns the guest's exit code; the log
# is QEMU_LOG.
kmod_run_guest() {
    local kernel="${KMOD_GUEST_DIR}/vmlinux" rc=0
    [[ -f "$kernel" ]] || kernel="${KMOD_GUEST_DIR}/vmlinuz"
    local stats_json="${GPU_RUN_DIR}/kmod-stats.json"
    rm -f "$stats_json"
    # While the guest holds after its TTM test (KMOD-STATS-HOLD), the device's own counters.
    (
        waited=0
        while ((waited < 1800)); do
            if grep -a -q "^KMOD-STATS-HOLD" "$QEMU_LOG" 2>/dev/null; then
                "$BACKEND_BIN" stats --json "$SOCKET" >"$stats_json" 2>/dev/null || rm -f "$stats_json"
                exit 0
            fi
            sleep 0.1
            waited=$((waited + 1))
        done
    ) &
    local watcher=$!
    KERNEL="$kernel" INITRD="${KMOD_GUEST_DIR}/initrd.gz" \
        _kmod_with_vram gpu_run_guest "kmod,${KMOD_COUNT:-32}" "$@" || rc=$?
    kill "$watcher" 2>/dev/null || true
    wait "$watcher" 2>/dev/null || true
    kmod_compare_traffic "$stats_json"
    return "$rc"
}

# kmod_compare_traffic STATS_JSON: the guest's KMOD-TRAFFIC lines (what its paging buffers and
# TTM's moves read and wrote in the VRAM and aperture segments) summed, against the device's
# stats socket (`stats --json`: per segment read_bytes and written_bytes) read while the guest
# held. Prints KMOD-TRAFFIC-HOST; sets KMOD_TRAFFIC_RC (0 when every figure is equal).
kmod_compare_traffic() {
    local stats_json="$1" out rc=1
    if [[ ! -s "$stats_json" ]]; then
        echo "KMOD-TRAFFIC-HOST no stats snapshot (the guest never held, or the stats socket did not answer)" >&2
        KMOD_TRAFFIC_RC=1
        return 0
    fi
    out="$(grep -a -E "^KMOD-TRAFFIC " "$QEMU_LOG" | tr -d '\r' | python3 -c '
import json, sys
want = {"vram_read": 0, "vram_written": 0, "aperture_read": 0, "aperture_written": 0}
for line in sys.stdin:
    for word in line.split()[2:]:
        key, value = word.split("=")
        want[key] += int(value)
stats = json.load(open(sys.argv[1]))
seg = {s["segment"]: s for s in stats["segments"]}
vram, ap = int(sys.argv[2]), int(sys.argv[3])
have = {"vram_read": seg.get(vram, {}).get("read_bytes"),
        "vram_written": seg.get(vram, {}).get("written_bytes"),
        "aperture_read": seg.get(ap, {}).get("read_bytes"),
        "aperture_written": seg.get(ap, {}).get("written_bytes")}
same = all(have[k] == want[k] for k in want)
print(("match" if same else "MISMATCH") + ": " + ", ".join(
    "%s guest %d device %s" % (k, want[k], have[k]) for k in want))
sys.exit(0 if same else 1)
' "$stats_json" 1 2)" && rc=0
    echo "KMOD-TRAFFIC-HOST segment 1 (VRAM) and 2 (aperture), the driver's count against the device's stats socket: ${out}" >&2
    # shellcheck disable=SC2034 # read by scripts/test
    KMOD_TRAFFIC_RC="$rc"
}

# kmod_run_tdr_guest [QEMU_ARG...]: the TDR boot, against a fresh kmod_start_backend. Before the
# guest makes its first submission, arms on the backend's control socket a hang of submission
# KMOD_HANG_NTH (default 3), a lost interrupt of submission KMOD_LOST_NTH (default 9) and a 3 s
# late start of submission KMOD_SLOW_NTH (default 10: past drm_sched's timeout), then
# boots the command kmod-tdr (the driver with a 500 ms drm_sched timeout; the test lines its
# submissions up with those numbers). Prints the injections that fired afterwards (KMOD-INJECT
# lines, from the backend's log) and sets KMOD_INJECTIONS_FIRED (0 when all fired, each on the
# submission it was armed for). Returns the guest's exit code.
kmod_run_tdr_guest() {
    local hang="${KMOD_HANG_NTH:-3}" lost="${KMOD_LOST_NTH:-9}" slow="${KMOD_SLOW_NTH:-10}" rc=0
    "$BACKEND_BIN" ctl "$SOCKET" arm hang "nth=${hang}" >&2 || return 1
    "$BACKEND_BIN" ctl "$SOCKET" arm lost-interrupt "nth=${lost}" >&2 || return 1
    "$BACKEND_BIN" ctl "$SOCKET" arm slow 3s "nth=${slow}" >&2 || return 1
    local kernel="${KMOD_GUEST_DIR}/vmlinux"
    [[ -f "$kernel" ]] || kernel="${KMOD_GUEST_DIR}/vmlinuz"
    KERNEL="$kernel" INITRD="${KMOD_GUEST_DIR}/initrd.gz" \
        _kmod_with_vram gpu_run_guest "kmod-tdr,${hang},${lost},${slow}" "$@" || rc=$?
    # What the backend's log says fired (the backend leaves once QEMU is gone: its log, not
    # its control socket): all three, each on the submission it was armed for.
    local fired_log fired=1
    fired_log="$(grep -a -E "injection [0-9]+ fired" "$BACKEND_LOG" || true)"
    while IFS= read -r line; do echo "KMOD-INJECT ${line##*] }" >&2; done <<<"$fired_log"
    if grep -q -E "fired on node 0 submission fence ${hang}: hang nth=${hang}$" <<<"$fired_log" &&
        grep -q -E "fired on node 0 submission fence ${lost}: lost-interrupt nth=${lost}$" \
            <<<"$fired_log" &&
        grep -q -E "fired on node 0 submission fence ${slow}: slow 3s nth=${slow}$" <<<"$fired_log"; then
        fired=0
    fi
    # shellcheck disable=SC2034 # read by scripts/test
    KMOD_INJECTIONS_FIRED="$fired"
    return "$rc"
}
