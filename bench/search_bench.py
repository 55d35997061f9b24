"""Exact mode's weight search: screened candidates (the train blend's greedy counts only, the full plan
built once for the winner) against the full plan per candidate it replaced, in the same run.

    python bench/search_bench.py [--blends 40] [--sources 2 8] [--docs 20000] [--seed 0]

Writes random corpora (sparse .bin files), then for each random blend (2 to 8 sources, random passes 0.3-3,
megatron-core 0.16.1 and NeoX semantics in turn, sequence 2048, global batch 64, evaluation blends of the same
sources every 100 iterations: --eval-iters) runs ``exact_plan`` twice:
as shipped, and with ``_search_weights`` replaced by the per-candidate full plan (the reference below).
Both must return equal plans (every field), and the line prints the candidates tried and both CPU times, then
the cost of one candidate both ways (a full plan, the screen). The last lines: the total time ratio (and over
the searches that tried more than one candidate), and the median cost ratio of one candidate.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from dataclasses import replace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from neox_epoch.errors import PlanError  # noqa: E402
from neox_epoch.formats.corpus import write_sized_corpus  # noqa: E402
from neox_epoch.plan import exact, planner  # noqa: E402
from neox_epoch.plan.builds import TokenCache, framework_of  # noqa: E402
from neox_epoch.plan.inputs import NeoxOptions, PlanInput, SourceSpec  # noqa: E402
from neox_epoch.plan.model import Plan  # noqa: E402

TRIES = {"n": 0}


def full_plan_per_candidate(
    inp: PlanInput, targets: list[int], seeds: int, cache: TokenCache
) -> tuple[Plan, list[float]]:
    """The search before screening: one full plan (every split, greedy replays included) per candidate."""

    tried = []
    for k in range(seeds):
        TRIES["n"] = k + 1
        w = exact.candidate_weights(targets, k)
        trial = replace(
            inp,
            blend_weights_override=tuple(w),
            neox=replace(inp.neox, exact_requests=tuple(targets) if framework_of(inp).exact_requests else None),
        )
        plan = planner.make_plan(trial, targets, cache)
        drawn = [s.samples_drawn for s in plan.sources if s.split == "train"]
        built_ok = all(s.samples_built >= s.samples_drawn for s in plan.sources if s.split == "train")
        if drawn == targets and built_ok:
            return plan, w
        tried.append(drawn)
    raise PlanError(f"exact plan: no float weights found (after {seeds} tries); last draws {tried[-1]}")


def timed(inp: PlanInput, passes: dict[str, float], search: object, repeat: int) -> tuple[float, Plan | str]:
    """Least CPU seconds of ``repeat`` exact plans with ``search`` as the weight search, and the plan."""
    shipped = exact._search_weights
    exact._search_weights = search  # type: ignore[assignment]
    best = float("inf")
    try:
        for _ in range(repeat):
            t = time.process_time()
            try:
                out: Plan | str = exact.exact_plan(inp, passes)
            except PlanError as err:
                out = str(err).split(";")[0]
            best = min(best, time.process_time() - t)
        return best, out
    finally:
        exact._search_weights = shipped


def per_candidate(inp: PlanInput, plan: Plan, repeat: int) -> tuple[float, float]:
    """Least CPU seconds of one candidate: the full plan (before) and the screen (now), for the winner's
    settings (the search's own trial input), token sums already read as in the search."""
    given = plan.settings["targets"]  # exact mode: {source label: its target draws}
    assert isinstance(given, dict), given
    targets = list(given.values())
    weights = plan.planned_weights()
    exact_inp = replace(inp, train_iters=plan.train_iters, train_samples=None)
    if framework_of(inp).exact_surplus_zero:
        exact_inp = replace(exact_inp, mcore=replace(inp.mcore, mid_level_dataset_surplus=0.0))
    trial = replace(
        exact_inp,
        blend_weights_override=tuple(weights),
        neox=replace(inp.neox, exact_requests=tuple(targets) if framework_of(inp).exact_requests else None),
    )
    cache: TokenCache = {}
    planner.make_plan(trial, targets, cache)
    full = screen = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        planner.make_plan(trial, targets, cache)
        full = min(full, time.process_time() - t)
        t = time.process_time()
        got = planner.train_screen(trial, planner.build_splits(trial, cache), {})
        screen = min(screen, time.process_time() - t)
        assert got == (targets, True), got
    return full, screen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blends", type=int, default=40)
    ap.add_argument("--sources", type=int, nargs=2, default=(2, 8))
    ap.add_argument("--docs", type=int, default=20_000, help="documents per source")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-iters", type=int, default=10, help="evaluation: every 100 iterations (0: train only)")
    ap.add_argument("--repeat", type=int, default=3, help="timings are the least CPU time of this many runs")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="search-bench-")
    try:
        prefixes = []
        for k in range(args.sources[1]):
            p = os.path.join(work, f"s{k}")
            write_sized_corpus(p, [rng.randint(50, 8000) for _ in range(args.docs)])
            prefixes.append(p)
        totals = {"new": 0.0, "old": 0.0}
        multi = {"new": 0.0, "old": 0.0}
        same = 0
        cand_ratios: list[float] = []
        for b in range(args.blends):
            n = rng.randint(*args.sources)
            chosen = rng.sample(prefixes, n)
            fw = "megatron-core" if b % 2 == 0 else "neox"
            specs = tuple(SourceSpec(p, rng.uniform(0.1, 1.0)) for p in chosen)
            inp = PlanInput(
                framework=fw,
                framework_version="0.16.1" if fw == "megatron-core" else "",
                seq_length=2048,
                global_batch_size=64,
                train_sources=specs,
                eval_iters=args.eval_iters,
                eval_interval=100,
                split="969,30,1" if fw == "megatron-core" else None,
                per_split_paths=fw == "neox",
                valid_sources=specs if fw == "neox" else (),
                test_sources=specs if fw == "neox" else (),
                neox=NeoxOptions(micro_batch_size=1),
            )
            passes = {s.label: round(rng.uniform(0.3, 3.0), 2) for s in specs}
            TRIES["n"] = 0
            t_old, old = timed(inp, passes, full_plan_per_candidate, args.repeat)
            tries = TRIES["n"]
            t_new, new = timed(inp, passes, exact._search_weights, args.repeat)
            ok = old == new
            same += ok
            totals["old"] += t_old
            totals["new"] += t_new
            if tries > 1:
                multi["old"] += t_old
                multi["new"] += t_new
            what = "error" if isinstance(new, str) else f"{new.train_iters:,d} iters"
            cand = ""
            if isinstance(new, Plan) and "weights" in new.settings:
                full, screen = per_candidate(inp, new, args.repeat)
                cand_ratios.append(full / screen)
                cand = (
                    f"  one candidate: full plan {full * 1e3:6.1f} ms, screen {screen * 1e3:6.1f} ms"
                    f" ({full / screen:4.1f}x)"
                )
            print(
                f"blend {b:3d} {fw:<13} {n} sources {what:<14} candidates {tries:3d}  search: full plan per candidate "
                f"{t_old * 1e3:7.1f} ms, screened {t_new * 1e3:7.1f} ms ({t_old / t_new:4.2f}x)  "
                f"{'same' if ok else 'DIFFERENT'}{cand}",
                flush=True,
            )
        print(
            f"{same}/{args.blends} plans identical; total {totals['old']:.2f} s -> {totals['new']:.2f} s "
            f"({totals['old'] / totals['new']:.2f}x)"
            + (
                f"; searches of more than one candidate {multi['old']:.2f} s -> {multi['new']:.2f} s "
                f"({multi['old'] / multi['new']:.2f}x)"
                if multi["new"]
                else "; every search won at its first candidate"
            )
        )
        if cand_ratios:
            print(
                "a candidate that fails costs the screen instead of a full plan: "
                f"median {sorted(cand_ratios)[len(cand_ratios) // 2]:.1f}x "
                f"cheaper (min {min(cand_ratios):.1f}x, max {max(cand_ratios):.1f}x; CPU time, least of {args.repeat})"
            )
        return 0 if same == args.blends else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
