/* A fake OS table over plain memory and a fake virtio-gpu function behind it, enough for
 * wddm_dev_init and the control queue: config space with the virtio capabilities, BAR 0 with
 * the common/notify/ISR/device blocks (plain memory: a register reads back what was written),
 * DMA memory from the heap (bus address = the pointer). The "device" runs inside stall_us:
 * each call serves the requests made available since the last one, unless the test holds them.
 * Tests inject a hostile used ring with fake_push_used. */

#ifndef CDEV_TEST_FAKE_OS_H
#define CDEV_TEST_FAKE_OS_H

#include <stdbool.h>
#include <stdint.h>

#include "caps_fixture.h"
#include "wddm_gpu_dev.h"

#define FAKE_BAR0_SIZE 0x4000u
#define FAKE_HELD_MAX 64

typedef struct fake_request {
    uint16_t head;
    uint32_t type;
    volatile uint8_t *resp; /* the device-writable buffer */
    uint32_t resp_cap;
    uint32_t seq;   /* arrival order */
    uint32_t fence; /* a SUBMIT's submission_fence_id */
    bool node;      /* a SUBMIT the node holds (hang_submits, lose_submits), not hold_type */
    bool lost;      /* of those, one that completed but whose answer is withheld */
} fake_request;

typedef struct fake {
    uint8_t config[256];
    _Alignas(8) uint8_t bar0[FAKE_BAR0_SIZE];
    uint64_t clock_us;
    uint16_t seen_avail;
    /* The capset GET_CAPSET answers with. */
    const void *capset;
    uint32_t capset_size;
    /* From clock_us >= capset_later_at_us on, GET_CAPSET serves capset_later (same size). */
    const void *capset_later;
    uint64_t capset_later_at_us;
    uint32_t capset_reads;
    /* Capset index 1, the GpuMmu geometry (NULL: GET_CAPSET_INFO 1 and GET_CAPSET 62 are
     * refused with ERR_INVALID_PARAMETER). fake_set_gpummu sets num_capsets to 2 and the
     * answers below to the device's; a test then breaks one of them. */
    const WddmGpuMmuCaps *gpummu;
    uint32_t gpummu_id, gpummu_version, gpummu_max_size; /* GET_CAPSET_INFO 1 */
    uint32_t gpummu_type;  /* GET_CAPSET 62's response type */
    uint32_t gpummu_short; /* bytes its answer falls short by */
    uint32_t gpummu_reads;
    /* Requests of this type (and every WAIT_EVENT) are held, not answered. */
    uint32_t hold_type;
    fake_request held[FAKE_HELD_MAX];
    uint32_t held_count;
    /* When non-zero: at this clock, held requests of hold_type are answered as usual. */
    uint64_t release_at_us;
    /* CREATE_CONTEXT, DESTROY_CONTEXT, SET_ROOT_PAGE_TABLE, RESET_ENGINE: answered with
     * context_type (0: OK_NODATA), context_short bytes short. */
    uint32_t context_type, context_short;
    /* SUBMIT_VIRTUAL: answered with virtual_type (0: RESP_SUBMIT_VIRTUAL), the request's fence
     * plus virtual_fence_delta, virtual_status, virtual_fault as the record (with status
     * PAGE_FAULT), virtual_short bytes short. */
    uint32_t virtual_type, virtual_fence_delta, virtual_status, virtual_short;
    WddmGpuPageFaultRecord virtual_fault;
    /* The last request of those five types, as received. */
    uint32_t last_context_type;
    uint8_t last_context_req[64];
    uint32_t context_requests;
    /* Bookkeeping the tests check. */
    int dma_live;
    int lock_held, lock_misuse;
    const char *last_log;
    int last_log_level;
    uint64_t last_log_a, last_log_b;
    void *status_page; /* the registered status page, or NULL */
    /* The paging node as the device runs it under an injection (docs/fault-injection.md):
     * hang_submits holds every SUBMIT unanswered (QUERY_ENGINE_STATUS: not responsive, the
     * first running, the rest queued); lose_submits completes each (the status page's
     * completed_fence says so) but withholds its answer until QUERY_ENGINE_STATUS (which answers
     * them first and counts them as `released`) or RESET. RESET answers held SUBMITs (status
     * RESET, or OK for withheld ones), held WAIT_EVENTs (CANCELLED), clears both, unregisters
     * the status page. */
    bool hang_submits, lose_submits;
    uint32_t last_fence;       /* the last completed submission's fence */
    uint32_t released_lie;     /* added to QUERY_ENGINE_STATUS's released */
    uint32_t status_node_delta; /* added to its node_ordinal */
    uint32_t held_seq;
    uint32_t resets, queries;
} fake;

/* A fresh fake device serving `capset`, and an OS table over it. */
void fake_init(fake *f, const void *capset, uint32_t capset_size);
wddm_os fake_os_table(fake *f);
/* Offers `caps` as capset 62 at index 1 (num_capsets 2), answered as the device does. */
void fake_set_gpummu(fake *f, const WddmGpuMmuCaps *caps);
/* wddm_dev_init against the fake with a 10 ms timeout and a 64-entry queue. */
wddm_result fake_dev_up(fake *f, wddm_dev *dev);
/* A fake serving a valid WDDM 1.x capset (built in *caps), and the device up on it: checked;
 * false if it did not come up. */
bool fake_up_valid(fake *f, test_caps *caps, wddm_dev *dev);
/* wddm_dev_teardown, then checks that no DMA memory is left and the lock was never misused. */
void fake_down_checked(fake *f, wddm_dev *dev);

/* Serves the requests made available since the last call (stall_us calls it). */
void fake_service(fake *f);
/* Writes one used entry (id, len) and advances the used index: what a device would do. */
void fake_push_used(fake *f, uint32_t id, uint32_t len);
/* Answers held request `i` with `len` bytes already written to its buffer, and forgets it. */
void fake_answer_held(fake *f, uint32_t i, uint32_t len);
/* Writes `size` bytes of `resp` to held request `i`'s buffer, then answers it with `len`. */
void fake_answer_held_with(fake *f, uint32_t i, const void *resp, uint32_t size, uint32_t len);
/* The used ring's index (to move it by hand). */
volatile uint16_t *fake_used_idx(fake *f);

#endif
