"""The Pythia and StableLM configs as their projects published them, at 1, 8, 64 and 256 GPUs, against NeoX's own
``NeoXArgs.from_ymls``; and exact mode's written configs loaded back by NeoX.

The configs come from the vendored ``real-neox-configs-2026-11.tar.gz`` (checksum from the vendor README), read
as published; nothing here edits them. Each is paired two ways, with a world file naming a hostfile (as
tests/neox/test_neox_shipped_configs.py does):

- ``setup``: the config + NeoX's ``configs/local_setup.yml`` (what NeoX's README says to add);
- ``own``: the config + a small data file of this test that points its own data keys at small corpora, written
  with ``-`` (``train-data-paths``) so that NeoX replaces the config's values (a later file's dash key);
  where the tool says a key is one NeoX no longer accepts (``gas``), the config's copy without that line (what
  a user must change, recorded by :func:`advised_copy`).

All pairings go to NeoX in one process (``scripts/neox_config_sweep.py --batch``, a fork per call) and to
``neox-epoch plan`` in this one: where NeoX accepts, the same train_batch_size and train_iters; where it
refuses, exit 2 and one line naming the same problem. Every accepted pairing is then planned with
``--epochs 1 --write-config`` (overlay, and ``--full``), and at 8 GPUs with ``--source-epochs`` (the first train
source twice, the others once): the written file, its ``neox_epoch`` block stripped as
``neox-epoch launch`` strips it, is loaded by NeoX's from_ymls after the pairing's files (the full config
alone) and must give the planned train_iters and lr_decay_iters.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import tarfile
import time
from typing import Any

import numpy as np
import pytest
import yaml

from neox_epoch.cli import main
from neox_epoch.formats.corpus import write_sized_corpus
from neox_epoch.formats.neox_config import known_neox_keys

pytestmark = pytest.mark.neox

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
TARBALL = "real-neox-configs-2026-11.tar.gz"
WORLDS = (1, 8, 64, 256)
#: one corpus behind every prefix (its .bin sparse), written once NeoX has judged the pairings: sized so that one
#: pass over the train split holds BATCHES_PER_PASS global batches of every accepted pairing (NeoX's batch)
CORPUS = {"seed": 7, "num_documents": 40_000, "min_len": 300}
BATCHES_PER_PASS = 2
SPLITS = ("train", "valid", "test")
#: pairings NeoX's from_ymls accepts but its data build could not run, refused by plan in one line saying why:
#: pythia's dummy_config (micro batch 1,024) at 256 GPUs asks 143,000 x 262,144 samples
#: Pythia's model configs (pythia/models/*/pythia-*.yml)
PYTHIA_MODEL = re.compile(r"pythia/models/[^/]+/pythia-[^/]+\.yml$")
BEYOND_FROM_YMLS = {"own:pythia/utils/dummy_config.yml@256": "blending index would take 337 GB"}


def extract_configs(root: str) -> list[str]:
    """The tarball's model configs (Pythia's models/ and utils/, StableLM's configs/), relative to ``root``."""
    import frameworks

    vendor = frameworks.vendor_dir()
    path = os.path.join(vendor, TARBALL)
    assert frameworks.file_sha256(path) == frameworks.readme_sha256(vendor, TARBALL), f"{path}: not the vendored file"
    with tarfile.open(path) as tar:
        tar.extractall(root, filter="data")
    found = []
    for top, _dirs, files in os.walk(root):
        found += [os.path.relpath(os.path.join(top, f), root) for f in files if f.endswith(".yml")]
    return sorted(found)


def _stem(rel: str) -> str:
    return os.path.splitext(os.path.basename(rel))[0]


def _raw(path: str) -> dict[str, Any] | None:
    try:
        data = yaml.load(open(path, encoding="utf-8"), Loader=yaml.FullLoader)
    except yaml.YAMLError:
        return None
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def data_file(root: str, rel: str) -> dict[str, Any]:
    """The ``own`` data keys for one config: each split's paths (its own count; an empty list or [""] -> as many as
    its weights, at least one) at prefixes of the one corpus, written with '-' so NeoX replaces the config's."""
    raw = _raw(os.path.join(root, rel)) or {}
    out: dict[str, Any] = {}
    for split in SPLITS:
        paths = [p for p in raw.get(f"{split}_data_paths") or [] if p]
        weights = raw.get(f"{split}_data_weights")
        n = len(paths) or max(1, len(weights or []))
        out[f"{split}-data-paths"] = [f"corpora/{split}_{i}" for i in range(n)]
        if weights is not None and len(weights) != n:
            out[f"{split}-data-weights"] = [1.0] * n
    return out


def run_plan(argv: list[str]) -> tuple[int, str, str]:
    """``neox-epoch <argv>`` in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def advised_copy(root: str, rel: str, files_after: list[str]) -> tuple[str, list[str]]:
    """The config as a user runs it after following the tool's messages: while ``plan`` says a key is one NeoX no
    longer accepts or does not know, the copy drops that key's line (``gas``: "remove it"; an unknown key: "remove
    it or correct its name"), or renames it to the replacement the message names (``save-interval``: "use
    checkpoint_factor"). (path of the copy or the config itself, what was changed)."""
    text = open(os.path.join(root, rel), encoding="utf-8").read()
    changed: list[str] = []
    path = rel
    for _ in range(40):
        code, _out, err = run_plan(["plan", path, *files_after, "--json"])
        m = re.search(r": (\S+): (?:NeoX no longer accepts this key|unknown NeoX config key)", err)
        if code == 0 or not m:
            return path, changed
        key, line = m.group(1), rf'(?m)^(\s*"?){re.escape(m.group(1))}("?\s*:.*\n)'
        use = re.search(r": use (\w+)$", err.strip())
        if use and use.group(1) != "gradient_accumulation_steps":
            text = re.sub(line, rf"\g<1>{use.group(1)}\g<2>", text)
            changed.append(f"{key} -> {use.group(1)}")
        else:
            text = re.sub(line, "", text)
            changed.append(key)
        path = os.path.join("advised", os.path.basename(rel))
        os.makedirs(os.path.join(root, "advised"), exist_ok=True)
        with open(os.path.join(root, path), "w", encoding="utf-8") as f:
            f.write(text)
    raise AssertionError(f"{rel}: still refused after {changed}")


def neox_batch(root: str, jobs: dict[str, list[str]], name: str) -> dict[str, Any]:
    """NeoX's from_ymls on every entry of ``jobs`` in one NeoX process (the sweep script's --batch)."""
    import frameworks

    return frameworks.neox_from_ymls(root, jobs, name)


def layout(root: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Configs, NeoX's local_setup.yml, world files, the corpus and the data files; the pairings, and per config
    the keys a user must remove (:func:`advised_copy`)."""
    import frameworks

    configs = extract_configs(root)
    os.makedirs(os.path.join(root, "configs"))
    shutil.copyfile(
        os.path.join(frameworks.neox_dir(), "configs", "local_setup.yml"),
        os.path.join(root, "configs", "local_setup.yml"),
    )
    for n in WORLDS:
        lines = [f"localhost slots={n}"] if n < 8 else [f"node{i} slots=8" for i in range(n // 8)]
        with open(os.path.join(root, f"hostfile_{n}"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        with open(os.path.join(root, f"world_{n}.yml"), "w", encoding="utf-8") as f:
            f.write(json.dumps({"hostfile": f"hostfile_{n}"}) + "\n")
    setup = yaml.safe_load(open(os.path.join(root, "configs", "local_setup.yml"), encoding="utf-8"))
    prefixes = {setup["data_path"]} | {
        v for k in ("train_data_paths", "valid_data_paths", "test_data_paths") for v in setup.get(k) or []
    }
    pairings: dict[str, list[str]] = {}
    changes: dict[str, list[str]] = {}
    for rel in configs:
        stem = os.path.splitext(os.path.basename(rel))[0]
        own = data_file(root, rel)
        with open(os.path.join(root, f"{stem}_data.yml"), "w", encoding="utf-8") as f:
            f.write(json.dumps(own) + "\n")
        prefixes |= {p for k, v in own.items() if k.endswith("paths") for p in v}
        advised, changes[rel] = advised_copy(root, rel, [f"{stem}_data.yml", "world_8.yml"])
        for n in WORLDS:
            pairings[f"setup:{rel}@{n}"] = [rel, "configs/local_setup.yml", f"world_{n}.yml"]
            pairings[f"own:{rel}@{n}"] = [advised, f"{stem}_data.yml", f"world_{n}.yml"]
    with open(os.path.join(root, "prefixes.json"), "w", encoding="utf-8") as f:
        json.dump(sorted(prefixes), f)
    return pairings, changes


def corpus_sizes(judged: dict[str, Any]) -> list[int]:
    """Document sizes: the train split of every pairing NeoX accepted holds BATCHES_PER_PASS of its global batches
    of seq_length + 1 tokens (the smallest train share of a split, 10% margin on the mean)."""
    need, fraction = 0, 1.0
    for n in (j["neox"] for j in judged.values() if j["accepted"]):
        need = max(need, BATCHES_PER_PASS * n["train_batch_size"] * (n["seq_length"] + 1))
        parts = [float(x) for x in str(n.get("split") or "1").split(",")]
        fraction = min(fraction, parts[0] / sum(parts))
    docs, low = CORPUS["num_documents"], CORPUS["min_len"]
    high = max(low, int(2 * 1.1 * need / fraction / docs) - low)
    sizes = [int(x) for x in np.random.RandomState(CORPUS["seed"]).randint(low, high + 1, size=docs)]
    assert sum(sizes[: int(docs * fraction) - 1]) >= need, "the corpus is smaller than two global batches"
    return sizes


def write_corpora(root: str, judged: dict[str, Any]) -> None:
    """The one corpus, sized from NeoX's judged batches, behind every data prefix the pairings name."""
    corpus = os.path.join(root, "corpora", "corpus")
    os.makedirs(os.path.dirname(corpus), exist_ok=True)
    write_sized_corpus(corpus, corpus_sizes(judged))
    for prefix in json.load(open(os.path.join(root, "prefixes.json"), encoding="utf-8")):
        dest = os.path.join(root, prefix)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        for ext in (".bin", ".idx"):
            if not os.path.exists(dest + ext):
                os.symlink(corpus + ext, dest + ext)


def _exact_files(
    root: str, key: str, files: list[str], full: bool, passes: list[str] | None = None
) -> tuple[list[str] | None, dict[str, Any]]:
    """``plan FILES --epochs 1 --write-config`` (``--full``; ``passes``: ``--source-epochs`` instead): the files
    NeoX loads (the written one with its block stripped as neox-epoch launch strips it) and the plan; (None,
    {"error": ...}) when plan refused."""
    from neox_epoch.neox.launch import strip_block_text

    name = re.sub(r"\W", "_", key) + ("_full" if full else "_source" if passes else "_exact") + ".yml"
    target = ["--source-epochs", *passes] if passes else ["--epochs", "1"]
    code, out, err = run_plan(
        ["plan", *files, *target, "--write-config", name, *(["--full"] if full else []), "--json"]
    )
    if code != 0:
        return None, {"error": err, "code": code}
    plan = json.loads(out)
    text = open(os.path.join(root, name), encoding="utf-8").read()
    stripped, block = strip_block_text(text, name)
    loaded = os.path.join("loaded", name)
    with open(os.path.join(root, loaded), "w", encoding="utf-8") as f:
        f.write(stripped)
    schedule = {c["key"]: c["new"] for c in plan["settings"].get("schedule", []) if "key" in c}
    return ([loaded] if full else [*files, loaded]), {"plan": plan, "block": block, "schedule": schedule}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Everything, timed: the layout, NeoX on every pairing, plan on every pairing, exact mode on every accepted
    one and NeoX loading every written file."""
    root = str(tmp_path_factory.mktemp("real_configs"))
    cwd = os.getcwd()
    os.chdir(root)
    t0 = time.monotonic()
    try:
        pairings, changes = layout(root)
        t1 = time.monotonic()
        published = {
            f"published:{rel}@8": [rel, f"{_stem(rel)}_data.yml", "world_8.yml"]
            for rel, changed in changes.items()
            if PYTHIA_MODEL.match(rel) and changed
        }
        neox = neox_batch(root, {**pairings, **published}, "judge")
        write_corpora(root, neox)
        t2 = time.monotonic()
        plans = {k: run_plan(["plan", *files, "--json"]) for k, files in pairings.items()}
        os.makedirs(os.path.join(root, "loaded"))
        exact: dict[str, Any] = {}
        for key, files in pairings.items():
            if neox[key]["accepted"]:
                for full in (False, True):
                    exact[f"{key}{'+full' if full else ''}"] = _exact_files(root, key, files, full)
                if key.endswith("@8"):  # per-source passes: the first train source twice, the others once
                    names = [s["name"] for s in json.loads(plans[key][1])["sources"] if s["split"] == "train"]
                    passes = [f"{n}={2 if i == 0 else 1}" for i, n in enumerate(names)]
                    exact[f"{key}+source"] = _exact_files(root, key, files, False, passes)
        published_runs: dict[str, dict[str, Any]] = {}
        for key, files in published.items():  # as published, only the data paths changed: NeoX refuses them
            name = re.sub(r"\W", "_", key) + ".yml"
            published_runs[key] = {
                "files": files,
                "plan": run_plan(["plan", *files, "--epochs", "1", "--write-config", name]),
                "written": os.path.exists(name),
            }
        t3 = time.monotonic()
        loaded = neox_batch(root, {k: f for k, (f, _) in exact.items() if f is not None}, "load")
        t4 = time.monotonic()
    finally:
        os.chdir(cwd)
    timing = {"layout": t1 - t0, "neox_judge": t2 - t1, "plans": t3 - t2, "neox_load": t4 - t3}
    print(
        f"real-config sweep: {len(pairings)} pairings, {len(exact)} written configs; seconds: "
        + ", ".join(f"{k} {v:.1f}" for k, v in timing.items())
    )
    result = {
        "changes": changes,
        "pairings": pairings,
        "neox": neox,
        "plans": plans,
        "exact": exact,
        "loaded": loaded,
        "timing": timing,
        "published": published_runs,
    }
    if os.environ.get("NEOX_EPOCH_REAL_SWEEP_OUT"):  # for a developer reading the whole outcome
        with open(os.environ["NEOX_EPOCH_REAL_SWEEP_OUT"], "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1, default=str)
    return result


def test_real_configs_are_judged_like_neox(sweep: dict[str, Any]) -> None:
    """NeoX accepted: exit 0, the same train_batch_size and train_iters. NeoX refused: exit 2, one line naming
    the same problem (tests/neox/test_neox_shipped_configs.py's rules)."""
    from tests.neox.test_neox_shipped_configs import expected_terms

    wrong = []
    for key in sweep["pairings"]:
        n, (code, out, err) = sweep["neox"][key], sweep["plans"][key]
        if n["accepted"]:
            plan = json.loads(out) if code == 0 else {}
            got = (code, plan.get("global_batch_size"), plan.get("train_iters"))
            if key in BEYOND_FROM_YMLS and code == 2 and err.count("\n") == 1 and BEYOND_FROM_YMLS[key] in err:
                continue
            if got != (0, n["neox"]["train_batch_size"], n["neox"]["train_iters"]):
                wrong.append(
                    f"{key}: NeoX accepts ({n['neox']['train_batch_size']}, {n['neox']['train_iters']}); "
                    f"plan {got} {err.strip()}"
                )
            continue
        try:
            terms = expected_terms(n["error"])
        except AssertionError as no_rule:
            wrong.append(f"{key}: {no_rule}; plan exit {code}: {err.strip()[:300]}")
            continue
        if code != 2 or err.count("\n") != 1 or not all(t in err for t in terms):
            wrong.append(f"{key}: NeoX refuses ({n['error']['message']}); plan exit {code}: {err.strip()[:300]}")
    assert not wrong, "\n".join(wrong)


def test_what_a_user_must_change_is_what_the_tool_says(sweep: dict[str, Any]) -> None:
    """What a user must change to run each config on today's NeoX, as the tool's messages say it: Pythia's `gas`
    (removed from NeoX; the message names gradient_accumulation_steps), StableLM's keys from its own NeoX fork.
    With those lines removed NeoX accepts every config the other checks do not refuse."""
    changes = {os.path.basename(k): v for k, v in sweep["changes"].items() if v}
    pythia = {k: v for k, v in changes.items() if k.startswith("pythia")}
    assert len(pythia) == 14 and all(v == ["gas"] for v in pythia.values()), pythia  # 6.9b and 12b set no gas
    assert changes["dummy_config.yml"] == ["gas", "save-interval -> checkpoint_factor"]
    stable = {k: v for k, v in changes.items() if k.startswith("stablelm")}
    known = known_neox_keys()
    assert len(stable) == 9 and all(v and not {k.replace("-", "_") for k in v} & set(known) for v in stable.values()), (
        stable
    )
    print("what a user must change:", json.dumps(changes, indent=1))
    for key in sweep["pairings"]:
        if key.startswith("own:") and not sweep["neox"][key]["accepted"]:
            assert "unexpected keyword argument" not in sweep["neox"][key]["error"]["message"], key


def test_exact_mode_writes_configs_neox_loads_with_the_planned_numbers(sweep: dict[str, Any]) -> None:
    """Every pairing NeoX accepts (the corpus sized from its batch; exact mode's refusal of one pass under one
    batch is tested in tests/neox/test_neox_shipped_configs.py): `--epochs 1 --write-config` (overlay and --full) is
    written, and NeoX's
    from_ymls, given the files and the written one (the full one alone), derives the planned train_iters,
    lr_decay_iters and train_batch_size."""
    wrong = []
    for key, (files, info) in sweep["exact"].items():
        if files is None:  # the corpus holds two global batches of every pairing: nothing may be refused
            wrong.append(f"{key}: plan refused: {info['error'].strip()}")
            continue
        got = sweep["loaded"][key]
        if not got["accepted"]:
            wrong.append(f"{key}: NeoX refuses the written config: {got['error']['message']}")
            continue
        plan, n = info["plan"], got["neox"]
        want = (
            plan["train_iters"],
            info["schedule"].get("lr_decay_iters", n["lr_decay_iters"]),
            plan["global_batch_size"],
        )
        if (n["train_iters"], n["lr_decay_iters"], n["train_batch_size"]) != want:
            wrong.append(
                f"{key}: NeoX loads {n['train_iters']}, {n['lr_decay_iters']}, {n['train_batch_size']}; planned {want}"
            )
        want_epochs = (
            1 if not key.endswith("+source") else info["plan"]["settings"]["neox_overlay"]["neox_epoch"]["epochs"]
        )
        if info["block"] is None or info["block"].get("epochs") != want_epochs:
            wrong.append(f"{key}: block {info['block']}")
    assert not wrong, f"{len(wrong)} of {len(sweep['exact'])}:\n" + "\n".join(wrong[:40])
    accepted = [k for k in sweep["pairings"] if sweep["neox"][k]["accepted"]]
    assert len(sweep["exact"]) == 2 * len(accepted) + sum(1 for k in accepted if k.endswith("@8"))
    sources = [k for k in sweep["exact"] if k.endswith("+source")]
    assert sources and all(sweep["exact"][k][0] is not None for k in sources), sources


def test_pythia_as_published_with_local_data_paths(sweep: dict[str, Any]) -> None:
    """Each Pythia model config as published, only its data paths pointed at the test's corpus (the ``own`` data
    file): ``plan --epochs 1 --write-config OUT``. Where NeoX's from_ymls accepts the config as published (6.9b
    at 8, 64 and 256 GPUs) the written file loads in NeoX with the planned train_iters. Where NeoX refuses it, plan
    exits 2 with one line naming NeoX's reason: ``gas`` (removed from NeoX: TypeError; at 8 GPUs, --write-config
    writes nothing), 6.9b on 1 GPU (model_parallel_size 2), 12b's invalid YAML, 12b-deduped's attention config
    covering 36 of 40 layers (at every world)."""
    models = sorted(r for r in sweep["changes"] if PYTHIA_MODEL.match(r))
    assert len(models) == 18, models
    from tests.neox.test_neox_shipped_configs import expected_terms

    loads, refusals = {}, {}
    for rel in models:
        key = f"published:{rel}@8"
        if not sweep["changes"][rel]:  # the own pairing is the config as published
            for n in WORLDS:
                own = f"own:{rel}@{n}"
                if sweep["neox"][own]["accepted"]:
                    files, info = sweep["exact"][own]
                    assert files is not None, info
                    loads[own] = (sweep["loaded"][own]["neox"]["train_iters"], info["plan"]["train_iters"])
                else:  # NeoX's reason, in plan's one line (--write-config or not)
                    code, _out, err = sweep["plans"][own]
                    assert code == 2 and all(t in err for t in expected_terms(sweep["neox"][own]["error"])), own
                    refusals[own] = err.strip()
            continue
        neox, (code, _out, err), written = (
            sweep["neox"][key],
            sweep["published"][key]["plan"],
            sweep["published"][key]["written"],
        )
        assert not neox["accepted"] and neox["error"]["type"] == "TypeError", (key, neox)
        assert "unexpected keyword argument 'gas'" in neox["error"]["message"], neox["error"]
        refusals[key] = err.strip()
        assert code == 2 and err.count("\n") == 1 and not written, (key, code, err)
        assert (
            f"{rel}: gas: NeoX no longer accepts this key (TypeError: unexpected keyword argument 'gas'); "
            "removed in NeoX PR #1144" in err
        ), err
    print("as published, data paths local:", json.dumps({**loads, **refusals}, indent=1))
    six9 = {
        f"own:pythia/models/6.9B/pythia-6.9b{d}.yml@{n}": (it, it)
        for d in ("", "-deduped")
        for n, it in ((8, 9285), (64, 1160), (256, 290))
    }
    assert loads == six9, loads  # NeoX's train_iters == the plan's, at every world NeoX accepts
    assert len(refusals) == 14 + 2 + 8, refusals  # gas; 6.9b at 1 GPU (mp 2); 12b (see below) at every world
    assert "1 / (1 * 2) = 0.5 is not a whole number" in refusals["own:pythia/models/6.9B/pythia-6.9b.yml@1"]
    assert "is not valid YAML at line 21" in refusals["own:pythia/models/12B/pythia-12b.yml@8"]
    assert (
        "attention-config: covers 36 layers, num_layers is 40"
        in refusals["own:pythia/models/12B/pythia-12b-deduped.yml@8"]
    )
