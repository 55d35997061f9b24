"""The plan's tokens-unseen figure against what the audit counts on the same REAL build (issue: real inputs).

The installed megatron-core (0.16.1 on NeoX's stack, 0.19.2 on today's) builds each case (tiny random corpora, blends,
separately shuffled final epochs); the audit counts, token by token, what the first N samples feed the model. Where
the plan calls its figure exact, it must equal the audit's count; where it is an expectation over the shuffle, it must
lie within a few standard deviations of the count. NeoX's own caches (tests/fixtures/neox, built by real NeoX) are
checked the same way.
"""

from __future__ import annotations

import math
import os
import random

import numpy as np
import optional
import pytest

optional.require("megatron.core")

from mcore_env import installed_version  # noqa: E402
from mcore_live import build  # noqa: E402

from neox_epoch.audit.audit import AuditOptions, run_audit  # noqa: E402
from neox_epoch.formats.cache_names import discover  # noqa: E402
from neox_epoch.plan.planner import McoreOptions, PlanInput, SourceSpec, make_plan  # noqa: E402

VERSION = installed_version() or "0.16.1"  # the megatron-core that builds: 0.16.1 (neox stack), 0.19.2 (today)


def _case(seed: int) -> dict:
    rng = random.Random(seed)
    n_src = rng.choice([1, 2, 3])
    return {
        "seed": seed,
        "docs": [rng.randint(40, 160) for _ in range(n_src)],
        "seq": rng.choice([16, 32, 64]),
        "split": rng.choice(["100,0,0", "90,5,5"]),
        "weights": None if n_src == 1 and rng.random() < 0.5 else [float(rng.randint(1, 5)) for _ in range(n_src)],
        "epochs": rng.choice([0.4, 1.0, 1.3, 1.9, 2.5, 3.2]),
        "frac": rng.choice([0.3, 0.6, 0.9, 1.0]),
    }


CASES = [_case(s) for s in range(30, 46)]
# 1.3 epochs of one source: the 80% rule shuffles the final epoch on its own; drawn past the first epoch
CASES.append(
    {"seed": 90, "docs": [90], "seq": 32, "split": "100,0,0", "weights": None, "epochs": 1.3 / 0.8 * 0.8, "frac": 0.95}
)
# a blend whose sources each get a separately shuffled final epoch
CASES.append(
    {"seed": 91, "docs": [120, 80], "seq": 16, "split": "100,0,0", "weights": [1.0, 1.0], "epochs": 1.2, "frac": 1.0}
)


def _tolerance(tokens: int, p: float, epochs: int, seq: int) -> float:
    """Spread of the unseen count over the shuffle: tokens move in whole samples of ``seq`` tokens."""
    q = math.exp(epochs * math.log1p(-p)) if p < 1 else 0.0
    samples = max(1, tokens // seq)
    return 4 * math.sqrt(samples * q * (1 - q)) * seq + 2 * seq


@pytest.mark.parametrize("case", CASES, ids=[f"case{c['seed']}" for c in CASES])
def test_plan_unseen_equals_audit(corpus, tmp_path, case):
    prefixes = [corpus(f"src{k}", case["seed"] * 5 + k, n, 1, 250) for k, n in enumerate(case["docs"])]
    seq = case["seq"]
    sizes0 = np.fromfile(prefixes[0] + ".idx", dtype=np.int32, offset=34, count=case["docs"][0])
    n_train = max(1, int(case["epochs"] * int(sizes0.sum()) * 0.9 / seq))
    cache = str(tmp_path / "cache")
    train, _, _ = build(prefixes, case["weights"], case["split"], [n_train, 8, 4], seq, cache, seed=500 + case["seed"])
    consumed = max(1, int(len(train) * case["frac"]))
    weights = case["weights"] or [None] * len(prefixes)
    inp = PlanInput(
        framework="megatron-core",
        framework_version=VERSION,
        seq_length=seq,
        global_batch_size=1,
        train_sources=tuple(SourceSpec(p, w) for p, w in zip(prefixes, weights)),
        split=case["split"],
        train_iters=consumed,
        seed=500 + case["seed"],
        mcore=McoreOptions(num_samples=(n_train, 8, 4)),
    )
    plan = make_plan(inp)
    res = run_audit(discover([cache]), AuditOptions(consumed=consumed, global_batch_size=1))
    assert not res.findings, [str(f) for f in res.findings]
    audited = {}
    for r in res.indexes:
        if r.split == "train" and r.exposure is not None:
            audited[os.path.basename(r.data_prefix)] = r
    checked = 0
    for s in plan.sources:
        if s.split != "train":
            continue
        r = audited[s.name]
        count = r.exposure.tokens.get(0, 0)
        assert (r.epochs, r.separated_final_epoch, r.exposure.consumed_samples) == (
            s.epochs_built,
            s.separate_final_epoch,
            s.samples_drawn,
        ), "plan and build agree on the index"
        if s.tokens_unseen_exact:
            assert s.tokens_unseen == count, f"{s.name}: exact figure {s.tokens_unseen}, audit counts {count}"
        else:
            p = s.samples_drawn / s.samples_built
            tol = _tolerance(s.tokens, p, s.epochs_built, seq)
            assert abs(s.tokens_unseen - count) <= tol, f"{s.name}: expected ~{s.tokens_unseen}, audit {count}"
        checked += 1
    assert checked == len(prefixes)
