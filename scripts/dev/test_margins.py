#!/usr/bin/env python3
"""Rank the CUDA-vs-oracle comparisons by how close random inputs bring them to their tolerances.

The oracle tests (tests/kernels/cuda_oracle.h) draw fresh inputs every run, so a tolerance that random inputs
nearly reach fails a CI run now and then. With HPDT_TEST_MARGINS=FILE each comparison appends
"TEST N MARGIN SEED" to FILE: the N-th comparison of TEST, its largest |got - want| / allowed over the elements
(1 is the tolerance, above it fails) and the run's --gtest_random_seed. Run the suite a few times with it, e.g.

    HPDT_TEST_MARGINS=/tmp/margins.txt ctest --test-dir build/ci -L emu -R 'test_(norm|gemm)_cuda'
    scripts/dev/test_margins.py /tmp/margins.txt --top 20

and read the top of the list: comparisons above ~0.5 are the ones to look at (is the tolerance the op's arithmetic
or a guess?); one above 1 failed, and its seed redraws its inputs (--gtest_random_seed=SEED --gtest_filter=TEST).
"""
import argparse
import collections
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="files written through HPDT_TEST_MARGINS")
    ap.add_argument("--top", type=int, default=25, help="how many comparisons to list (default 25)")
    ap.add_argument("--above", type=float, default=0.0, help="list only comparisons whose worst margin exceeds this")
    args = ap.parse_args()

    worst = {}  # (test, n) -> (margin, seed)
    runs = collections.Counter()
    for path in args.files:
        try:
            f = open(path, encoding="utf-8")
        except OSError as e:
            print(f"test_margins.py: cannot read {path}: {e.strerror}", file=sys.stderr)
            return 2
        with f:
            for lineno, line in enumerate(f, 1):
                parts = line.split()
                if len(parts) != 4:
                    print(f"test_margins.py: {path}:{lineno}: expected 'TEST N MARGIN SEED', got {line.rstrip()!r}",
                          file=sys.stderr)
                    return 2
                try:
                    key = (parts[0], int(parts[1]))
                    margin, seed = float(parts[2]), int(parts[3])
                except ValueError:
                    print(f"test_margins.py: {path}:{lineno}: N, MARGIN and SEED must be numbers: {line.rstrip()!r}",
                          file=sys.stderr)
                    return 2
                runs[key] += 1
                if key not in worst or margin > worst[key][0]:
                    worst[key] = (margin, seed)
    if not worst:
        print("test_margins.py: no comparisons recorded (was HPDT_TEST_MARGINS set for the run?)", file=sys.stderr)
        return 2

    ranked = sorted(worst.items(), key=lambda kv: -kv[1][0])
    shown = [kv for kv in ranked if kv[1][0] > args.above][: args.top]
    failed = sum(1 for _, (m, _) in ranked if m > 1)
    print(f"{len(ranked)} comparisons, {sum(runs.values())} records; {failed} above 1 (failed)")
    print(f"{'worst':>10}  {'runs':>5}  {'seed':>11}  comparison")
    for (test, n), (margin, seed) in shown:
        print(f"{margin:10.4g}  {runs[(test, n)]:5d}  {seed:11d}  {test} #{n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
