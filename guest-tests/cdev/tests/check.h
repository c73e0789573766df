/* The host unit tests' tiny harness: CHECK records a failed assertion (file, line, text) in the
 * running test; run_test prints one "CDEV-UNIT name PASS|FAIL" line per test. */

#ifndef CDEV_TEST_CHECK_H
#define CDEV_TEST_CHECK_H

#include <stdbool.h>

extern int check_failures; /* in the running test */
void check_fail(const char *file, int line, const char *text);
void run_test(const char *name, void (*test)(void));
/* run_test under the name `prefix` + `name` (one test per row of a table). */
void run_test_named(const char *prefix, const char *name, void (*test)(void));

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond))                                                                         \
            check_fail(__FILE__, __LINE__, #cond);                                           \
    } while (0)
#define CHECK_EQ(a, b)                                                                       \
    do {                                                                                     \
        unsigned long long check_a_ = (unsigned long long)(a);                               \
        unsigned long long check_b_ = (unsigned long long)(b);                               \
        if (check_a_ != check_b_)                                                            \
            check_fail(__FILE__, __LINE__, #a " == " #b);                                    \
    } while (0)

/* Each test file's entry point: runs its tests through run_test. */
void capset_tests(void);
void segment_tests(void);
void paging_tests(void);
void ring_tests(void);
void timeout_tests(void);
void gpummu_tests(void);
void context_tests(void);
void tdr_tests(void);
void interrupt_tests(void);

#endif
