#!/usr/bin/env bash
# Builds the kernel-mode driver and its guest test program: build.sh OUT_DIR KERNEL_HEADERS_DIR.
#   OUT_DIR/wddm_gpu_kmod.ko   the module, against the headers of the guest's own kernel
#                              (KERNEL_HEADERS_DIR: an unpacked linux-headers-<abi>-amd64, which
#                              names the compiler the kernel was built with)
#   OUT_DIR/wddm-kmod-test     the static test program run in the guest
# The sources (this directory's, the C device library's core and its Linux kernel OS layer) are
# linked into OUT_DIR/module, where kbuild writes its objects: the tree stays clean.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(cd "${here}/.." && pwd)" # guest-tests
out="${1:?usage: build.sh OUT_DIR KERNEL_HEADERS_DIR}"
kdir="${2:?usage: build.sh OUT_DIR KERNEL_HEADERS_DIR}"
[[ -f "${kdir}/Makefile" ]] || { echo "build.sh: no kernel headers at ${kdir}" >&2; exit 1; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"
build="${out}/module"
rm -rf "$build"
mkdir -p "$build"
ln -s "${here}/Kbuild" "${build}/Kbuild"
for f in "${here}"/*.c "${src}"/cdev/os/linux_kernel/*.c "${src}"/cdev/src/*.c; do
    ln -s "$f" "${build}/$(basename "$f")"
done
make -C "$kdir" M="$build" WDDM_SRC="$src" modules
install -m 0644 "${build}/wddm_gpu_kmod.ko" "${out}/wddm_gpu_kmod.ko"
gcc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -O2 -static -I"${here}" \
    -o "${out}/wddm-kmod-test" "${here}/test/wddm_kmod_test.c"
