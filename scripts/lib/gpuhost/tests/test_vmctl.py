import unittest

from gpuhost import vmctl


class TdrPlanTest(unittest.TestCase):
    def test_armed_id(self):
        self.assertEqual(vmctl.armed_id("armed injection 3: hang\n"), 3)
        self.assertEqual(vmctl.armed_id("armed injection 12: slow 60s"), 12)
        self.assertIsNone(vmctl.armed_id("disarmed 1 injection(s)\n"))
        self.assertIsNone(vmctl.armed_id(""))

    def test_unfired(self):
        armed = {1: ("tdr-hang", "hang"), 2: ("tdr-preempt-refuse", "slow 60s"),
                 3: ("tdr-preempt-refuse", "preempt-refuse")}
        listing = {"armed": [], "fired": [{"id": 1, "action": "hang", "fence": 5},
                                          {"id": 3, "action": "preempt-refuse", "fence": None}]}
        self.assertEqual(vmctl.unfired(listing, armed),
                         [(2, "tdr-preempt-refuse", "slow 60s")])
        self.assertEqual(vmctl.unfired({"fired": []}, {}), [])
        self.assertEqual(len(vmctl.unfired({}, armed)), 3)

    def test_every_tdr_point_is_in_the_plan(self):
        self.assertEqual(vmctl.PLAN_POINTS["tdr"][-1], vmctl.TDR_DONE)
        self.assertEqual(vmctl.PLAN_POINTS["tdr-cdev"][-1], vmctl.CDEV_TDR_DONE)
        rust = set(vmctl.TDR_ARMS) - set(vmctl.CDEV_TDR_ARMS)
        self.assertEqual(set(vmctl.PLAN_POINTS["tdr"][:-1]), rust)
        self.assertEqual(set(vmctl.PLAN_POINTS["tdr-cdev"]),
                         rust | set(vmctl.CDEV_TDR_ARMS) | {vmctl.TDR_DONE, vmctl.CDEV_TDR_DONE})
        for specs in vmctl.TDR_ARMS.values():
            self.assertTrue(specs)


if __name__ == "__main__":
    unittest.main()
