# shellcheck shell=bash
# The kernel-mode driver's guest (guest-tests/kmod, docs/kernel-driver.md): build it and boot it
# with the GPU. Source it after gpu.sh:
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/gpu.sh"
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/kmod.sh"
#   kmod_build; gpu_start_backend; kmod_run_guest || rc=$?
#
# Variables read: GPU_QEMU and GPU_BAR_MODE as gpu_run_guest reads them (the driver binds mode 1:
# GPU_BAR_MODE=ivshmem), KMOD_COUNT (submissions of the MSI-X run, default 32).

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

# kmod_run_guest [QEMU_ARG...]: boots the kernel-driver guest (the command kmod: the driver over
# INTx, then over MSI-X, each with the test program) with the GPU of gpu_start_backend. Returns
# the guest's exit code; the log is QEMU_LOG.
kmod_run_guest() {
    local kernel="${KMOD_GUEST_DIR}/vmlinux"
    [[ -f "$kernel" ]] || kernel="${KMOD_GUEST_DIR}/vmlinuz"
    KERNEL="$kernel" INITRD="${KMOD_GUEST_DIR}/initrd.gz" \
        gpu_run_guest "kmod,${KMOD_COUNT:-32}" "$@"
}
