# shellcheck shell=bash
# QEMU helpers: turn a qemu-configs/*.args file into an argument array and
# boot the test guest with it. Source it after (or instead of) common.sh:
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/qemu.sh"
#   export SOCKET=... VRAM_PATH=... VRAM_SIZE=64M WDDM_ARGS=probe,--verbose
#   qemu_args_from_file "${REPO_ROOT}/qemu-configs/linux-guest-ivshmem-vram.args"
#   run_guest || rc=$?
#
# Variables read (all optional; defaults applied by qemu_default_env):
#   QEMU_MEM        guest RAM, default 512M
#   KERNEL          default target/guest/vmlinux (uncompressed, PVH boot:
#                   ~2x faster under TCG), else target/guest/vmlinuz
#   INITRD          default target/guest/initrd.gz
#   APPEND          kernel command line, default from guest_append:
#                   console=ttyS0 quiet panic=-1 hugepages=$GUEST_HUGEPAGES
#                   transparent_hugepage=never wddm.args=$WDDM_ARGS [wddm.cdev=0]
#   GUEST_HUGEPAGES 2 MiB hugepages reserved at boot, default 64
#   WDDM_ARGS       comma-separated arguments for /bin/wddm-guest (`cdev`: the C device
#                   library's suite alone)
#   GUEST_CDEV      0: no C device library suite after `suite` or `gpuva` (wddm.cdev=0); the
#                   default with QEMU 11.1 and the shared-memory BAR, 1 elsewhere
#   VRAM_SIZE       checked to be a power of two when set
#   QEMU_TIMEOUT    run_guest's default timeout in seconds, default 240
#   QEMU_LOG        run_guest's default log file, default target/guest/qemu.log
#   GPU_QEMU        which QEMU run_guest starts: 10 (default: the host's
#                   qemu-system-x86_64, >= 10) or 11.1 (QEMU 11.1 from the
#                   cached Debian trixie root of scripts/lib/qemu11.sh)

if [[ -n "${_WDDM_QEMU_SH:-}" ]]; then
    return 0
fi
_WDDM_QEMU_SH=1

# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source-path=SCRIPTDIR source=qemu11.sh
source "$(dirname "${BASH_SOURCE[0]}")/qemu11.sh"

QEMU_ARGS=()
# shellcheck disable=SC2034 # result for the scripts that source this file
GUEST_EXIT_CODE=""
_QEMU_PID=""

# guest_append [ARG...]: print the default kernel command line, with ARGs
# (or, without ARGs, the comma-separated $WDDM_ARGS) as wddm.args for /init.
# shellcheck disable=SC2120 # ARGs are optional; the default uses none
guest_append() {
    local args="${WDDM_ARGS:-}" a
    if (($#)); then
        for a in "$@"; do
            [[ "$a" =~ ^[^[:space:],\"]+$ ]] ||
                die "guest argument '${a}' must be non-empty, without spaces, commas or quotes (kernel command line)"
        done
        args="$(IFS=,; echo "$*")"
    fi
    [[ "$args" =~ [[:space:]\"] ]] && die "WDDM_ARGS must not contain spaces or quotes: '${args}'"
    [[ "${GUEST_HUGEPAGES:-64}" =~ ^[0-9]+$ ]] || die "GUEST_HUGEPAGES must be a number: '${GUEST_HUGEPAGES}'"
    # QEMU 11.1.3 with the shared-memory BAR can crash when a second driver resets the device
    # the first one started (docs/lifecycle.md): there the C suite does not follow the Rust one
    # unless asked (GUEST_CDEV=1); the command `cdev` runs it alone.
    local cdev=1
    [[ "${GPU_QEMU:-10}" == 11.1 && "${GPU_BAR_MODE:-}" == shmem ]] && cdev=0
    cdev="${GUEST_CDEV:-$cdev}"
    [[ "$cdev" =~ ^[01]$ ]] || die "GUEST_CDEV must be 0 or 1: '${cdev}'"
    printf 'console=ttyS0 quiet panic=-1 hugepages=%s transparent_hugepage=never%s%s\n' \
        "${GUEST_HUGEPAGES:-64}" "${args:+ wddm.args=${args}}" \
        "$([[ "$cdev" == 0 ]] && echo ' wddm.cdev=0')"
}

# _size_bytes SIZE: QEMU-style size (bytes, or K/M/G/T suffix) in bytes.
_size_bytes() {
    local n="${1%[KkMmGgTt]}" bits=0
    [[ "$n" =~ ^[0-9]+$ ]] || return 1
    case "$1" in
        *[Kk]) bits=10 ;; *[Mm]) bits=20 ;; *[Gg]) bits=30 ;; *[Tt]) bits=40 ;;
    esac
    echo $((n << bits))
}

# qemu_default_env: fill the defaults listed at the top of this file, and
# reject a VRAM_SIZE that ivshmem cannot map (its BAR must be a power of 2).
qemu_default_env() {
    : "${QEMU_MEM:=512M}"
    if [[ -z "${KERNEL:-}" ]]; then
        KERNEL="${REPO_ROOT}/target/guest/vmlinux"
        [[ -f "$KERNEL" ]] || KERNEL="${REPO_ROOT}/target/guest/vmlinuz"
    fi
    : "${INITRD:=${REPO_ROOT}/target/guest/initrd.gz}"
    if [[ -z "${APPEND:-}" ]]; then
        APPEND="$(guest_append)" || exit 1
    fi
    if [[ -n "${VRAM_SIZE:-}" ]]; then
        local bytes
        bytes="$(_size_bytes "$VRAM_SIZE")" || die "VRAM_SIZE '${VRAM_SIZE}' is not a size (bytes or K/M/G suffix)"
        ((bytes > 0 && (bytes & (bytes - 1)) == 0)) ||
            die "VRAM_SIZE ${VRAM_SIZE} (${bytes} bytes) is not a power of two, which ivshmem requires"
    fi
}

_QEMU_UNSET=()

# _qemu_subst TEXT: set REPLY to TEXT with each ${NAME} replaced by the
# variable's value. No eval: values are inserted verbatim, never re-parsed.
# Unset/empty names are collected in _QEMU_UNSET.
_qemu_subst() {
    local rest="$1" out="" name token
    while [[ "$rest" =~ \$\{([A-Za-z_][A-Za-z0-9_]*)\} ]]; do
        token="${BASH_REMATCH[0]}" name="${BASH_REMATCH[1]}"
        out+="${rest%%"${token}"*}"
        rest="${rest#*"${token}"}"
        if [[ -n "${!name:-}" ]]; then
            out+="${!name}"
        else
            _QEMU_UNSET+=("$name")
        fi
    done
    [[ "$rest" != *\$\{* ]] || die "unsupported placeholder in '${1}': only \${NAME} is allowed"
    REPLY="${out}${rest}"
}

# qemu_args_from_file FILE: set QEMU_ARGS from an args file. A line is one
# argument, or "-option value" (the value, spaces included, stays one
# argument); blank lines and lines starting with # are skipped.
qemu_args_from_file() {
    local file="$1" line
    [[ -r "$file" ]] || die "cannot read QEMU args file ${file}"
    qemu_default_env
    QEMU_ARGS=() _QEMU_UNSET=()
    while IFS= read -r line || [[ -n "$line" ]]; do
        line="${line#"${line%%[![:space:]]*}"}"    # trim leading blanks
        line="${line%"${line##*[![:space:]]}"}"    # trim trailing blanks
        [[ -z "$line" || "$line" == \#* ]] && continue
        if [[ "$line" =~ ^(-[^[:space:]]+)[[:space:]]+(.+)$ ]]; then
            QEMU_ARGS+=("${BASH_REMATCH[1]}")
            line="${BASH_REMATCH[2]}"
        fi
        _qemu_subst "$line"
        QEMU_ARGS+=("$REPLY")
    done <"$file"
    if ((${#_QEMU_UNSET[@]})); then
        die "${file}: variable(s) not set or empty: $(printf '%s\n' "${_QEMU_UNSET[@]}" | sort -u | paste -sd ' ')"
    fi
}

# _quote_cmd ARG...: "qemu-system-x86_64 ARG..." quoted for a shell; plain
# words stay bare (printf %q would backslash every comma).
_quote_cmd() {
    local a q="'" out="qemu-system-x86_64"
    for a in "$@"; do
        if [[ "$a" =~ ^[A-Za-z0-9_,.=/:+@%-]+$ ]]; then
            out+=" ${a}"
        else
            out+=" '${a//${q}/${q}\\${q}${q}}'"
        fi
    done
    echo "$out"
}

# qemu_command_line: print QEMU_ARGS as one shell-quoted command, to show
# what runs or to paste into a terminal.
qemu_command_line() {
    _quote_cmd "${QEMU_ARGS[@]}"
}

# _use_kvm: swap "-accel tcg" for "-accel kvm" in the named array.
_use_kvm() {
    local -n _args="$1"
    local i
    [[ -w /dev/kvm ]] || die "--kvm given but /dev/kvm is missing or not writable"
    for ((i = 0; i < ${#_args[@]} - 1; i++)); do
        if [[ "${_args[i]}" == -accel && "${_args[i + 1]}" == tcg ]]; then
            _args[i + 1]=kvm
            return 0
        fi
    done
    die "--kvm given but the QEMU arguments have no '-accel tcg' to replace"
}

# Stop a still-running QEMU when the script exits or is interrupted, and
# wait until it is gone (timeout's --kill-after bounds that) so the cleanups
# after this one never pull the backend from under a live QEMU.
_qemu_stop() {
    if [[ -n "$_QEMU_PID" ]]; then
        kill "$_QEMU_PID" 2>/dev/null || true
        wait "$_QEMU_PID" 2>/dev/null || true
    fi
    _QEMU_PID=""
    qemu11_cleanup
}

# qemu_version_check: die unless GPU_QEMU names a QEMU the scripts can run.
qemu_version_check() {
    case "${GPU_QEMU:-10}" in
        10 | 11.1) ;;
        *) die "GPU_QEMU must be 10 (the host's QEMU) or 11.1 (QEMU 11.1 from a cached Debian trixie root), not '${GPU_QEMU}'" ;;
    esac
}
_QEMU_STOP_REGISTERED=0

_now_ms() { date +%s%3N; }

# _guest_exit_code LOG: the code from the last "WDDM-GUEST-EXIT <code>"
# line (serial output ends lines with CR LF), or empty.
_guest_exit_code() {
    tr -d '\r' <"$1" | sed -n 's/^WDDM-GUEST-EXIT \([0-9]\{1,3\}\)$/\1/p' | tail -n 1
}

_log_tail() {
    log "last lines of $1:"
    tr -d '\r' <"$1" | tail -n "${2:-40}" | sed 's/^/    /' >&2
}

# run_guest [--kvm] [--timeout S] [--log FILE] [--follow] [-- QEMU_ARG...]
# Boot qemu-system-x86_64 with QEMU_ARGS (plus any extra QEMU_ARGs), output
# to the log file, and return the guest's exit code from its
# "WDDM-GUEST-EXIT <code>" line (also left in GUEST_EXIT_CODE).
#   --kvm      use KVM instead of TCG (opt-in: nested KVM hangs here)
#   --timeout  seconds before QEMU is killed (default $QEMU_TIMEOUT or 240)
#   --log      log file (default $QEMU_LOG or target/guest/qemu.log)
#   --follow   also copy the guest's output to stderr while it runs
# GPU_QEMU=11.1 runs QEMU 11.1 from the cached trixie root (ensure_qemu11);
# the directories of the paths in its arguments (and GPU_RUN_DIR, when set)
# are mounted there at the same paths.
# Returns 124 on timeout, 125 when the guest printed no exit line; on any
# failure the end of the log is printed.
run_guest() {
    local kvm=0 follow=0 timeout="${QEMU_TIMEOUT:-240}"
    local logf="${QEMU_LOG:-${REPO_ROOT}/target/guest/qemu.log}"
    while (($#)); do
        case "$1" in
            --kvm) kvm=1; shift ;;
            --timeout) timeout="${2:?--timeout needs seconds}"; shift 2 ;;
            --log) logf="${2:?--log needs a file}"; shift 2 ;;
            --follow) follow=1; shift ;;
            --) shift; break ;;
            *) die "run_guest: unknown option $1" ;;
        esac
    done
    ((${#QEMU_ARGS[@]})) || die "run_guest: QEMU_ARGS is empty (call qemu_args_from_file first)"
    qemu_version_check
    local args=("${QEMU_ARGS[@]}" "$@")
    ((kvm)) && _use_kvm args
    mkdir -p "$(dirname "$logf")"
    local qemu=(qemu-system-x86_64) which="QEMU"
    if [[ "${GPU_QEMU:-10}" == 11.1 ]]; then
        ensure_qemu11
        qemu11_command --args "${args[@]}" -- ${GPU_RUN_DIR:+"$GPU_RUN_DIR"}
        qemu=("${QEMU11_CMD[@]}")
        which="QEMU ${QEMU11_VERSION}"
    else
        command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found (call ensure_qemu first)"
    fi
    # Registered on first use, i.e. after the caller's backend: cleanups run
    # newest first, so QEMU stops before the backend it talks to.
    if ((!_QEMU_STOP_REGISTERED)); then
        on_exit _qemu_stop
        _QEMU_STOP_REGISTERED=1
    fi

    local start rc=0 tail_pid=""
    start="$(_now_ms)"
    # The command heads the log, so a failure can be replayed by hand.
    {
        [[ "${GPU_QEMU:-10}" == 11.1 ]] &&
            echo "# QEMU ${QEMU11_VERSION}: run inside ${QEMU11_ROOT} (scripts/lib/qemu11.sh)"
        _quote_cmd "${args[@]}" | sed 's/^/# /'
    } >"$logf"
    # stdin from /dev/null: -nographic would otherwise put the terminal in
    # raw mode and read keystrokes as monitor commands.
    timeout --kill-after=10 "$timeout" "${qemu[@]}" "${args[@]}" \
        </dev/null >>"$logf" 2>&1 &
    _QEMU_PID=$!
    if ((follow)); then
        tail -n +1 -f --pid="$_QEMU_PID" "$logf" >&2 &
        tail_pid=$!
    fi
    wait "$_QEMU_PID" || rc=$?
    _QEMU_PID=""
    qemu11_cleanup
    if [[ -n "$tail_pid" ]]; then
        wait "$tail_pid" || true
    fi

    local secs code
    secs="$(awk -v ms="$(($(_now_ms) - start))" 'BEGIN { printf "%.1f", ms / 1000 }')"
    code="$(_guest_exit_code "$logf")"
    # shellcheck disable=SC2034 # result for the caller
    GUEST_EXIT_CODE="$code"
    if ((rc == 124 || rc == 137)); then
        log "guest timed out after ${timeout}s (${which}, log: ${logf})"
        _log_tail "$logf"
        return 124
    fi
    if [[ -z "$code" ]]; then
        log "guest ended without a WDDM-GUEST-EXIT line after ${secs}s (${which} exit ${rc}, log: ${logf})"
        _log_tail "$logf"
        return 125
    fi
    log "guest exited with ${code} after ${secs}s (${which}, log: ${logf})"
    ((code == 0)) || _log_tail "$logf" 20
    return "$code"
}
