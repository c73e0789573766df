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
# INTx, then over MSI-X, each with the test program) with the GPU of gpu_start_backend. Returns
# the guest's exit code; the log is QEMU_LOG.
kmod_run_guest() {
    local kernel="${KMOD_GUEST_DIR}/vmlinux"
    [[ -f "$kernel" ]] || kernel="${KMOD_GUEST_DIR}/vmlinuz"
    KERNEL="$kernel" INITRD="${KMOD_GUEST_DIR}/initrd.gz" \
        _kmod_with_vram gpu_run_guest "kmod,${KMOD_COUNT:-32}" "$@"
}

# kmod_run_tdr_guest [QEMU_ARG...]: the TDR boot, against a fresh kmod_start_backend. Before the
# guest makes its first submission, arms on the backend's control socket a hang of submission
# KMOD_HANG_NTH (default 3) and a lost interrupt of submission KMOD_LOST_NTH (default 9), then
# boots the command kmod-tdr (the driver with a 500 ms drm_sched timeout; the test lines its
# submissions up with those numbers). Prints the injections afterwards (KMOD-INJECT lines, from
# `ctl list`). Returns the guest's exit code.
kmod_run_tdr_guest() {
    local hang="${KMOD_HANG_NTH:-3}" lost="${KMOD_LOST_NTH:-9}" rc=0
    "$BACKEND_BIN" ctl "$SOCKET" arm hang "nth=${hang}" >&2 || return 1
    "$BACKEND_BIN" ctl "$SOCKET" arm lost-interrupt "nth=${lost}" >&2 || return 1
    local kernel="${KMOD_GUEST_DIR}/vmlinux"
    [[ -f "$kernel" ]] || kernel="${KMOD_GUEST_DIR}/vmlinuz"
    KERNEL="$kernel" INITRD="${KMOD_GUEST_DIR}/initrd.gz" \
        _kmod_with_vram gpu_run_guest "kmod-tdr,${hang},${lost}" "$@" || rc=$?
    "$BACKEND_BIN" ctl "$SOCKET" list 2>&1 | sed 's/^/KMOD-INJECT /' >&2 || true
    return "$rc"
}
