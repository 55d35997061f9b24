"""Long-run check: the AVX2 replay (``_greedy.advance``, 11 sources and more) against the plain scalar replay.

    python bench/greedy_verify.py                       # 10^9 draws on two 64-source blends, 2e8 on others
    python bench/greedy_verify.py --draws 100000000 --blends 2

Too slow for the test suite (10^9 plain draws at 64 sources take about a minute). Each blend is run
in four segments (mid-run starts), by both loops, once with one mark per tenth source (the AVX2 scan) and
once without marks (past 16 sources, the hot/cold loop wherever its trial wins); counts and mark steps
must be equal at every segment end. Prints one line per blend and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from neox_epoch.semantics import blend  # noqa: E402

_greedy = blend._greedy


def blends(rng: random.Random) -> list[tuple[str, list[float], float]]:
    """(name, normalized weights, share of --draws)."""
    return [
        ("64 log-uniform 1e-6..1", blend.normalize([10 ** rng.uniform(-6, 0) for _ in range(64)]), 1.0),
        ("64 thirds (near-ties)", blend.normalize([rng.choice([1.0, 2.0, 3.0]) / 3.0 for _ in range(64)]), 1.0),
        ("33 log-uniform 1e-6..1", blend.normalize([10 ** rng.uniform(-6, 0) for _ in range(33)]), 0.2),
        ("17 equal (ties)", blend.normalize([1.0] * 17), 0.2),
        ("48 integers 1..5", blend.normalize([float(rng.randint(1, 5)) for _ in range(48)]), 0.2),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=1_000_000_000)
    ap.add_argument("--blends", type=int, default=5, help="how many of the blends to run, in order")
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    if _greedy is None:
        raise SystemExit("neox_epoch._greedy is not built: python setup.py build_ext --inplace")
    bad = 0
    for (name, w, share), marked in itertools.product(blends(random.Random(args.seed))[: args.blends], (True, False)):
        n, stop = len(w), int(args.draws * share)
        marks = [(i, max(1, int(stop * w[i] * 0.7))) for i in range(0, n, 10)] if marked else []
        ends = [stop // 7, stop // 3, (2 * stop) // 3, stop]
        results = []
        for fn in (_greedy.advance, _greedy.advance_plain):
            t = time.process_time()
            c, s, got = [0] * n, 0, [-1] * len(marks)
            states = []
            for e in ends:
                c, p = (list(r) for r in fn(w, s, c, e, marks))
                got = [a if a >= 0 else b for a, b in zip(got, p)]
                states.append((tuple(c), tuple(got)))
                s = e
            results.append((states, time.process_time() - t))
        same = results[0][0] == results[1][0]
        bad += not same
        print(
            f"{name:24s} {'marks' if marked else 'no marks':8s} {stop:>13,d} draws: equal={same}  "
            f"advance {results[0][1]:6.1f} s  "
            f"plain {results[1][1]:6.1f} s (cpu)",
            flush=True,
        )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
