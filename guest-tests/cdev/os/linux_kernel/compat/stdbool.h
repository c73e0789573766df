/* SPDX-License-Identifier: GPL-2.0-only OR BSD-3-Clause */
/* <stdbool.h> for the C device library inside the Linux kernel: bool, true, false. */
#ifndef WDDM_LK_COMPAT_STDBOOL_H
#define WDDM_LK_COMPAT_STDBOOL_H
#include <linux/types.h>
#include <linux/stddef.h>
#endif
