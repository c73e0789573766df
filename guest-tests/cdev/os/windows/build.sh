#!/usr/bin/env bash
# Builds the C device library for Windows x64 (LLP64) with its Windows kernel-mode OS layer and
# links them, with sample_kmd.c's DriverEntry, into a kernel-mode image (.sys, subsystem native,
# imports from ntoskrnl.exe and hal.dll only), so a wrong type, a missing kernel routine or an
# unresolved symbol fails the build. Installs the cross compiler (Debian gcc-mingw-w64-x86-64,
# which brings mingw-w64-x86-64-dev and its DDK headers ddk/wdm.h, ddk/ntddk.h) when missing.
# Prints the image's imports and ends with "windows kmd image: OK" or exits non-zero.
#
#   guest-tests/cdev/os/windows/build.sh [--out DIR]   (default target/cdev-windows)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../../../scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../../../scripts/lib/common.sh"

OUT="${REPO_ROOT}/target/cdev-windows"
[[ "${1:-}" == --out ]] && OUT="${2:?--out needs a directory}"

CC=x86_64-w64-mingw32-gcc
OBJDUMP=x86_64-w64-mingw32-objdump
# gcc-mingw-w64-x86-64 brings binutils-mingw-w64-x86-64 (objdump) and mingw-w64-x86-64-dev.
ensure_debian_packages gcc-mingw-w64-x86-64 binutils-mingw-w64-x86-64 mingw-w64-x86-64-dev

# ntddk.h includes <wdm.h>: the DDK folder goes on the include path (as the WDK has it).
ddk_dir="$(printf '#include <ddk/wdm.h>\n' | "$CC" -E -M -x c - | grep -o '/[^ ]*/ddk/wdm.h' | head -n 1)"
[[ -n "$ddk_dir" ]] || die "mingw-w64's ddk/wdm.h not found"
ddk_dir="$(dirname "$ddk_dir")"

LIB_SRC="${REPO_ROOT}/guest-tests/cdev/src"
WIN_SRC="${REPO_ROOT}/guest-tests/cdev/os/windows"
# Kernel code: no C runtime (-ffreestanding), no stack probes the kernel does not export.
CFLAGS=(-std=c11 -O2 -Wall -Wextra -Werror -pedantic -ffreestanding -fno-stack-protector
    -mno-stack-arg-probe -I device/abi/include -I guest-tests/cdev/include)
cd "$REPO_ROOT"

rm -rf "$OUT"
mkdir -p "$OUT/obj"
objs=()
compile() { # compile SRC [EXTRA_FLAG...]
    local src="$1" obj
    shift
    obj="${OUT}/obj/$(basename "$(dirname "$src")")-$(basename "$src" .c).o"
    src="${src#"${REPO_ROOT}/"}"
    echo "$CC ${CFLAGS[*]} $* -c ${src}"
    "$CC" "${CFLAGS[@]}" "$@" -c "$src" -o "$obj"
    objs+=("$obj")
}
# The library itself includes no OS header: built without the DDK on the path.
for src in "${LIB_SRC}"/*.c; do
    compile "$src"
done
for src in "${WIN_SRC}"/*.c; do
    compile "$src" -isystem "$ddk_dir"
done

image="${OUT}/wddm_gpu_sample.sys"
# A driver image: no CRT, entry DriverEntry, every import resolved now from ntoskrnl/hal.
# shellcheck disable=SC2054 # the commas belong to -Wl, options
# No exports (--exclude-all-symbols: it is not an export driver); relocatable and NX.
LDFLAGS=(-shared -nostdlib -Wl,--subsystem,native -Wl,-e,DriverEntry -Wl,--no-undefined
    -Wl,--exclude-all-symbols -Wl,--dynamicbase -Wl,--nxcompat
    -Wl,--image-base,0x140000000 -Wl,--file-alignment,0x200 -Wl,--section-alignment,0x1000)
echo "$CC ${LDFLAGS[*]} -o ${image#"${REPO_ROOT}/"} <objects> -lntoskrnl -lhal"
"$CC" "${LDFLAGS[@]}" -o "$image" "${objs[@]}" -lntoskrnl -lhal

dump="$("$OBJDUMP" -p "$image")"
echo "imports of ${image#"${REPO_ROOT}/"}:"
awk '/DLL Name:/ { dll = $3; print "  " dll; next }
     dll != "" && /^\t[0-9a-f]+\t/ { print "    " $NF }
     /^$/ { if (dll != "" && seen) dll = ""; seen = (dll != "") }' <<<"$dump"

# Only kernel modules may be imported; the subsystem must be native (1).
bad="$(sed -n 's/^\tDLL Name: //p' <<<"$dump" | grep -v -i -x -E 'ntoskrnl\.exe|hal\.dll' || true)"
[[ -z "$bad" ]] || die "the image imports from user-mode modules: ${bad}"
grep -q -E '^Subsystem[[:space:]]+0*1[[:space:]]' <<<"$dump" || die "the image's subsystem is not native"
echo "windows kmd image: OK"
