#!/usr/bin/env bash
# Builds the C device library and its Linux guest suite: build.sh OUT_DIR [CC].
# The library alone is also compiled with -Wall -Wextra -Werror -pedantic as C11 (the check a
# KMD build would make); the suite is linked statically for the guest's initramfs.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:?usage: build.sh OUT_DIR [CC]}"
cc="${2:-gcc}"
mkdir -p "$out"
flags=(-std=c11 -Wall -Wextra -Werror -pedantic -O2 -I"${here}/../../device/abi/include" -I"${here}/include")
objs=()
for src in "${here}"/src/*.c; do
    obj="${out}/$(basename "${src%.c}").o"
    "$cc" "${flags[@]}" -ffreestanding -c "$src" -o "$obj"
    objs+=("$obj")
done
"$cc" "${flags[@]}" -I"${here}/os/linux" -static -o "${out}/wddm-cdev-suite" \
    "${here}/os/linux/suite.c" "${here}/os/linux/linux_os.c" "${objs[@]}"
