# shellcheck shell=bash
# Build everything the GPU runs need, start the backend, boot the guest with the GPU.
# Source it from scripts/demo and scripts/test:
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/gpu.sh"
#   gpu_build; gpu_start_backend; gpu_run_guest slice,--json || rc=$?
#
# Variables read: VRAM_SIZE (default 256M), LAYOUT (a layout file; default layout when unset),
# TRACE (a file for the backend's --trace timeline; none when unset),
# GPU_KVM (1 = --kvm), QEMU_TIMEOUT,
# GPU_QEMU: 10 (default; the host's QEMU) or 11.1 (QEMU 11.1 from a cached Debian trixie root,
#   see qemu11.sh),
# GPU_BAR_MODE: how the guest reaches the VRAM: ivshmem (default; vhost-user-gpu-pci plus an
#   ivshmem-plain function, qemu-configs/linux-guest-ivshmem-vram.args) or shmem (QEMU 11.1 only:
#   vhost-user-test-device-pci with a shared-memory BAR, qemu-configs/linux-guest-shmem-qemu11.args).
#   The backend gets the matching --bar-mode (BACKEND_BAR_MODE overrides it: auto, ivshmem or
#   shmem).
# GPU_BACKEND: which vhost-user GPU backend gpu_start_backend starts: ours (default; the backend
#   built here) or c-peer (QEMU's C vhost-user-gpu, /usr/lib/qemu/vhost-user-gpu from Debian's
#   qemu-system-gui: the reference the external-driver display tests are validated against; it
#   serves a standard virtio-gpu only, so only scripts/display-test uses it).
# Variables set: GPU_RUN_DIR, SOCKET, VRAM_PATH, BACKEND_LOG, BACKEND_PID, QEMU_LOG;
# gpu_run_guest_vmctl also VMCTL_LOG and VMCTL_RC.

if [[ -n "${_WDDM_GPU_SH:-}" ]]; then
    return 0
fi
_WDDM_GPU_SH=1

# shellcheck source-path=SCRIPTDIR source=qemu.sh
source "$(dirname "${BASH_SOURCE[0]}")/qemu.sh"

BACKEND_BIN="${REPO_ROOT}/target/release/vhost-user-wddm-gpu"
C_PEER_BIN=/usr/lib/qemu/vhost-user-gpu
GUEST_TARGET=x86_64-unknown-linux-gnu
GUEST_BIN="${REPO_ROOT}/target/${GUEST_TARGET}/release/wddm-guest"
CDEV_DIR="${REPO_ROOT}/target/cdev"

# gpu_check_modes: die unless GPU_QEMU and GPU_BAR_MODE name a set-up the scripts can run.
gpu_check_modes() {
    qemu_version_check
    case "${GPU_BAR_MODE:-ivshmem}" in
        ivshmem) ;;
        shmem)
            [[ "${GPU_QEMU:-10}" == 11.1 ]] ||
                die "GPU_BAR_MODE=shmem needs QEMU 11.1 (GPU_QEMU=11.1; scripts/demo --qemu 11.1): QEMU ${GPU_QEMU:-10} has no vhost-user shared-memory BAR"
            ;;
        *) die "GPU_BAR_MODE must be ivshmem or shmem, not '${GPU_BAR_MODE}'" ;;
    esac
}

# gpu_args_file: the qemu-configs/ file for GPU_BAR_MODE.
gpu_args_file() {
    case "${GPU_BAR_MODE:-ivshmem}" in
        shmem) echo "${REPO_ROOT}/qemu-configs/linux-guest-shmem-qemu11.args" ;;
        *) echo "${REPO_ROOT}/qemu-configs/linux-guest-ivshmem-vram.args" ;;
    esac
}

# gpu_build: install what is missing, then build the backend, the static guest driver and
# the guest image. Build output goes to stderr so --json callers keep stdout clean.
gpu_build() {
    gpu_check_modes
    ensure_rust
    ensure_qemu
    [[ "${GPU_QEMU:-10}" == 11.1 ]] && ensure_qemu11
    ensure_debian_packages busybox-static cpio gcc python3
    log "building the backend"
    (cd "$REPO_ROOT" && cargo build --release --locked -p vhost-user-wddm-gpu) >&2
    log "building the guest reference driver (static)"
    # Only the installed gnu target exists here: link it statically for the initramfs.
    (cd "$REPO_ROOT" && RUSTFLAGS="-C target-feature=+crt-static" \
        cargo build --release --locked -p wddm-guest-tests --target "$GUEST_TARGET") >&2
    log "building the C device library and its guest suite (static)"
    ensure_debian_packages libc6-dev
    "${REPO_ROOT}/guest-tests/cdev/build.sh" "$CDEV_DIR" >&2
    "${REPO_ROOT}/scripts/build-guest" --binary "$GUEST_BIN" --cdev "${CDEV_DIR}/wddm-cdev-suite" >&2
}

# ensure_c_peer: QEMU's C vhost-user-gpu, installed from the package that ships it.
ensure_c_peer() {
    [[ -x "$C_PEER_BIN" ]] || ensure_debian_packages qemu-system-gui
    [[ -x "$C_PEER_BIN" ]] || die "${C_PEER_BIN} is missing after installing qemu-system-gui"
}

# gpu_start_backend: start the backend GPU_BACKEND names on a fresh socket (ours also on a fresh
# VRAM file); stopped on exit.
gpu_start_backend() {
    case "${GPU_BACKEND:-ours}" in
        ours) ;;
        c-peer) _gpu_start_c_peer; return ;;
        *) die "GPU_BACKEND must be ours or c-peer, not '${GPU_BACKEND}'" ;;
    esac
    gpu_check_modes
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
    # RECORD=1: record every submission of both nodes and the context commands (docs/record-replay.md) into RECORD_FILE.
    local record=()
    RECORD_FILE=""
    if [[ -n "${RECORD:-}" ]]; then
        RECORD_FILE="${GPU_RUN_DIR}/session.wgpurec"
        record=(--record "$RECORD_FILE")
    fi
    # CHECK=1: the checker (--check), its summary in the backend's log at exit.
    local check=()
    [[ -n "${CHECK:-}" ]] && check=(--check)
    RUST_LOG="${RUST_LOG:-info}" "$BACKEND_BIN" --socket-path "$SOCKET" \
        --vram-path "$VRAM_PATH" --vram-size "$VRAM_SIZE" --bar-mode "${BACKEND_BAR_MODE:-${GPU_BAR_MODE:-ivshmem}}" \
        "${layout[@]}" "${trace[@]}" "${record[@]}" "${check[@]}" >"$BACKEND_LOG" 2>&1 &
    local pid=$!
    BACKEND_PID=$pid
    on_exit "kill ${pid} 2>/dev/null; wait ${pid} 2>/dev/null; rm -f '${VRAM_PATH}'; rm -rf '${GPU_RUN_DIR}'"
    wait_for_socket "$SOCKET" 20 "$pid" || { cat "$BACKEND_LOG" >&2; die "the backend did not start"; }
}

# _gpu_start_c_peer: QEMU's C vhost-user-gpu on a fresh socket, the same variables set.
_gpu_start_c_peer() {
    ensure_c_peer
    GPU_RUN_DIR="$(mktemp -d "${TMPDIR:-/tmp}/wddm-gpu.XXXXXX")"
    export SOCKET="${GPU_RUN_DIR}/gpu.sock"
    BACKEND_LOG="${GPU_RUN_DIR}/backend.log"
    export QEMU_LOG="${GPU_RUN_DIR}/qemu.log"
    G_MESSAGES_DEBUG="${C_PEER_DEBUG:-}" "$C_PEER_BIN" --socket-path="$SOCKET" >"$BACKEND_LOG" 2>&1 &
    local pid=$!
    BACKEND_PID=$pid
    on_exit "kill ${pid} 2>/dev/null; wait ${pid} 2>/dev/null; rm -rf '${GPU_RUN_DIR}'"
    wait_for_socket "$SOCKET" 20 "$pid" || { cat "$BACKEND_LOG" >&2; die "the C peer did not start"; }
}

# stop_within PID: waits up to 10 s for PID to exit on its own; stops it otherwise.
stop_within() {
    local waited=0
    while kill -0 "$1" 2>/dev/null && ((waited < 100)); do
        sleep 0.1
        waited=$((waited + 1))
    done
    kill "$1" 2>/dev/null || true
}

# gpu_stop_backend: waits (up to 10 s) for the backend to exit, as it does once QEMU has gone;
# stops it otherwise.
gpu_stop_backend() {
    stop_within "$BACKEND_PID"
}

# gpu_run_guest ARGS [QEMU_ARG...]: boot the guest with the GPU (GPU_QEMU, GPU_BAR_MODE), running
# /bin/wddm-guest ARGS (comma-separated), with any QEMU_ARGs added to the args file's.
gpu_run_guest() {
    export WDDM_ARGS="$1"
    shift
    unset APPEND
    gpu_check_modes
    qemu_args_from_file "$(gpu_args_file)"
    local kvm=()
    [[ "${GPU_KVM:-0}" == 1 ]] && kvm=(--kvm)
    run_guest "${kvm[@]}" --log "$QEMU_LOG" -- "$@"
}

# gpu_run_guest_vmctl ARGS [PLAN [QEMU_ARG...]]: gpu_run_guest ARGS with the host side of a
# scenario synchronised with the host (scripts/lib/gpuhost/vmctl.py, plan PLAN, default
# lifecycle; plan scanout takes screendumps, kept in GPU_RUN_DIR; plan tdr arms the backend's
# fault injections with `vhost-user-wddm-gpu ctl` on SOCKET) steering QEMU over QMP
# (${GPU_RUN_DIR}/qmp.sock) and answering the guest on its second serial port (/dev/ttyS1,
# ${GPU_RUN_DIR}/sync.sock). Returns the guest's code like gpu_run_guest; sets VMCTL_RC (vmctl's
# exit code: 0 = every step worked) and VMCTL_LOG.
# shellcheck disable=SC2034 # VMCTL_RC is for the caller
gpu_run_guest_vmctl() {
    local guest_args="$1" plan="${2:-lifecycle}" rc=0
    shift $(($# < 2 ? $# : 2))
    local qmp="${GPU_RUN_DIR}/qmp.sock" sync="${GPU_RUN_DIR}/sync.sock"
    VMCTL_LOG="${GPU_RUN_DIR}/vmctl.log"
    VMCTL_RC=""
    # QMP for stop/cont/system_reset; the sync channel is the guest's ttyS1. Any -serial or
    # -device isa-serial turns off -nographic's default serial port, so the console (ttyS0, the
    # log) is named again first. The args files say -no-reboot, which turns system_reset into
    # an exit: the last -action wins, so a reset (the host's, or the guest's own) resets the
    # machine while the guest's final poweroff still ends QEMU; vmctl quits QEMU on a reboot
    # it did not cause.
    # shellcheck disable=SC2054 # commas inside QEMU option values
    local extra=(
        -qmp "unix:${qmp},server=on,wait=off"
        -chardev "socket,id=sync,path=${sync},server=on,wait=off"
        -serial mon:stdio
        -serial chardev:sync
        -action reboot=reset
        "$@"
    )
    "${GPUHOST_PYTHON[@]}" -m gpuhost.vmctl --plan "$plan" --qmp "$qmp" --sync "$sync" \
        --console-log "$QEMU_LOG" --backend-log "$BACKEND_LOG" --out-dir "$GPU_RUN_DIR" \
        --backend-bin "$BACKEND_BIN" --ctl-socket "$SOCKET" >"$VMCTL_LOG" 2>&1 &
    local vmctl_pid=$!
    on_exit "kill ${vmctl_pid} 2>/dev/null; wait ${vmctl_pid} 2>/dev/null"
    gpu_run_guest "$guest_args" "${extra[@]}" || rc=$?
    # vmctl ends when QEMU closes QMP; give it a moment, then stop it (it reports why).
    stop_within "$vmctl_pid"
    VMCTL_RC=0
    wait "$vmctl_pid" || VMCTL_RC=$?
    return "$rc"
}

# guest_output: the guest program's own lines from the QEMU log (no kernel or init chatter).
guest_output() {
    # Firmware banners and terminal escapes come first on the serial console: drop them.
    sed -E 's/\x1b\[[0-9;?]*[a-zA-Z]//g' "$QEMU_LOG" | tr -d '\r' \
        | grep -a -v -E '^(wddm-init:|\[ *[0-9]+\.[0-9]+\]|WDDM-GUEST-JSON )|SeaBIOS|Booting from ROM' \
        | grep -a -v -E '^(qemu-system|\+ |# )'
}
