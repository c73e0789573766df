/* The fixture of the test files that drive a whole device against the fake (test_rings.c,
 * test_timeout.c): included once by each, it gives that file its own fake `f`, device `dev` and
 * capset `caps`, with up() (a valid capset, the device up on it: checked) and down() (teardown,
 * then no DMA memory left and the lock never misused). */

#ifndef CDEV_TEST_DEVICE_FIXTURE_H
#define CDEV_TEST_DEVICE_FIXTURE_H

#include "caps_fixture.h"
#include "fake_os.h"

static fake f;
static wddm_dev dev;
static test_caps caps;

static bool up(void)
{
    return fake_up_valid(&f, &caps, &dev);
}

static void down(void)
{
    fake_down_checked(&f, &dev);
}

#endif
