"""Long-run oracle check: the fast greedy counts (``blend.greedy_counts``) against the plain replay
(``_greedy.advance_plain``, the scalar loop) at up to 10^9 draws, on a few blends. Prints each comparison.

    python bench/greedy_oracle.py                      # 10^6 .. 10^9 draws (about 10 minutes on a busy 2-core machine)
    python bench/greedy_oracle.py --max-draws 100000000

Blends: 2 sources (random, log-uniform 1e-6..1), plan_bench's 8 sources, 8 equal weights (ties), StableLM-alpha's
35-source blend from the real configs (its weights copied below), each normalised as megatron-core does
(``blend.normalize``). StableLM's plain replay is 35 comparisons a draw: it stops at ``--max-draws-35``.
Every line: blend, draws, seconds fast and plain, and ``equal`` or ``DIFFERENT``. Exit status 1 on any
difference. tests/semantics/test_greedy_corpora.py checks every blend of the test corpora up to 10^6 draws.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from neox_epoch.semantics import blend  # noqa: E402

#: stablelm-base-alpha-3b.yml / -7b.yml train_data_weights (StableLM's configs in the vendored real-config tarball)
STABLELM_ALPHA = [
    0.03,
    0.02,
    3.5,
    13.87,
    30.88,
    0.34,
    0.03,
    0.1,
    0.01,
    0.5,
    0.25,
    0.25,
    0.11,
    1,
    0.1,
    0.5,
    0.6,
    0.19,
    0.05,
    2,
    3.5,
    4.15,
    5.75,
    3.17,
    3.44,
    3.49,
    3,
    6,
    0.02,
    2,
    0.01,
    3.95,
    0.05,
    1.09,
    6.05,
]
PLAN_BENCH_8 = [0.25, 0.10, 0.20, 0.10, 0.10, 0.10, 0.10, 0.05]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-draws", type=int, default=10**9)
    ap.add_argument("--max-draws-35", type=int, default=10**8, help="longest run of the 35-source blend")
    ap.add_argument("--seed", type=int, default=25)
    args = ap.parse_args()
    if blend._greedy is None:
        print("the C extension is not built: python setup.py build_ext --inplace", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    blends = {
        "2 random": [10 ** rng.uniform(-6, 0) for _ in range(2)],
        "8 plan_bench": PLAN_BENCH_8,
        "8 equal": [1.0] * 8,
        "35 StableLM-alpha": [float(x) for x in STABLELM_ALPHA],
    }
    bad = 0
    for name, raw in blends.items():
        w = blend.normalize(raw)
        top = args.max_draws_35 if len(w) > 8 else args.max_draws
        n = 10**6
        while n <= top:
            draws = n + rng.randrange(1000)  # not a round number: the last steps' ties differ
            t = time.perf_counter()
            fast = blend.greedy_counts(w, draws)
            t_fast = time.perf_counter() - t
            t = time.perf_counter()
            plain = list(blend._greedy.advance_plain(w, 0, [0] * len(w), draws, [])[0])
            t_plain = time.perf_counter() - t
            ok = fast == plain and sum(fast) == draws
            bad += not ok
            print(
                f"{name:<18} {draws:>13,d} draws  fast {t_fast:8.3f} s  plain {t_plain:8.2f} s  "
                f"{'equal' if ok else 'DIFFERENT: ' + str(fast) + ' vs ' + str(plain)}",
                flush=True,
            )
            n *= 10
    print(f"{'every comparison equal' if not bad else f'{bad} DIFFERENT'} (load average {os.getloadavg()[0]:.1f})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
