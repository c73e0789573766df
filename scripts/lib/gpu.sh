# shellcheck shell=bash
# Build everything the GPU runs need, start the backend, boot the guest with the GPU.
# Source it from scripts/demo and scripts/test:
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/gpu.sh"
#   gpu_build; gpu_start_backend; gpu_run_guest slice,--json || rc=$?
#
# Variables read: VRAM_SIZE (default 256M), LAYOUT (a layout file; default layout when unset),
# TRACE (a file for the backend's --trace timeline; none when unset),
# GPU_KVM (1 = --kvm), QEMU_TIMEOUT.
# Variables set: GPU_RUN_DIR, SOCKET, VRAM_PATH, BACKEND_LOG, BACKEND_PID, QEMU_LOG.

if [[ -n "${_WDDM_GPU_SH:-}" ]]; then
    return 0
fi
_WDDM_GPU_SH=1

# shellcheck source-path=SCRIPTDIR source=qemu.sh
source "$(dirname "${BASH_SOURCE[0]}")/qemu.sh"

BACKEND_BIN="${REPO_ROOT}/target/release/vhost-user-wddm-gpu"
GUEST_TARGET=x86_64-unknown-linux-gnu
GUEST_BIN="${REPO_ROOT}/target/${GUEST_TARGET}/release/wddm-guest"

# gpu_build: install what is missing, then build the backend, the static guest driver and
# the guest image. Build output goes to stderr so --json callers keep stdout clean.
gpu_build() {
    ensure_rust
    ensure_qemu
    ensure_debian_packages busybox-static cpio gcc python3
    log "building the backend"
    (cd "$REPO_ROOT" && cargo build --release --locked -p vhost-user-wddm-gpu) >&2
    log "building the guest reference driver (static)"
    # Only the installed gnu target exists here: link it statically for the initramfs.
    (cd "$REPO_ROOT" && RUSTFLAGS="-C target-feature=+crt-static" \
        cargo build --release --locked -p wddm-guest-tests --target "$GUEST_TARGET") >&2
    "${REPO_ROOT}/scripts/build-guest" --binary "$GUEST_BIN" >&2
}

# gpu_start_backend: start the backend on a fresh socket and VRAM file; stopped on exit.
gpu_start_backend() {
    export VRAM_SIZE="${VRAM_SIZE:-256M}"
    GPU_RUN_DIR="$(mktemp -d "${TMPDIR:-/tmp}/wddm-gpu.XXXXXX")"
    export SOCKET="${GPU_RUN_DIR}/gpu.sock"
    # QEMU maps the VRAM as shared memory: keep it in tmpfs.
    export VRAM_PATH="/dev/shm/wddm-gpu-$$-${RANDOM}.vram"
    BACKEND_LOG="${GPU_RUN_DIR}/backend.log"
    export QEMU_LOG="${GPU_RUN_DIR}/qemu.log"
    local layout=()
    [[ -n "${LAYOUT:-}" ]] && layout=(--layout "$LAYOUT")
    local trace=()
    [[ -n "${TRACE:-}" ]] && trace=(--trace "$TRACE")
    RUST_LOG="${RUST_LOG:-info}" "$BACKEND_BIN" --socket-path "$SOCKET" \
        --vram-path "$VRAM_PATH" --vram-size "$VRAM_SIZE" "${layout[@]}" "${trace[@]}" >"$BACKEND_LOG" 2>&1 &
    local pid=$!
    BACKEND_PID=$pid
    on_exit "kill ${pid} 2>/dev/null; wait ${pid} 2>/dev/null; rm -f '${VRAM_PATH}'; rm -rf '${GPU_RUN_DIR}'"
    wait_for_socket "$SOCKET" 20 "$pid" || { cat "$BACKEND_LOG" >&2; die "the backend did not start"; }
}

# gpu_stop_backend: waits (up to 10 s) for the backend to exit, as it does once QEMU has gone;
# stops it otherwise.
gpu_stop_backend() {
    local waited=0
    while kill -0 "$BACKEND_PID" 2>/dev/null && ((waited < 100)); do
        sleep 0.1
        waited=$((waited + 1))
    done
    kill "$BACKEND_PID" 2>/dev/null || true
}

# gpu_run_guest ARGS: boot the guest with the GPU, running /bin/wddm-guest ARGS (comma-separated).
gpu_run_guest() {
    export WDDM_ARGS="$1"
    unset APPEND
    qemu_args_from_file "${REPO_ROOT}/qemu-configs/linux-guest-ivshmem-vram.args"
    local kvm=()
    [[ "${GPU_KVM:-0}" == 1 ]] && kvm=(--kvm)
    run_guest "${kvm[@]}" --log "$QEMU_LOG"
}

# guest_output: the guest program's own lines from the QEMU log (no kernel or init chatter).
guest_output() {
    # Firmware banners and terminal escapes come first on the serial console: drop them.
    sed -E 's/\x1b\[[0-9;?]*[a-zA-Z]//g' "$QEMU_LOG" | tr -d '\r' \
        | grep -a -v -E '^(wddm-init:|\[ *[0-9]+\.[0-9]+\]|WDDM-GUEST-JSON )|SeaBIOS|Booting from ROM' \
        | grep -a -v -E '^(qemu-system|\+ |# )'
}
