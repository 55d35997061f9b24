"""The planner against the REAL megatron-core builder, every verified version (tests/mcore_env.truth_versions).

Hundreds of randomized tiny corpora and configs (tests/helpers/mcore_cases.py) are built by
BlendedMegatronDatasetBuilder in a subprocess (tests/helpers/mcore_truth.py): on NeoX's stack under megatron-core
0.16.1 (mid_level_dataset_surplus) and 0.10.0 (ceil(N*w*1.005)), on today's stack under 0.19.2
(mid_level_dataset_surplus); the plan must predict, exactly, per split:
blend size and per-source draws, and per GPTDataset its request, len, epochs, final-epoch separation,
document range and tokens; and it must predict the builds that fail (oversampling).
"""

from __future__ import annotations

import sys

import optional
import pytest

optional.require("torch")  # the truth script builds with megatron-core, which imports torch

from mcore_cases import generate_cases  # noqa: E402
from mcore_env import LAST_FAILURE, mcore_pythonpath, run_truth, truth_versions  # noqa: E402

from neox_epoch.errors import PlanError  # noqa: E402
from neox_epoch.plan.planner import McoreOptions, PlanInput, SourceSpec, predict_splits  # noqa: E402

CASES = 200
SPLITS = ("train", "valid", "test")


def predict(case: dict, version: str):  # type: ignore[no-untyped-def,type-arg]
    weights = case["weights"]
    bps = case.get("blend_per_split")
    specs = [
        SourceSpec(p, None if weights is None else float(w))
        for p, w in zip(case["prefixes"], weights or [None] * len(case["prefixes"]))
    ]
    valid, test, per_split = (), (), False
    if bps:
        per_split = True
        parts = []
        for blend_ in bps:
            if blend_ is None:
                parts.append(())
                continue
            pfx, w = blend_
            parts.append(
                tuple(SourceSpec(p, None if w is None else float(x)) for p, x in zip(pfx, w or [None] * len(pfx)))
            )
        specs, valid, test = list(parts[0]), parts[1], parts[2]
    inp = PlanInput(
        framework="megatron-core",
        framework_version=version,
        seq_length=case["seq_length"],
        global_batch_size=1,
        train_sources=tuple(specs),
        valid_sources=tuple(valid),
        test_sources=tuple(test),
        per_split_paths=per_split,
        split=case["split"],
        seed=case["seed"],
        mcore=McoreOptions(
            mid_level_dataset_surplus=(
                case.get("mid_level_dataset_surplus") if case.get("mid_level_dataset_surplus") is not None else 0.005
            ),
            add_extra_token_to_sequence=case.get("add_extra_token_to_sequence", True),
            renormalize_blend_weights=bool(case.get("renormalize_blend_weights", False)),
        ),
    )
    if per_split and not specs:
        inp = PlanInput(**{**inp.__dict__, "train_sources": tuple(valid or test)})
    return predict_splits(inp, case["sizes"])


def compare(case: dict, truth: dict, version: str) -> list[str]:  # type: ignore[type-arg]
    """Differences between the plan and the real build of one case (empty: identical)."""
    try:
        pred = predict(case, version)
    except PlanError as err:
        return [] if truth.get("error") else [f"plan raised {err} but the build succeeded"]
    if truth.get("error"):
        # the only failure the plan must foresee here: a blend drawing a source past its end
        if any(p and any(p["oversampled"]) for p in pred):
            return []
        return [f"build failed ({truth['error']}: {truth['message'][:120]}) but the plan predicted success"]
    diffs = []
    for k, name in enumerate(SPLITS):
        t, p = truth["splits"][name], pred[k]
        if t["none"] or p is None:
            if not (t["none"] and p is None):
                diffs.append(f"{name}: built={not t['none']} predicted={p is not None}")
            continue
        gpts = t["datasets"] if t["type"] == "BlendedDataset" else [t]
        if (t["type"] == "BlendedDataset") != p["blended"]:
            diffs.append(f"{name}: type {t['type']} vs blended={p['blended']}")
            continue
        if p["blended"]:
            if t["len"] != p["size"]:
                diffs.append(f"{name}: blend len {t['len']} vs {p['size']}")
            if t["draws"] != p["draws"]:
                diffs.append(f"{name}: draws {t['draws']} vs {p['draws']}")
        for g, d in zip(gpts, p["datasets"]):
            got = (
                g["num_samples"],
                g["len"],
                g["num_epochs"],
                g["separate_final_epoch"],
                g["doc_range"],
                g["tokens_per_epoch"],
            )
            want = (
                d["num_samples"],
                d["len"],
                d["epochs"] if g["num_epochs"] is not None else None,
                d["separate_final_epoch"],
                d["doc_range"] if d["doc_range"][1] > d["doc_range"][0] else None,
                d["tokens"],
            )
            if list(got) != list(want):
                diffs.append(f"{name}/{g['dataset_path'].rsplit('/', 1)[-1]}: built {got} vs planned {want}")
    return diffs


@pytest.mark.parametrize("version,seed", truth_versions())
def test_plan_equals_real_builder(version, seed, tmp_path):
    if mcore_pythonpath(version) is None:
        # e.g. no wheel of 0.10.0 for Python 3.12: "No matching distribution found for megatron-core==0.10.0"
        why = LAST_FAILURE.get(version, "no package index reachable?")
        pytest.skip(
            f"megatron-core {version} could not be installed into .cache for Python "
            f"{sys.version_info.major}.{sys.version_info.minor}: {why}"
        )
    cases = generate_cases(seed, CASES, str(tmp_path))
    truth = run_truth(cases, version, str(tmp_path / "truth"))
    assert truth["megatron_core_version"].startswith(version)
    failures = {}
    built = 0
    for case, t in zip(cases, truth["cases"]):
        assert t["id"] == case["id"]
        assert t.get("error") not in ("Timeout", "Crash"), t
        built += not t.get("error")
        d = compare(case, t, version)
        if d:
            failures[case["id"]] = d
    assert built >= CASES * 0.8, f"only {built} of {CASES} cases built"
    assert not failures, f"{len(failures)} of {CASES} cases differ: " + repr(dict(list(failures.items())[:5]))
