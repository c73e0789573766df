/* Shared between the Windows layer's own files; not for the KMD. */

#ifndef WDDM_OS_WINDOWS_INTERNAL_H
#define WDDM_OS_WINDOWS_INTERNAL_H

#include "wddm_os_windows.h"

/* Fills layer->bars and the interrupt fields from the resource list and the BAR registers. */
NTSTATUS wddm_win_find_resources(wddm_win_layer *layer);

/* One DbgPrintEx line under the IHVVIDEO component (Debug Print Filter value IHVVIDEO). */
void wddm_win_log(int level, const char *message, ULONG64 a, ULONG64 b);

#endif /* WDDM_OS_WINDOWS_INTERNAL_H */
