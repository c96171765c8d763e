#!/usr/bin/python3
"""The polynomial coefficients of kernels/include/hpdt/kernels/math/float_fns.h (erf_f).

    /usr/bin/python3 scripts/dev/fit_float_fns.py

Near-minimax fits (least squares on Chebyshev nodes, then Lawson reweighting) in double:
  - |x| < 1.25: erf(x)/x - 1 as a degree-8 polynomial in x^2 (erf_f adds the leading x exactly);
  - 1.25 <= |x| < 4: log(erfc(x)) as a degree-8 polynomial in x - 2.625 (erf_f = 1 - exp(.)).
Prints each fit's maximum error and the coefficients, highest degree first, as erf_f's Horner steps
use them. The float function's own error (rounding of the coefficients and of the float Horner steps)
is what tests/kernels/test_float_fns.cpp measures: within 2 ulp.
"""
import math

import numpy as np


def fit(f, a, b, deg, var, n=6000):
    k = np.arange(n)
    xs = (a + b) / 2 + (b - a) / 2 * np.cos(np.pi * (k + 0.5) / n)
    ys = np.array([f(x) for x in xs])
    basis = np.vander(var(xs), deg + 1, increasing=True)
    c, *_ = np.linalg.lstsq(basis, ys, rcond=None)
    for _ in range(40):  # weight the nodes by the current error: pushes the fit towards equal ripples
        r = basis @ c - ys
        w = np.sqrt(np.abs(r) / np.abs(r).max() + 1e-4)
        c, *_ = np.linalg.lstsq(basis * w[:, None], ys * w, rcond=None)
    return c, float(np.max(np.abs(basis @ c - ys)))


def main():
    small, e1 = fit(lambda x: math.erf(x) / x - 1 if x > 0 else 2 / math.sqrt(math.pi) - 1, 0.0, 1.25, 8,
                    lambda x: x * x)
    big, e2 = fit(lambda t: math.log(math.erfc(t)), 1.25, 4.0, 8, lambda t: t - 2.625)
    print("|x| < 1.25, erf(x)/x - 1 in x^2: max error %.3g" % e1)
    print("  " + ", ".join("%.9e" % v for v in small[::-1]))
    print("1.25 <= |x| < 4, log erfc(x) in x - 2.625: max error %.3g" % e2)
    print("  " + ", ".join("%.9e" % v for v in big[::-1]))


if __name__ == "__main__":
    main()
