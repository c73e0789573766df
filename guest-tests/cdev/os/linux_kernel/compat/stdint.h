/* SPDX-License-Identifier: GPL-2.0-only OR BSD-3-Clause */
/* <stdint.h> for the C device library built inside the Linux kernel (os/linux_kernel): the
 * kernel has no C library headers; <linux/types.h> has the fixed-width types, this adds the
 * limits the library uses, as plain constants (usable in #if). Only on the include path of the kernel build. */
#ifndef WDDM_LK_COMPAT_STDINT_H
#define WDDM_LK_COMPAT_STDINT_H
#include <linux/types.h>
#ifndef UINT8_MAX
#define UINT8_MAX 0xffU
#endif
#ifndef UINT16_MAX
#define UINT16_MAX 0xffffU
#endif
#ifndef UINT32_MAX
#define UINT32_MAX 0xffffffffU
#endif
#ifndef UINT64_MAX
#define UINT64_MAX 0xffffffffffffffffULL
#endif
#ifndef INT32_MAX
#define INT32_MAX 0x7fffffff
#endif
#endif
