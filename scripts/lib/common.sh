# shellcheck shell=bash
# Shared helpers for the scripts under scripts/. Source it, do not execute it:
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# It installs one EXIT/INT/TERM trap; callers register cleanups with on_exit
# instead of calling `trap` themselves (a second trap would replace this one).

# Sourcing twice must not reset the cleanup list or the trap.
if [[ -n "${_WDDM_COMMON_SH:-}" ]]; then
    return 0
fi
_WDDM_COMMON_SH=1

# Repository root, from this file's location (scripts/lib/ -> ../..), so the
# scripts work from any current directory and any checkout path.
# shellcheck disable=SC2034 # used by the scripts that source this file
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SCRIPT_NAME="${0##*/}"

# The host programs, the Python package scripts/lib/gpuhost: "${GPUHOST_PYTHON[@]}" -m
# gpuhost.NAME ARG... (writes no bytecode into the tree; env execs python3, so $! of a run in
# the background is Python's own pid).
# shellcheck disable=SC2034 # used by the scripts that source this file
GPUHOST_PYTHON=(env "PYTHONPATH=${REPO_ROOT}/scripts/lib" PYTHONDONTWRITEBYTECODE=1 python3)

# Suite that carries QEMU >= 10 for Debian 12.
readonly _BACKPORTS_SUITE=bookworm-backports
readonly _BACKPORTS_LIST=/etc/apt/sources.list.d/bookworm-backports.list
readonly _QEMU_MIN_MAJOR=10
readonly _RUST_MIN_VERSION=1.89

log() { printf '%s: %s\n' "$SCRIPT_NAME" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ----------------------------------------------------------- result lines --

# The check scripts' (firmware-test, libvirt-test) verdicts: each printed as one line,
# "${RESULT_MARKER} CASE:CHECK VERDICT DETAIL", and counted; PASS and XFAIL (an expected
# failure) pass, anything else fails.
RESULT_MARKER=RESULT
_RESULTS_PASSED=0
_RESULTS_FAILED=0
_RESULTS_FAILURES=()

result_line() { # result_line CASE CHECK VERDICT DETAIL
    echo "${RESULT_MARKER} $1:$2 $3 $4"
    if [[ "$3" == PASS || "$3" == XFAIL ]]; then
        _RESULTS_PASSED=$((_RESULTS_PASSED + 1))
    else
        _RESULTS_FAILED=$((_RESULTS_FAILED + 1))
        _RESULTS_FAILURES+=("$1:$2")
    fi
}

# results_summary: logs the failed checks, prints "N passed, M failed"; fails when one failed.
results_summary() {
    ((${#_RESULTS_FAILURES[@]} == 0)) || log "failed: ${_RESULTS_FAILURES[*]}"
    echo "${_RESULTS_PASSED} passed, ${_RESULTS_FAILED} failed"
    ((_RESULTS_FAILED == 0))
}

# ---------------------------------------------------------------- cleanup --

_CLEANUP_CMDS=()

# on_exit CMD...: run CMD (a shell command string) when the script ends,
# normally, by error, or by Ctrl-C/TERM. Commands run last-registered first,
# so a later resource (e.g. QEMU) stops before the one it uses (the backend).
on_exit() {
    _CLEANUP_CMDS+=("$*")
}

_run_cleanup() {
    local i
    for ((i = ${#_CLEANUP_CMDS[@]} - 1; i >= 0; i--)); do
        # The strings come from our own on_exit calls, never from files.
        eval "${_CLEANUP_CMDS[i]}" || true
    done
    _CLEANUP_CMDS=()
}

# cleanup_now: runs the cleanups registered so far (last first) and forgets them, so a script
# can look at what its run left behind before it reports.
cleanup_now() {
    _run_cleanup
}

trap _run_cleanup EXIT
# exit (not just cleanup) so the script stops; the EXIT trap then cleans up.
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------- apt --

# Run a command as root, via sudo when we are not root.
as_root() {
    if [[ ${EUID} -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null; then
        sudo "$@"
    else
        die "need root (or sudo) to run: $*"
    fi
}

# Another apt/dpkg (e.g. a provisioning job) may hold the locks; wait for it
# instead of failing or racing it.
_wait_for_apt() {
    local waited=0
    while pgrep -x 'apt(-get)?|dpkg' >/dev/null; do
        ((waited % 30 == 0)) && log "waiting for another apt/dpkg run to finish"
        ((waited >= 900)) && die "apt/dpkg still busy after ${waited}s"
        sleep 2
        ((waited += 2))
    done
}

# apt-get with output kept in a log that is shown only on failure.
_apt_get() {
    local out rc=0
    out="$(mktemp)"
    _wait_for_apt
    DEBIAN_FRONTEND=noninteractive as_root apt-get -q -y \
        -o DPkg::Lock::Timeout=600 "$@" >"$out" 2>&1 || rc=$?
    if ((rc != 0)); then
        tail -n 30 "$out" >&2
        rm -f "$out"
        die "apt-get $* failed (exit ${rc})"
    fi
    rm -f "$out"
}

_APT_UPDATED=0

# ensure_apt_updated: apt-get update at most once per run; call it only right
# before installing, so runs with everything present never touch the network.
ensure_apt_updated() {
    ((_APT_UPDATED)) && return 0
    log "apt-get update"
    _apt_get update
    _APT_UPDATED=1
}

_pkg_installed() {
    [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == "install ok installed" ]]
}

# ensure_debian_packages PKG...: install the packages that are missing.
ensure_debian_packages() {
    local pkg missing=()
    for pkg in "$@"; do
        _pkg_installed "$pkg" || missing+=("$pkg")
    done
    ((${#missing[@]} == 0)) && return 0
    ensure_apt_updated
    log "installing ${missing[*]}"
    _apt_get install "${missing[@]}"
}

# ------------------------------------------------------------------ QEMU --

# Major version of the installed qemu-system-x86_64, or empty.
_qemu_major() {
    command -v qemu-system-x86_64 >/dev/null || return 0
    qemu-system-x86_64 --version |
        sed -n 's/^QEMU emulator version \([0-9]*\)\..*/\1/p'
}

_backports_configured() {
    grep -rqs --include='*.list' --include='*.sources' "$_BACKPORTS_SUITE" \
        /etc/apt/sources.list /etc/apt/sources.list.d/
}

# Debian 12 ships QEMU 7.2; vhost-user-gpu with our setup needs 10.x, which
# bookworm-backports has. Other releases get whatever their own suite has.
_install_qemu() {
    local codename=""
    [[ -r /etc/os-release ]] && codename="$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release)"
    command -v apt-get >/dev/null ||
        die "QEMU >= ${_QEMU_MIN_MAJOR} is required; install qemu-system-x86_64 yourself (no apt here)"
    if [[ "$codename" != bookworm ]]; then
        ensure_apt_updated
        _apt_get install qemu-system-x86
        return 0
    fi
    if ! _backports_configured; then
        log "adding ${_BACKPORTS_SUITE} to apt sources (${_BACKPORTS_LIST})"
        echo "deb http://deb.debian.org/debian ${_BACKPORTS_SUITE} main" |
            as_root tee "$_BACKPORTS_LIST" >/dev/null
        _APT_UPDATED=0
    fi
    ensure_apt_updated
    log "installing qemu-system-x86 from ${_BACKPORTS_SUITE}"
    _apt_get install -t "$_BACKPORTS_SUITE" qemu-system-x86
}

# ensure_qemu: qemu-system-x86_64 with major version >= 10, or die.
ensure_qemu() {
    local major
    major="$(_qemu_major)"
    if [[ -z "$major" ]] || ((major < _QEMU_MIN_MAJOR)); then
        _install_qemu
        major="$(_qemu_major)"
    fi
    [[ -n "$major" ]] || die "qemu-system-x86_64 not found after installing qemu-system-x86"
    ((major >= _QEMU_MIN_MAJOR)) ||
        die "qemu-system-x86_64 is version ${major}.x; QEMU >= ${_QEMU_MIN_MAJOR} is required (on Debian 12: apt-get install -t ${_BACKPORTS_SUITE} qemu-system-x86)"
}

# ------------------------------------------------------------------ Rust --

# ensure_rust: cargo must already exist; toolchains cannot be fetched here.
ensure_rust() {
    command -v cargo >/dev/null ||
        die "cargo not found: a Rust toolchain >= ${_RUST_MIN_VERSION} (installed with rustup) is required"
    local ver
    ver="$(cargo --version | sed -n 's/^cargo \([0-9]*\.[0-9]*\).*/\1/p')"
    if [[ -n "$ver" ]] && ! printf '%s\n%s\n' "$_RUST_MIN_VERSION" "$ver" | sort -V -C; then
        die "cargo ${ver} is too old: a Rust toolchain >= ${_RUST_MIN_VERSION} (rustup update) is required"
    fi
}

# ----------------------------------------------------------------- misc --

# wait_for_socket PATH TIMEOUT_S [PID]: wait until PATH is a Unix socket.
# With PID, fail early when that process (the one meant to create the
# socket) has died. Returns 1 on timeout or death, after logging why.
wait_for_socket() {
    local path="$1" timeout="$2" pid="${3:-}"
    local tries=$((timeout * 10))    # 0.1 s polls; SECONDS is too coarse
    until [[ -S "$path" ]]; do
        if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
            log "process ${pid} exited before creating socket ${path}"
            return 1
        fi
        if ((tries-- <= 0)); then
            log "timed out after ${timeout}s waiting for socket ${path}"
            return 1
        fi
        sleep 0.1
    done
}
