"""Exact mode proven by tokens on the REAL megatron-core builder (the installed version).

Build with the settings the exact plan returns, read the first train_iters * global_batch samples of the
real dataset, and count every input token of each source's train split: each is seen exactly its target
number of times, except the remainder (under one global batch, and the final partial sample) the plan reports.
"""

from __future__ import annotations

import optional
import pytest

optional.require("megatron.core")

from exposure_util import check_tokens, count_gpt_exposure, histogram  # noqa: E402
from mcore_live import build  # noqa: E402

from neox_epoch.formats.detect import megatron_core_version  # noqa: E402
from neox_epoch.plan.exact import exact_plan  # noqa: E402
from neox_epoch.plan.planner import PlanInput, SourceSpec  # noqa: E402

VERSION = megatron_core_version() or ""


def _plan(prefixes, targets, split, seq, gbs, weights=True):  # type: ignore[no-untyped-def]
    specs = tuple(SourceSpec(p, 1.0 if weights else None) for p in prefixes)
    inp = PlanInput(
        framework="megatron-core",
        framework_version=VERSION,
        seq_length=seq,
        global_batch_size=gbs,
        train_sources=specs,
        split=split,
        eval_iters=0,
    )
    names = [s.label for s in specs]
    return exact_plan(inp, dict(zip(names, targets)))


@pytest.mark.parametrize(
    "case",
    [
        # (seed, docs per source, seq, gbs, targets): one source 1 pass; blends with 1/2/0.5 passes
        (1, [120], 32, 4, [1]),
        (2, [80, 150], 16, 8, [1, 1]),
        (3, [60, 90, 40], 32, 4, [1, 2, 0.5]),
        (4, [200, 50], 64, 2, [2, 3]),
    ],
)
def test_exact_plan_every_token_target_times(corpus, tmp_path, case):
    seed, docs, seq, gbs, targets = case
    prefixes = [corpus(f"s{k}", seed * 10 + k, n, 1, 300) for k, n in enumerate(docs)]
    plan = _plan(prefixes, targets, "100,0,0", seq, gbs, weights=len(prefixes) > 1)
    weights = plan.settings.get("weights")
    n = plan.train_iters * gbs
    train, _, _ = build(
        prefixes,
        weights,
        "100,0,0",
        [n, 0, 0],
        seq,
        str(tmp_path / "cache"),
        surplus=plan.settings.get("mid_level_dataset_surplus"),
    )
    train_plans = [s for s in plan.sources if s.split == "train"]
    if len(prefixes) == 1:
        per_source = {0: (train, list(range(n)))}
    else:
        assert len(train) >= n
        di, dsi = train.dataset_index[:n], train.dataset_sample_index[:n]
        per_source = {k: (train.datasets[k], [int(x) for x in dsi[di == k]]) for k in range(len(prefixes))}
    for k, (ds, ids) in per_source.items():
        sp = train_plans[k]
        assert len(ids) == sp.samples_drawn == sp.target_samples, "the real blend draws exactly the plan's target"
        for i in ids[:3]:
            check_tokens(ds, i, seq)
        hist = histogram(count_gpt_exposure(ds, ids, seq))
        t = targets[k]
        whole = int(t)
        short = sum(c for v, c in hist.items() if v != whole and not (t != whole and v == whole + 1))
        # only the reported remainder (samples under one global batch) and the final partial sample may be short
        cut = (plan.remainder_samples + 1) * seq + seq
        assert max(hist) <= (whole + (1 if t != whole else 0)), hist
        if t == whole:
            assert min(hist) >= whole - 1, hist
            assert short <= cut, (hist, cut)
        else:  # a fractional pass below one: the drawn windows of the one epoch are distinct, each seen once
            assert whole == 0 and sp.epochs_built == 1
            assert hist.get(1, 0) == sp.samples_drawn * seq, hist
