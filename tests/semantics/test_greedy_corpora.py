"""The fast greedy blend counts (``blend.greedy_counts``: the C loop and its jump-ahead) equal the plain replay
on every blend in the test corpora: the NeoX golden fixture's blends (with the draws real GPT-NeoX made), the
shipped configs' weights and the real Pythia/StableLM configs' weights (StableLM-alpha's 35-source blend).

Each raw weight list is taken in the forms the frameworks hand the greedy (NeoX's Python-summed division then
numpy's; megatron-core's numpy normalisation, once and twice), at draw counts around the jump-ahead's threshold
and up to 10^6. The oracle is the scalar loop ``_greedy.advance_plain`` (checked against the Python loop in
test_greedy_simd.py). Runs to 10^9 draws: bench/greedy_oracle.py (minutes, so not here)."""

from __future__ import annotations

import glob
import json
import os
import tarfile
from typing import Any

import pytest
import yaml

from neox_epoch.semantics import blend, neox

_greedy = pytest.importorskip("neox_epoch._greedy")

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
ROOT = os.path.dirname(HERE)
#: draw counts: tiny, around the jump's threshold (blend._JUMP_MIN_STEPS), and long enough for it to jump
DRAWS = (0, 1, 2, 3, 7, 100, 4_099, (1 << 17) - 1, 1 << 17, (1 << 17) + 1, 1_000_003)


def plain(w: list[float], n: int) -> list[int]:
    return list(_greedy.advance_plain(w, 0, [0] * len(w), n, [])[0])


def forms(raw: list[float]) -> list[list[float]]:
    """The weights as each framework hands them to its greedy, distinct ones only."""
    out: list[list[float]] = []
    for w in (
        blend.normalize(neox.normalized_weights_and_num_samples(raw, None)[0]),  # NeoX
        blend.normalize(raw),
        blend.normalize(blend.normalize(raw)),
    ):  # megatron-core
        if w not in out:
            out.append(w)
    return out


def _weight_lists(node: Any) -> list[list[float]]:
    """Every list of numbers under a key naming weights, anywhere in a parsed config."""
    found: list[list[float]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if (
                "weight" in str(k)
                and isinstance(v, list)
                and len(v) > 1
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
            ):
                found.append([float(x) for x in v])
            found += _weight_lists(v)
    elif isinstance(node, list):
        for v in node:
            found += _weight_lists(v)
    return found


def golden_blends() -> list[tuple[str, list[float], int, list[int]]]:
    """(case/split, the weights NeoX's greedy saw, a draw count, NeoX's own draws) from the golden fixture."""
    with open(os.path.join(HERE, "fixtures", "neox", "neox_golden.json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    out = []
    for name, case in sorted(cases.items()):
        for split, b in sorted((case.get("blends") or {}).items()):
            if b and len(b.get("weights", [])) > 1:
                out.append((f"{name}/{split}", b["weights"], b["len"], b["draws"]))
                out.append((f"{name}/{split}/first_n", b["weights"], b["first_n"], b["draws_first_n"]))
    return out


def config_weights() -> dict[str, list[float]]:
    """Distinct blend weight lists (more than one source) of the shipped configs and the real configs."""
    found: dict[str, list[float]] = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "configs", "*.yml"))):
        with open(path, encoding="utf-8") as f:
            for w in _weight_lists(yaml.safe_load(f)):
                found.setdefault(repr(w), w)
    with open(os.path.join(HERE, "fixtures", "neox", "shipped_configs.json"), encoding="utf-8") as f:
        for w in _weight_lists(json.load(f)):
            found.setdefault(repr(w), w)
    return found


def real_config_weights() -> dict[str, list[float]]:
    """Distinct blend weight lists of the vendored real Pythia/StableLM configs (empty without the tarball)."""
    import frameworks

    from tests.neox.test_neox_real_configs import TARBALL

    path = os.path.join(frameworks.vendor_dir(), TARBALL)
    found: dict[str, list[float]] = {}
    if not os.path.isfile(path):
        return found
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            if not (member.isfile() and member.name.endswith(".yml")):
                continue
            try:
                data = yaml.safe_load(tar.extractfile(member))  # type: ignore[arg-type]
            except yaml.YAMLError:
                continue
            for w in _weight_lists(data):
                found.setdefault(repr(w), w)
    return found


@pytest.mark.parametrize("case", golden_blends(), ids=lambda c: c[0])
def test_golden_blends_fast_equals_plain_equals_neox(case):
    """The fast counts, the plain replay and real GPT-NeoX's draws agree on every golden blend."""
    _, w, n, drawn = case
    assert blend.greedy_counts(w, n) == plain(w, n) == drawn


def test_shipped_and_real_config_blends():
    """Every blend weight list of configs/, the shipped-config fixture and the real configs, in every form the
    frameworks normalise it to, at every draw count of DRAWS: fast == plain."""
    weights = {**config_weights(), **real_config_weights()}
    checked = 0
    for raw in weights.values():
        for w in forms(raw):
            for n in DRAWS:
                assert blend.greedy_counts(w, n) == plain(w, n), (raw, w, n)
                checked += 1
    assert checked >= len(DRAWS)


def test_real_stablelm_blend_is_found():
    """The real configs hold StableLM-alpha's 35-source blend (skipped without the vendored tarball)."""
    found = real_config_weights()
    if not found:
        pytest.skip("the vendored real-config tarball is not here (tests/helpers/frameworks.py: NEOX_EPOCH_VENDOR)")
    assert sorted(len(w) for w in found.values()) == [35]
