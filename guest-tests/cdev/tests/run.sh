#!/usr/bin/env bash
# Builds and runs the C device library's host unit tests: run.sh OUT_DIR.
# Twice: strict C11 (-Wall -Wextra -Werror -pedantic), then with AddressSanitizer and
# UndefinedBehaviorSanitizer (aborting on the first report). Each run prints one
# "CDEV-UNIT name PASS|FAIL" line per test; the sanitizer run's lines are prefixed "asan:".
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:?usage: run.sh OUT_DIR}"
mkdir -p "$out"
flags=(-std=c11 -Wall -Wextra -Werror -pedantic -g -I"${here}/../../../device/abi/include"
    -I"${here}/../include")
sources=("${here}"/*.c "${here}"/../src/*.c)
gcc "${flags[@]}" -O2 -o "${out}/cdev-unit" "${sources[@]}"
gcc "${flags[@]}" -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
    -fno-sanitize-recover=all -o "${out}/cdev-unit-asan" "${sources[@]}"
rc=0
"${out}/cdev-unit" || rc=1
"${out}/cdev-unit-asan" | sed 's/^/asan: /' || rc=1
[[ "${PIPESTATUS[0]}" == 0 ]] || rc=1
exit "$rc"
