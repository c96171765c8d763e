#!/usr/bin/env python3
"""scripts/dev/test_margins.py on made-up records (ranking, the failed count, --above, bad input named by file and
line), and, given an emulated oracle test binary as argv[1], HPDT_TEST_MARGINS end to end: cuda_oracle.h's close()
records every comparison of a run, numbered in its test, with the run's --gtest_random_seed."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "dev", "test_margins.py")
BINARY = sys.argv.pop(1) if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else None

RECORDS = """Norm.A 1 0.25 11
Norm.A 2 0.5 11
Norm.A 1 0.75 12
Gemm.B/3 1 1.5 12
Gemm.B/3 2 0.01 13
"""


def run(*args, env=None):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, env=env)


class TestMargins(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.d.name, "margins.txt")
        with open(self.path, "w") as f:
            f.write(RECORDS)

    def tearDown(self):
        self.d.cleanup()

    def test_ranks_the_worst_of_each_comparison(self):
        r = run(self.path)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertIn("4 comparisons, 5 records; 1 above 1 (failed)", lines[0])
        rows = [line.split() for line in lines[2:]]
        # worst first; Norm.A #1's worst of its two runs (0.75, seed 12)
        self.assertEqual([(row[3], row[4]) for row in rows], [("Gemm.B/3", "#1"), ("Norm.A", "#1"), ("Norm.A", "#2"),
                                                               ("Gemm.B/3", "#2")])
        self.assertEqual(rows[1][:3], ["0.75", "2", "12"])

    def test_above_and_top(self):
        r = run(self.path, "--above", "0.4", "--top", "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([line.split()[3:] for line in r.stdout.splitlines()[2:]], [["Gemm.B/3", "#1"], ["Norm.A", "#1"]])

    def test_bad_input_is_named(self):
        with open(self.path, "a") as f:
            f.write("Norm.A x 0.1 11\n")
        r = run(self.path)
        self.assertEqual(r.returncode, 2)
        self.assertIn("margins.txt:6: N, MARGIN and SEED must be numbers", r.stderr)
        r = run(os.path.join(self.d.name, "missing.txt"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot read", r.stderr)
        empty = os.path.join(self.d.name, "empty.txt")
        open(empty, "w").close()
        r = run(empty)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no comparisons recorded", r.stderr)

    @unittest.skipUnless(BINARY, "no emulated oracle test binary given")
    def test_an_oracle_run_records_every_comparison(self):
        out = os.path.join(self.d.name, "run.txt")
        env = dict(os.environ, HPDT_TEST_MARGINS=out)
        test = "NormCuda.FusedReluMaskFromXRoundsAsTheForwardStored"
        r = subprocess.run([BINARY, f"--gtest_filter={test}", "--gtest_random_seed=7"], capture_output=True,
                           text=True, env=env)
        self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-2000:])
        with open(out) as f:
            records = [line.split() for line in f]
        # 3 dtypes x 5 cases x (dx, dgamma, dbeta) x (the mask from x, from y)
        self.assertEqual(len(records), 90)
        self.assertEqual({rec[0] for rec in records}, {test})
        self.assertEqual([int(rec[1]) for rec in records], list(range(1, 91)))
        self.assertEqual({rec[3] for rec in records}, {"7"})
        margins = [float(rec[2]) for rec in records]
        self.assertTrue(all(0 <= m <= 1 for m in margins), margins)
        self.assertTrue(any(m > 0 for m in margins), "every comparison exact: the margins are not measured")
        r = run(out, "--top", "3")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("90 comparisons, 90 records; 0 above 1 (failed)", r.stdout)


if __name__ == "__main__":
    unittest.main()
