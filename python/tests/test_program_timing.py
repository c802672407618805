"""Timings of the program child (run with KILN_TIMINGS=1; skipped otherwise).

Reports, over 20 runs each: spawn to boot-ack, and `return 1` end to end
(spawn to done), as medians.
"""

import os
import statistics
import sys
import unittest

from tests import test_program_host as H

RUNS = int(os.environ.get("KILN_TIMING_RUNS", "20"))


@unittest.skipUnless(os.environ.get("KILN_TIMINGS"), "set KILN_TIMINGS=1 to measure")
class Timing(unittest.TestCase):
    def test_return_one(self):
        acked, done, run_done, calls = [], [], [], []
        for _ in range(RUNS):
            r = H.run("return 1")
            self.assertEqual(r.done, {"type": "done", "value": 1})
            acked.append(r.acked)
            done.append(r.finished)
            run_done.append(r.finished - r.ran)
        for _ in range(RUNS):
            r = H.run("import asyncio\nawait asyncio.gather(*(tools.search(i) for i in range(1025)))\nreturn 1")
            self.assertEqual(r.done, {"type": "done", "value": 1})
            calls.append(r.finished)
        ms = lambda xs: "median %.1f ms (min %.1f, max %.1f)" % (
            1000 * statistics.median(xs), 1000 * min(xs), 1000 * max(xs))
        sys.stderr.write("\n%s, %d runs each\n" % (H.PYTHON, RUNS))
        sys.stderr.write("  spawn -> boot-ack:            %s\n" % ms(acked))
        sys.stderr.write("  spawn -> done, `return 1`:    %s\n" % ms(done))
        sys.stderr.write("  run -> done, `return 1`:      %s\n" % ms(run_done))
        sys.stderr.write("  spawn -> done, 1,025 calls:   %s\n" % ms(calls))


if __name__ == "__main__":
    unittest.main()
