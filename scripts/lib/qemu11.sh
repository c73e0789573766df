# shellcheck shell=bash
# QEMU 11.1 for the scripts: Debian 12 has no QEMU 11.1 package, and trixie-backports' build needs
# trixie's libraries, so QEMU 11.1 lives in a Debian trixie root filesystem that is built once and
# cached, and runs there in a private mount namespace. Source it after (or instead of) common.sh:
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/qemu11.sh"
#   ensure_qemu11                     # builds the root once (a few minutes), dies without 11.1
#   qemu11_command BIND_DIR...        # sets QEMU11_CMD: prefix for "qemu-system-x86_64 ARGS"
#   "${QEMU11_CMD[@]}" -accel tcg ... # QEMU's exit code comes back; `timeout` works on it
#
# Paths are the same inside and outside: the host's /dev (with /dev/shm), /proc and /sys are
# mounted in the root, and so is every directory named with qemu11_command (and every directory
# of an absolute path in QEMU's arguments that the root lacks). The mounts live in a mount
# namespace of QEMU's own and vanish when QEMU exits; nothing stays mounted on the host.

if [[ -n "${_WDDM_QEMU11_SH:-}" ]]; then
    return 0
fi
_WDDM_QEMU11_SH=1

# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

readonly QEMU11_ROOT=/var/cache/vhost-user-wddm-gpu/qemu-11.1-root
readonly _QEMU11_MIRROR=http://deb.debian.org/debian
readonly _QEMU11_SUITE=trixie
readonly _QEMU11_BACKPORTS=trixie-backports
readonly _QEMU11_MIN=11.1
# Written into the root last, only when everything before it worked.
readonly _QEMU11_STAMP=.vhost-user-wddm-gpu-qemu11.stamp

_QEMU11_OK=0
# shellcheck disable=SC2034 # results for the scripts that source this file
QEMU11_VERSION=""
QEMU11_CMD=()

# _qemu11_version ROOT: "11.1.3" from ROOT's qemu-system-x86_64 --version, or empty.
_qemu11_version() {
    [[ -x "$1/usr/bin/qemu-system-x86_64" ]] || return 0
    chroot "$1" qemu-system-x86_64 --version 2>/dev/null |
        sed -n 's/^QEMU emulator version \([0-9][0-9.]*\).*/\1/p'
}

# _qemu11_new_enough VERSION: VERSION >= _QEMU11_MIN.
_qemu11_new_enough() {
    [[ -n "$1" ]] && printf '%s\n%s\n' "$_QEMU11_MIN" "$1" | sort -V -C
}

# _qemu11_in_root ROOT CMD...: run CMD chrooted in ROOT with /dev, /proc and /sys mounted (in a
# private mount namespace, so the mounts end with CMD) and the host's DNS set-up.
_qemu11_in_root() {
    local root="$1"
    shift
    cp -L /etc/resolv.conf "${root}/etc/resolv.conf" 2>/dev/null || true
    # shellcheck disable=SC2016 # expanded by that sh, from its arguments
    unshare --mount --propagation private -- /bin/sh -c '
        root="$1"; shift
        mount --rbind /dev "$root/dev" && mount -t proc proc "$root/proc" &&
            mount --rbind /sys "$root/sys" || exit 125
        exec chroot "$root" "$@"' sh "$root" "$@"
}

# _qemu11_build DIR: the whole set-up into DIR (which must not exist). Returns 1, after showing
# the end of the failed step's output, when a step fails.
_qemu11_build() {
    local dir="$1" out
    out="$(mktemp)"
    on_exit "rm -f '${out}'"
    log "QEMU ${_QEMU11_MIN}: mmdebstrap --variant=minbase ${_QEMU11_SUITE} (a Debian ${_QEMU11_SUITE} root, once)"
    # Output goes to a log shown on failure: mmdebstrap is chatty. Its own mounts in the new root
    # stay in a mount namespace of its own, so an interrupted run leaves none behind.
    if ! unshare --mount --propagation private -- \
        mmdebstrap --variant=minbase "$_QEMU11_SUITE" "$dir" "$_QEMU11_MIRROR" >"$out" 2>&1; then
        tail -n 30 "$out" >&2
        log "QEMU ${_QEMU11_MIN}: mmdebstrap ${_QEMU11_SUITE} ${dir} failed (output above)"
        return 1
    fi
    echo "deb ${_QEMU11_MIRROR} ${_QEMU11_BACKPORTS} main" >"${dir}/etc/apt/sources.list.d/${_QEMU11_BACKPORTS}.list"
    log "QEMU ${_QEMU11_MIN}: installing qemu-system-x86 from ${_QEMU11_BACKPORTS} in that root"
    if ! {
        _qemu11_in_root "$dir" apt-get -q update &&
            DEBIAN_FRONTEND=noninteractive _qemu11_in_root "$dir" apt-get -q -y \
                --no-install-recommends -t "$_QEMU11_BACKPORTS" install qemu-system-x86 &&
            _qemu11_in_root "$dir" apt-get clean
    } >"$out" 2>&1; then
        tail -n 30 "$out" >&2
        log "QEMU ${_QEMU11_MIN}: apt-get install -t ${_QEMU11_BACKPORTS} qemu-system-x86 failed in ${dir} (output above)"
        return 1
    fi
    rm -f "$out"
}

# ensure_qemu11: QEMU >= 11.1 in QEMU11_ROOT, built once (mmdebstrap, then trixie-backports'
# qemu-system-x86) and reused while its stamp is there and its QEMU says 11.1 or newer.
# Sets QEMU11_VERSION. Dies when QEMU 11.1 cannot be had: that is a failure, never a skip.
# shellcheck disable=SC2034 # QEMU11_VERSION is for the caller
ensure_qemu11() {
    ((_QEMU11_OK)) && return 0
    [[ ${EUID} -eq 0 ]] ||
        die "QEMU ${_QEMU11_MIN} runs from a chroot (${QEMU11_ROOT}): run this as root"
    local root="$QEMU11_ROOT" version
    if [[ -e "${root}/${_QEMU11_STAMP}" ]]; then
        version="$(_qemu11_version "$root")"
        if _qemu11_new_enough "$version"; then
            QEMU11_VERSION="$version" _QEMU11_OK=1
            return 0
        fi
        log "QEMU ${_QEMU11_MIN}: ${root} has QEMU '${version:-none}', not >= ${_QEMU11_MIN}; building it again"
    fi
    ensure_debian_packages mmdebstrap
    local tmp="${root}.tmp" start secs lock
    mkdir -p "$(dirname "$root")"
    # One build at a time: a second run (another checkout's tests) waits, then finds the root.
    exec {lock}>"${root}.lock"
    flock "$lock"
    version="$(_qemu11_version "$root")"
    if [[ -e "${root}/${_QEMU11_STAMP}" ]] && _qemu11_new_enough "$version"; then
        exec {lock}>&-
        QEMU11_VERSION="$version" _QEMU11_OK=1
        return 0
    fi
    start="$(date +%s)"
    # Two tries: a download can fail once. Each starts from scratch, removing whatever an earlier,
    # interrupted or outdated build left (--one-file-system: never follow a mount into the host's
    # /dev or /sys should one still be there).
    local try
    for try in 1 2; do
        rm -rf --one-file-system "$tmp"
        _qemu11_build "$tmp" && break
        ((try == 2)) && die "QEMU ${_QEMU11_MIN} could not be set up in ${tmp} (see above); it is required, not optional"
        log "QEMU ${_QEMU11_MIN}: trying the set-up once more"
    done
    version="$(_qemu11_version "$tmp")"
    _qemu11_new_enough "$version" ||
        die "QEMU ${_QEMU11_MIN}: ${_QEMU11_BACKPORTS} installed QEMU '${version:-none}', not ${_QEMU11_MIN} or newer (root left in ${tmp})"
    echo "QEMU ${version} from ${_QEMU11_BACKPORTS}, built $(date -u +%Y-%m-%dT%H:%M:%SZ)" >"${tmp}/${_QEMU11_STAMP}"
    rm -rf --one-file-system "$root"
    mv "$tmp" "$root"
    secs=$(($(date +%s) - start))
    log "QEMU ${_QEMU11_MIN}: QEMU ${version} ready in ${root}: set up in ${secs}s, $(du -sh "$root" | cut -f1) on disk"
    exec {lock}>&-
    QEMU11_VERSION="$version" _QEMU11_OK=1
}

# _qemu11_bind_dirs PATH...: print, one a line, the host directories to mount into the root for
# these paths: each directory itself, or the parent of anything else (a file, a socket QEMU will
# create); only directories the root does not have, or has empty (an earlier mount point), and
# never a directory inside another one that is printed.
_qemu11_bind_dirs() {
    local p d
    for p in "$@"; do
        [[ "$p" == /* ]] || continue
        if [[ -d "$p" ]]; then d="$p"; else d="$(dirname "$p")"; fi
        [[ -d "$d" ]] || continue
        d="$(realpath "$d")"
        # The root's own /dev (the host's, with /dev/shm), /proc and /sys are mounted anyway.
        case "$d" in / | /dev | /dev/* | /proc | /proc/* | /sys | /sys/*) continue ;; esac
        if [[ -e "${QEMU11_ROOT}${d}" || -L "${QEMU11_ROOT}${d}" ]]; then
            [[ -d "${QEMU11_ROOT}${d}" && ! -L "${QEMU11_ROOT}${d}" ]] || continue
            [[ -z "$(ls -A "${QEMU11_ROOT}${d}")" ]] || continue
        fi
        echo "$d"
    done | LC_ALL=C sort -u | awk '{ for (i = 1; i <= n; i++) if (index($0, kept[i] "/") == 1) next; kept[++n] = $0; print }'
}

# _qemu11_args_paths ARG...: the absolute paths inside QEMU arguments ("-kernel /x",
# "path=/x,...", "mem-path=/x"), one a line.
_qemu11_args_paths() {
    local a part
    for a in "$@"; do
        local IFS=,
        for part in $a; do
            part="${part#*=}"
            [[ "$part" == /* ]] && echo "$part"
        done
    done
}

# qemu11_command [--args QEMU_ARG...] [--] [DIR...]: set QEMU11_CMD to the command that runs the
# root's qemu-system-x86_64 (QEMU's arguments follow it) with the DIRs, and the directories of
# the paths in the QEMU_ARGs, mounted at the same paths. Creates the mount points in the root;
# qemu11_cleanup removes those it created.
qemu11_command() {
    ensure_qemu11
    local paths=() in_args=0
    while (($#)); do
        case "$1" in
            --args) in_args=1 ;;
            --) in_args=0 ;;
            *) if ((in_args)); then
                   mapfile -t -O "${#paths[@]}" paths < <(_qemu11_args_paths "$1")
               else
                   paths+=("$1")
               fi ;;
        esac
        shift
    done
    local dirs=() d
    mapfile -t dirs < <(_qemu11_bind_dirs "${paths[@]}")
    for d in "${dirs[@]}"; do
        _qemu11_mkdir_in_root "$d"
    done
    # shellcheck disable=SC2016,SC2034 # expanded by that sh, from its arguments; for the caller
    QEMU11_CMD=(unshare --mount --propagation private -- /bin/sh -c '
        root="$1"; n="$2"; shift 2
        mount --rbind /dev "$root/dev" && mount -t proc proc "$root/proc" &&
            mount --rbind /sys "$root/sys" || { echo "qemu11: cannot mount /dev, /proc, /sys in $root" >&2; exit 125; }
        while [ "$n" -gt 0 ]; do
            mount --bind "$1" "$root$1" || { echo "qemu11: cannot mount $1 in $root" >&2; exit 125; }
            shift; n=$((n - 1))
        done
        exec chroot "$root" qemu-system-x86_64 "$@"' qemu11 "$QEMU11_ROOT" "${#dirs[@]}" "${dirs[@]}")
}

_QEMU11_MADE=()

# _qemu11_mkdir_in_root DIR: create ROOT/DIR (and its missing parents), remembering which, and
# make sure it stays inside the root (no symlink of the root's leads out of it).
_qemu11_mkdir_in_root() {
    local d="$1" p="$1" missing=() real
    while [[ "$p" != / && ! -e "${QEMU11_ROOT}${p}" ]]; do
        missing=("$p" "${missing[@]}")
        p="$(dirname "$p")"
    done
    mkdir -p "${QEMU11_ROOT}${d}"
    real="$(realpath "${QEMU11_ROOT}${d}")"
    [[ "$real" == "${QEMU11_ROOT}${d}" ]] ||
        die "QEMU ${_QEMU11_MIN}: mount point ${QEMU11_ROOT}${d} resolves to ${real}, outside the root"
    local m
    for m in "${missing[@]}"; do
        _QEMU11_MADE=("${QEMU11_ROOT}${m}" "${_QEMU11_MADE[@]}")
    done
}

# qemu11_cleanup: remove the (empty) mount points qemu11_command created in the root.
qemu11_cleanup() {
    local m
    for m in "${_QEMU11_MADE[@]}"; do
        rmdir "$m" 2>/dev/null || true
    done
    _QEMU11_MADE=()
}
