/* Result names, and the "device broke a rule" latch. */

#include "util.h"

const char *wddm_result_name(wddm_result result)
{
    switch (result) {
    case WDDM_OK: return "OK";
    case WDDM_E_OS: return "E_OS";
    case WDDM_E_INVALID: return "E_INVALID";
    case WDDM_E_DEVICE: return "E_DEVICE";
    case WDDM_E_CAPSET: return "E_CAPSET";
    case WDDM_E_TIMEOUT: return "E_TIMEOUT";
    case WDDM_E_FULL: return "E_FULL";
    case WDDM_E_EMPTY: return "E_EMPTY";
    case WDDM_E_RANGE: return "E_RANGE";
    case WDDM_E_STATE: return "E_STATE";
    case WDDM_E_REFUSED: return "E_REFUSED";
    default: return "E_UNKNOWN";
    }
}

wddm_result wddm_broken(wddm_dev *dev, const char *msg, uint64_t a, uint64_t b)
{
    wddm_log(dev, WDDM_OS_LOG_ERROR, msg, a, b);
    dev->broken = true;
    return WDDM_E_DEVICE;
}
