/* Host unit tests of the C device library's refusal paths: no device, a fake OS table over
 * plain memory (fake_os.c). Exit status: the number of failed tests (capped at 100). */

#include <stdio.h>

#include "check.h"

int check_failures;
static int tests_failed, tests_run;

void check_fail(const char *file, int line, const char *text)
{
    check_failures++;
    fprintf(stderr, "  %s:%d: CHECK failed: %s\n", file, line, text);
}

void run_test(const char *name, void (*test)(void))
{
    check_failures = 0;
    test();
    tests_run++;
    if (check_failures)
        tests_failed++;
    printf("CDEV-UNIT %s %s\n", name, check_failures ? "FAIL" : "PASS");
    fflush(stdout);
}

void run_test_named(const char *prefix, const char *name, void (*test)(void))
{
    char full[96];
    snprintf(full, sizeof(full), "%s%s", prefix, name);
    run_test(full, test);
}

int main(void)
{
    capset_tests();
    segment_tests();
    paging_tests();
    ring_tests();
    timeout_tests();
    gpummu_tests();
    context_tests();
    tdr_tests();
    interrupt_tests();
    printf("CDEV-UNIT-SUMMARY %d run, %d failed\n", tests_run, tests_failed);
    return tests_failed > 100 ? 100 : tests_failed;
}
