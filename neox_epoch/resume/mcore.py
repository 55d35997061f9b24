"""``neox-epoch resume-check`` for DeepSpeed checkpoints of a megatron-core run with neox-epoch's live counters.

Such a run (``examples/mcore_deepspeed_exact_epoch.py``, or a loop built the same way) saves the counters'
``state_dict`` in DeepSpeed's client state (``neox_epoch_counters``): the iteration, the samples consumed,
each source's draws among them, the global batch of its last step and the train dataset's size. On resume it
builds the same data (planned with the saved planning batch) and Megatron's pretraining sampler continues at
``consumed_samples`` whatever the new global batch, so no position is skipped or repeated; the run draws
``(dataset_size - consumed) // new_global_batch`` more iterations and the rest of the dataset (under one new
batch) is never drawn. Each source's draws after the resume are read from the built blend's
``dataset_index`` (megatron-core's index cache, ``--cache``), the blend the counters themselves count with.
NEW is the resumed run's DeepSpeed config (its global batch, derived as DeepSpeed derives it). With
``--exposure`` the audit counts each source's input tokens by times seen over the whole run, as resumed (the
blend's first ``consumed + iterations x new batch`` samples) and continued with the saved batch.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from neox_epoch.batch.check import batch_errors, data_parallel_size, derive_batch
from neox_epoch.batch.config import read_config
from neox_epoch.errors import ConfigError
from neox_epoch.formats import cache_names as names
from neox_epoch.formats.checkpoint import COUNTERS_KEY as CLIENT_KEY
from neox_epoch.formats.checkpoint import Checkpoint
from neox_epoch.formats.runlog import recorded_at
from neox_epoch.plan.model import Plan
from neox_epoch.resume.model import NewRun, OldRun, ResumeCheck, SourceDelta, SourceExposure
from neox_epoch.semantics.loader import LoaderShape, ResumeStart
from neox_epoch.util.inputs import JSON_BYTES, open_input


def new_batch(ds_config: str, world_size: int | None) -> LoaderShape:
    """The resumed run's batch shape from its DeepSpeed config, with the launcher's world size."""
    config = read_config([ds_config])
    if config.flavor != "deepspeed":
        raise ConfigError(
            f"{ds_config}: a megatron-core run resumed through DeepSpeed is given by its DeepSpeed "
            "config (JSON), found a NeoX config"
        )
    tbs, micro, gas = (
        config.train_batch_size,
        config.train_micro_batch_size_per_gpu,
        config.gradient_accumulation_steps,
    )
    if world_size is not None:
        dp = data_parallel_size(
            world_size, config.pipe_parallel_size, config.model_parallel_size, config.sequence_parallel_size
        )
    elif tbs is not None and micro is not None and gas is not None:
        dp = max(1, tbs // (micro * gas))  # DeepSpeed's check below refuses a product that does not hold
    else:
        raise ConfigError(
            f"{ds_config}: the data-parallel size is needed to derive the batch; give --world-size N "
            "(the ranks the deepspeed launcher starts)"
        )
    batch = derive_batch(tbs, micro, gas, dp)
    errors = batch_errors(batch)
    if errors:
        raise ConfigError(
            f"{ds_config}: {errors[0]}; DeepSpeed would refuse it (neox-epoch check-batch {ds_config} "
            f"--num_gpus {world_size or dp} --fix FIXED.json)"
        )
    return LoaderShape(
        batch.train_micro_batch_size_per_gpu, batch.data_parallel_size, batch.gradient_accumulation_steps
    )


def checkpoint_from_log(
    path: str,
    records: list[tuple[int, dict[str, Any]]],
    iteration: int | None,
) -> Checkpoint | None:
    """OLD from the live counters' ``checkpoint`` records (``records``: those of the megatron-core run's JSONL
    ``path``) for the checkpoint the resume loads (``iteration``, default the last recorded); None when there are
    none (a NeoX run's)."""
    counters = {int(r["iteration"]): r["counters"] for _, r in records if "counters" in r}
    if not counters:
        return None
    at, state = recorded_at(path, counters, iteration)
    return Checkpoint("megatron-core", f"{path} (iteration {at})", at, {CLIENT_KEY: state})


def _saved_state(ckpt: Checkpoint) -> dict[str, Any]:
    state = ckpt.values.get(CLIENT_KEY)
    keys = ("iteration", "consumed_samples", "samples", "dataset_size", "global_batch_size")
    if not isinstance(state, dict) or any(k not in state for k in keys):
        raise ConfigError(
            f"{ckpt.directory}: its client state {CLIENT_KEY} is not what LiveCounters.state_dict() "
            f"returns (keys {', '.join(keys)}); save counters.state_dict() there"
        )
    return state


def _blend(cache: str, size: int, sources: list[str]) -> tuple[names.CacheGroup, np.ndarray, int]:
    """The train blend of ``size`` samples in megatron-core's cache: its files, dataset_index and seq_length."""
    for group in names.discover([cache]):
        if not (group.kind == names.MCORE and group.is_blend and group.split == "train"):
            continue
        with open_input(group.files[names.DESCRIPTION], "description", JSON_BYTES, encoding="utf-8") as f:
            described = json.load(f)
        children = [os.path.basename(str(d.get("dataset_path"))) for d in described.get("datasets", [])]
        if described.get("size") == size and children == sources:
            index = np.load(group.files[names.DATASET], mmap_mode="r")
            return group, np.asarray(index, dtype=np.int64), int(described["datasets"][0]["sequence_length"])
    raise ConfigError(
        f"{cache}: no train BlendedDataset of {size} samples over {sources} in it; give the "
        "path_to_cache the run builds its data in (the saved run's build)"
    )


def exposures(
    group: names.CacheGroup,
    sources: list[str],
    resumed: int,
    continued: int,
) -> tuple[SourceExposure, ...]:
    """Per source, the audit's exposure of the blend's first ``resumed`` samples (the run as resumed) and of its first
    ``continued`` (continuing with the saved batch): :func:`neox_epoch.audit.audit.run_audit` on the blend."""
    from neox_epoch.audit.audit import AuditOptions, run_audit

    blends = {}
    for consumed in {resumed, continued}:  # one audit when they agree (a new batch that divides what is left)
        result = run_audit([group], AuditOptions(consumed=consumed))
        blends[consumed] = next(b for b in result.blends if b.path == group.stem)
    said = "; ".join([str(f) for f in blends[resumed].findings] + blends[resumed].notes)
    return tuple(
        SourceExposure(name, os.path.basename(now.index) if now.index else None, now.exposure, then.exposure, said)
        for name, now, then in zip(sources, blends[resumed].sources, blends[continued].sources)
    )


def _cached_sources(cache: str) -> dict[str, dict[str, Any]]:
    """Per source name (the prefix's last path component), the description of a train GPTDataset in ``cache``."""
    out: dict[str, dict[str, Any]] = {}
    for group in names.discover([cache]):
        if group.kind != names.MCORE or group.is_blend or names.DESCRIPTION not in group.files:
            continue
        with open_input(group.files[names.DESCRIPTION], "description", JSON_BYTES, encoding="utf-8") as f:
            described = json.load(f)
        path = described.get("dataset_path")
        if isinstance(path, str):
            out.setdefault(os.path.basename(path), described)
    return out


def fingerprint_lines(state: dict[str, Any], cache: str | None) -> tuple[list[str], list[str]]:
    """(findings, notes): the checkpoint's data fingerprint against the data its cache's datasets were built from
    now (``data-changed`` naming what changed), or what it holds when there is nothing to compare with."""
    from neox_epoch.errors import NeoxEpochError
    from neox_epoch.formats.fingerprint import DataFingerprint, compare, fingerprint, message

    saved = state.get("fingerprint")
    if not isinstance(saved, dict):
        return [], []  # a state saved before the fingerprint: nothing to compare
    try:
        old = DataFingerprint.from_dict(saved)
    except (NeoxEpochError, KeyError, TypeError, ValueError) as err:
        return [], [f"the counters' data fingerprint is unreadable ({err})"]
    held = f"sources {', '.join(x.name for x in old.sources)}, seq_length {old.seq_length}, seed {old.seed}" + (
        f", {len((old.stages or {}).get('stages') or [])} stages" if old.stages else ""
    )
    if cache is None:
        return [], [f"the checkpoint's data fingerprint ({held}); give --cache to compare it with the data now"]
    described = _cached_sources(cache)
    missing = [x.name for x in old.sources if x.name not in described]
    if missing:
        return [], [
            f"the checkpoint's data fingerprint ({held}) not compared: {cache} has no train GPTDataset of "
            f"{', '.join(missing)}"
        ]
    first = described[old.sources[0].name]
    try:
        now = fingerprint(
            [str(described[x.name]["dataset_path"]) for x in old.sources],
            int(first.get("sequence_length", old.seq_length)),
            int(first.get("random_seed", old.seed)),
            old.stages,
        )
    except NeoxEpochError as err:  # e.g. a relative dataset_path read from elsewhere: nothing known to compare
        return [], [f"the checkpoint's data fingerprint ({held}) not compared: {err}"]
    diffs = compare(old, now)
    if diffs:
        return [f"data-changed: {message(diffs)} (the counters refuse this resume unless data_change_intended)"], []
    return [], [f"data fingerprint: unchanged since the checkpoint ({held})"]


def check(
    ckpt: Checkpoint, ds_config: str, world_size: int | None, cache: str | None, exposure: bool = False
) -> ResumeCheck:
    """resume-check of a megatron-core run's DeepSpeed checkpoint resumed with the DeepSpeed config ``ds_config``."""
    state = _saved_state(ckpt)
    consumed, size, saved = int(state["consumed_samples"]), int(state["dataset_size"]), dict(state["samples"])
    shape = new_batch(ds_config, world_size)
    batch = shape.train_batch_size
    left = max(0, size - consumed)
    iterations, rest = left // batch, left % batch
    end = ckpt.iteration + iterations
    start = ResumeStart(
        consumed,
        consumed,
        f"start = consumed_samples = {consumed} (Megatron's pretraining sampler continues there, whatever the batch)",
    )
    findings, notes = [], [f"the run ends at iteration {end} = {ckpt.iteration} + ({size} - {consumed}) // {batch}"]
    if left == 0:
        findings.append(
            f"no-samples-left: the train dataset's {size} samples were all drawn by iteration {ckpt.iteration}"
        )
    elif rest:
        findings.append(
            f"remainder: the last {rest} of the train dataset's {size} samples are never drawn "
            f"(({size} - {consumed}) % {batch}); a global batch dividing {left} draws them all"
        )
    source_names = list(saved)
    seq_length = 0
    found: tuple[SourceExposure, ...] = ()
    more_findings, more_notes = fingerprint_lines(state, cache)
    findings += more_findings
    notes += more_notes
    if cache is not None and "stage" in state:
        notes.append(
            f"a staged run (saved in stage {state['stage']}): its per-source draws come from the stage plan "
            "(neox_epoch.mcore.build_stages), not from a cached blend; they are not compared here"
        )
        sources: tuple[SourceDelta, ...] = ()
    elif cache is None:
        notes.append(
            "per-source draws after the resume need the blend's dataset_index: give --cache (the run's path_to_cache)"
        )
        sources = ()
    else:
        group, index, seq_length = _blend(cache, size, source_names)
        before = np.bincount(index[:consumed], minlength=len(source_names))
        counted = [int(saved[n]) for n in source_names]
        if counted != before.tolist():
            raise ConfigError(
                f"{cache}: its blend draws {before.tolist()} at sample {consumed}, the checkpoint's "
                f"counters say {counted}: not the build this run trained on"
            )
        after = np.bincount(index[consumed : consumed + iterations * batch], minlength=len(source_names))
        sources = tuple(SourceDelta(n, 0, 0, int(a), int(b), int(b)) for n, a, b in zip(source_names, after, before))
        if exposure:  # continuing with the saved batch would leave its own remainder undrawn
            old_batch = int(state["global_batch_size"])
            continued = consumed + (size - consumed) // old_batch * old_batch
            found = exposures(group, source_names, consumed + iterations * batch, continued)
    plan = Plan("megatron-core", "", seq_length, batch, end, size, {}, (), (), (), ())
    new = NewRun(shape, plan, tuple(source_names), None, {}, size, False, True)
    old = OldRun(
        ckpt,
        int(state["global_batch_size"]),
        consumed,
        f"consumed = {consumed} (the counters' state in the checkpoint's client state)",
        None,
    )
    return ResumeCheck(
        old,
        new,
        start,
        "megatron-core",
        sources,
        tuple(findings),
        tuple(notes),
        consumed,
        semantics="megatron-core with neox-epoch's live counters",
        exposures=found,
    )
