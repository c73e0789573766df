/* SPDX-License-Identifier: GPL-2.0-only OR BSD-3-Clause */
/* <stddef.h> for the C device library inside the Linux kernel: size_t, NULL and offsetof. */
#ifndef WDDM_LK_COMPAT_STDDEF_H
#define WDDM_LK_COMPAT_STDDEF_H
#include <linux/types.h>
#include <linux/stddef.h>
#endif
