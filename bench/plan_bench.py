#!/usr/bin/env python
"""Scale benchmark: ``neox-epoch plan`` against megatron-core building the same indices (issue 2, "Performance").

Run by hand (this is not a test)::

    python bench/plan_bench.py                 # full scale: 8 sources, 100M documents, ~100B tokens, 100M samples
    python bench/plan_bench.py --scale 0.05    # everything shrunk proportionally, for a quick check
    python bench/plan_bench.py --workdir DIR --keep   # keep the synthetic corpus (a rerun on DIR reuses it)

Needs megatron-core (0.16.1 by default, ``--framework-version`` otherwise) and torch in the same Python.
In one run it

1. synthesizes 8 weighted sources (MMIDIDX ``.idx`` written with numpy in chunks, deterministic lognormal
   document lengths clipped to [1, 20000]; each ``.bin`` is a SPARSE file of the right size, so disk use
   stays small while every size check sees realistic numbers);
2. runs ``python -m neox_epoch.cli plan --framework megatron-core ... --json`` in a fresh process and
   measures its wall time and peak RSS (``os.wait4`` of that child) and that it writes no file;
3. runs megatron-core's ``BlendedMegatronDatasetBuilder(GPTDataset, ...)`` on the same data in a fresh
   process (a 1-process gloo group, ``path_to_cache`` in the work dir): wall time, time of ``build()``,
   peak RSS and the bytes of the cache files it writes;
4. compares every number the plan predicts (per source and split: documents, tokens, samples requested,
   epochs built, samples built, samples drawn; per blend: size and draws) with what megatron-core built,
   printing PASS/FAIL per number;
5. prints the table of times, memory and bytes written against the targets (megatron/plan >= 150x in
   time, plan <= 1/50 of megatron's peak RSS, 0 bytes written: issue 25), and times the exact greedy blend counts
   at 1e9 samples (``neox_epoch.semantics.blend.greedy_counts``) in a fresh process.

The parent process imports neither numpy nor torch, so it stays small: on Linux a child's ``ru_maxrss``
can include the parent's memory high-water mark (vfork), and the numbers must be the child's own.
Exit status: 0 when every comparison and every target passes, 1 otherwise.

Validation consumption: Megatron-LM asks for ``(train_iters // eval_interval + 1) * eval_iters * gbs``
validation samples. The defaults (``--eval-iters 1 --eval-interval 1000``) give the valid split a real
size, so the valid blend is compared as well.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, NoReturn

#: per-source share of the documents, blend weight, and mean document length relative to the overall mean
SOURCES: tuple[tuple[str, float, float, float], ...] = (
    ("web", 0.30, 0.25, 0.8),
    ("books", 0.20, 0.10, 1.5),
    ("code", 0.15, 0.20, 1.2),
    ("wiki", 0.10, 0.10, 1.0),
    ("papers", 0.09, 0.10, 1.3),
    ("news", 0.07, 0.10, 0.7),
    ("math", 0.05, 0.10, 0.9),
    ("forum", 0.04, 0.05, 0.6),
)
MAX_LEN = 20_000
SIGMA = 1.0
GEN_CHUNK = 1 << 22
SPEED_TARGET = 150.0
MEMORY_TARGET = 1 / 50
MIB = 1 << 20


@dataclass(frozen=True)
class Spec:
    """The synthetic corpus: reused from a kept work dir only when identical."""

    docs: int
    tokens: int
    seed: int = 1234
    names: tuple[str, ...] = tuple(s[0] for s in SOURCES)
    doc_shares: tuple[float, ...] = tuple(s[1] for s in SOURCES)
    weights: tuple[float, ...] = tuple(s[2] for s in SOURCES)
    length_factors: tuple[float, ...] = tuple(s[3] for s in SOURCES)

    def docs_per_source(self) -> list[int]:
        n = [int(self.docs * s) for s in self.doc_shares]
        n[0] += self.docs - sum(n)
        return n

    def mean_lengths(self) -> list[float]:
        """Per-source mean length, scaled so that the document-weighted mean is tokens / docs."""
        n = self.docs_per_source()
        base = (self.tokens / self.docs) * sum(n) / sum(k * f for k, f in zip(n, self.length_factors, strict=True))
        return [base * f for f in self.length_factors]


@dataclass
class Run:
    """One measured child process."""

    argv: list[str]
    returncode: int
    wall_s: float
    cpu_s: float
    maxrss_bytes: int
    stdout: str
    stderr: str
    extra: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------------------
# child processes


def run_measured(argv: list[str], cwd: str | None = None, env: dict[str, str] | None = None) -> Run:
    """Run ``argv``; wall time and the peak RSS of that child alone (``os.wait4``)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=cwd, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)  # already reaped: keep Popen from waiting again
        out.seek(0)
        err.seek(0)
        cpu = usage.ru_utime + usage.ru_stime
        return Run(
            argv,
            proc.returncode,
            wall,
            cpu,
            int(usage.ru_maxrss) * 1024,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
        )


def last_json(text: str) -> dict[str, Any]:
    """The JSON object a driver printed on its last stdout line."""
    lines = [ln for ln in text.strip().splitlines() if ln.startswith("{")]
    if not lines:
        raise ValueError("no JSON line in the output")
    return json.loads(lines[-1])  # type: ignore[no-any-return]


GENERATE = r"""
import json, math, os, struct, sys
import numpy as np
spec, workdir = json.loads(sys.argv[1]), sys.argv[2]
HEADER = b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8)   # version 1, dtype code 8 = uint16
CHUNK, MAX_LEN, SIGMA = spec["chunk"], spec["max_len"], spec["sigma"]
out = []
for k, (name, n, mean) in enumerate(zip(spec["names"], spec["docs_per_source"], spec["mean_lengths"])):
    prefix = os.path.join(workdir, name)
    rng = np.random.RandomState(spec["seed"] + k)
    mu = math.log(mean) - SIGMA * SIGMA / 2
    total = 0
    with open(prefix + ".idx", "wb") as f:
        f.write(HEADER + struct.pack("<QQ", n, n + 1))
        for lo in range(0, n, CHUNK):                       # int32 sizes[n]
            m = min(CHUNK, n - lo)
            s = np.clip(np.rint(rng.lognormal(mu, SIGMA, m)), 1, MAX_LEN).astype(np.int32)
            total += int(s.sum(dtype=np.int64))
            s.tofile(f)
        f.flush()
        with open(prefix + ".idx", "rb") as r:              # int64 pointers[n]: exclusive cumsum * 2 bytes
            offset = 0
            for lo in range(0, n, CHUNK):
                m = min(CHUNK, n - lo)
                r.seek(34 + 4 * lo)
                s = np.fromfile(r, dtype=np.int32, count=m).astype(np.int64) * 2
                p = np.empty(m, dtype=np.int64)
                p[0] = offset
                np.cumsum(s[:-1], out=p[1:])
                p[1:] += offset
                offset = int(p[-1] + s[-1])
                p.tofile(f)
        for lo in range(0, n + 1, CHUNK):                   # int64 document_indices[n + 1] = 0..n
            np.arange(lo, min(lo + CHUNK, n + 1), dtype=np.int64).tofile(f)
    with open(prefix + ".bin", "wb") as f:                  # sparse: right size, (almost) no blocks
        f.truncate(2 * total)
    out.append({"name": name, "prefix": prefix, "documents": n, "tokens": total})
print(json.dumps({"sources": out}))
"""

MEGATRON = r"""
import json, os, resource, sys, time
t0 = time.perf_counter()
import numpy as np
import torch.distributed as dist
from megatron.core.datasets.blended_dataset import BlendedDataset
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer
spec = json.loads(sys.argv[1])
# 0.16.1's BlendedDataset calls torch.distributed.get_rank() when path_to_cache is set: a 1-process group
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
t_import = time.perf_counter() - t0
config = GPTDatasetConfig(
    random_seed=spec["seed"], sequence_length=spec["seq_length"], blend=(spec["prefixes"], spec["weights"]),
    split=spec["split"], path_to_cache=spec["cache"], tokenizer=NullTokenizer(vocab_size=65000),
    reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
    mid_level_dataset_surplus=spec["surplus"],
)
t1 = time.perf_counter()
datasets = BlendedMegatronDatasetBuilder(GPTDataset, spec["sizes"], lambda: True, config).build()
t_build = time.perf_counter() - t1
rss_build = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
splits = []
for i, top in enumerate(datasets):
    if top is None:
        continue
    mids = top.datasets if isinstance(top, BlendedDataset) else [top]
    srcs = []
    for m in mids:
        docs = len(m.indices)
        lo = int(m.indices[0]) if docs else 0
        tokens = int(np.asarray(m.dataset.sequence_lengths[lo:lo + docs]).sum(dtype=np.int64))
        srcs.append({"prefix": m.dataset_path, "documents": docs, "tokens": tokens, "num_samples": m.num_samples,
                     "length": len(m), "document_index": len(m.document_index),
                     "epochs": len(m.document_index) // docs if docs else 0,
                     "epochs_whole": docs > 0 and len(m.document_index) % docs == 0})
    rec = {"split": ["train", "valid", "test"][i], "blended": isinstance(top, BlendedDataset), "length": len(top),
           "sources": srcs}
    if isinstance(top, BlendedDataset):
        di = np.asarray(top.dataset_index)
        used = min(spec["consumed"][i], len(di))
        rec["draws_consumed"] = np.bincount(di[:used], minlength=len(mids)).tolist()
        rec["draws_all"] = np.bincount(di, minlength=len(mids)).tolist()
    splits.append(rec)
print(json.dumps({"import_s": t_import, "build_s": t_build, "rss_build": rss_build, "splits": splits}))
"""

GREEDY = r"""
import json, resource, sys, time
from neox_epoch.semantics.blend import greedy_counts, normalize
w, n = json.loads(sys.argv[1]), int(sys.argv[2])
t = time.perf_counter()
c = greedy_counts(normalize(w), n)
print(json.dumps({"seconds": time.perf_counter() - t, "counts": c, "sum": sum(c),
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


# ---------------------------------------------------------------------------------------------------------------
# helpers


def files_under(path: str) -> dict[str, tuple[int, int]]:
    """Every file below ``path`` with (size, mtime_ns)."""
    out: dict[str, tuple[int, int]] = {}
    for root, _, names in os.walk(path):
        for n in names:
            p = os.path.join(root, n)
            st = os.stat(p)
            out[os.path.relpath(p, path)] = (st.st_size, st.st_mtime_ns)
    return out


def du(path: str) -> tuple[int, int]:
    """(apparent bytes, allocated bytes) of the files below ``path``."""
    apparent = allocated = 0
    for root, _, names in os.walk(path):
        for n in names:
            st = os.stat(os.path.join(root, n))
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated


def mem_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return -1


def load_average() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def mb(n: float) -> str:
    return f"{n / MIB:,.0f} MiB"


def fail(msg: str, run: Run | None = None) -> NoReturn:
    print(f"plan_bench: {msg}", file=sys.stderr)
    if run is not None:
        print(
            f"  command: {' '.join(run.argv[:6])} ...\n  exit {run.returncode}\n  stderr tail:\n"
            + "\n".join(run.stderr.strip().splitlines()[-15:]),
            file=sys.stderr,
        )
    raise SystemExit(1)


def consumption(train_samples: int, gbs: int, eval_iters: int, eval_interval: int) -> tuple[list[int], list[int]]:
    """Megatron-LM's requested train/valid/test samples (get_train_valid_test_num_samples) and what training
    then consumes: train_iters = train_samples // gbs iterations, so train_iters * gbs train samples."""
    iters = train_samples // gbs
    evals = [(iters // eval_interval + 1) * eval_iters * gbs, eval_iters * gbs]
    return [train_samples, *evals], [iters * gbs, *evals]


# ---------------------------------------------------------------------------------------------------------------
# steps


def prepare(args: argparse.Namespace, spec: Spec) -> tuple[str, list[dict[str, Any]]]:
    """Create (or reuse) the synthetic corpus; returns the work dir and the per-source facts."""
    workdir = args.workdir or tempfile.mkdtemp(prefix="plan_bench_")
    os.makedirs(workdir, exist_ok=True)
    marker = os.path.join(workdir, "corpus.json")
    if os.path.isfile(marker):
        with open(marker) as f:
            kept = json.load(f)
        if kept.get("spec") == json.loads(json.dumps(asdict(spec))):
            print(f"reusing the corpus in {workdir}")
            return workdir, kept["sources"]
    if os.listdir(workdir):
        fail(f"--workdir {workdir} is not empty and holds no corpus of this spec; give an empty or new directory")
    est_idx = 20 * spec.docs + 34 * len(spec.names)
    est_cache = 4 * spec.docs * 4 + 30 * args.samples  # document indices over a few epochs, sample/shuffle/blend
    free = shutil.disk_usage(workdir).free
    print(f"work dir {workdir}: {gb(free)} free; needs ~{gb(est_idx)} of .idx + ~{gb(est_cache)} of megatron cache")
    if free < 1.2 * (est_idx + est_cache):
        fail(f"not enough disk in {workdir}: {gb(free)} free, ~{gb(1.2 * (est_idx + est_cache))} needed")
    gen = {
        "seed": spec.seed,
        "names": list(spec.names),
        "docs_per_source": spec.docs_per_source(),
        "mean_lengths": spec.mean_lengths(),
        "chunk": GEN_CHUNK,
        "max_len": MAX_LEN,
        "sigma": SIGMA,
    }
    print(f"writing {len(spec.names)} sources, {spec.docs:,d} documents ...", flush=True)
    run = run_measured([sys.executable, "-c", GENERATE, json.dumps(gen), workdir])
    if run.returncode != 0:
        fail("corpus generation failed", run)
    sources: list[dict[str, Any]] = last_json(run.stdout)["sources"]
    app, alloc = du(workdir)
    print(
        f"  {run.wall_s:.1f} s; {sum(s['tokens'] for s in sources):,d} tokens; files {gb(app)} apparent, "
        f"{gb(alloc)} on disk"
    )
    with open(marker, "w") as f:
        json.dump({"spec": asdict(spec), "sources": sources}, f)
    return workdir, sources


def plan_argv(args: argparse.Namespace, spec: Spec, sources: list[dict[str, Any]]) -> list[str]:
    data_path: list[str] = []
    for w, s in zip(spec.weights, sources, strict=True):
        data_path += [repr(w), s["prefix"]]
    return [
        sys.executable,
        "-m",
        "neox_epoch.cli",
        "plan",
        "--framework",
        "megatron-core",
        "--framework-version",
        args.framework_version,
        "--data-path",
        *data_path,
        "--split",
        args.split,
        "--seq-length",
        str(args.seq_length),
        "--global-batch-size",
        str(args.global_batch_size),
        "--micro-batch-size",
        "1",
        "--lr",
        "1e-4",
        "--train-samples",
        str(args.samples),
        "--eval-iters",
        str(args.eval_iters),
        "--eval-interval",
        str(args.eval_interval),
        "--seed",
        str(args.seed),
        "--mid-level-dataset-surplus",
        repr(args.surplus),
        "--json",
    ]


def compare(plan: dict[str, Any], mc: dict[str, Any], consumed: list[int]) -> tuple[int, int]:
    """Print PASS/FAIL per predicted number; returns (passed, failed)."""
    passed = failed = 0

    def check(label: str, predicted: Any, built: Any) -> None:
        nonlocal passed, failed
        ok = predicted == built
        passed += ok
        failed += not ok
        print(f"  {'PASS' if ok else 'FAIL'}  {label:<44} plan {predicted!s:>16}  megatron-core {built!s:>16}")

    cs = plan.get("consumed_samples", {})
    check("consumed samples (train, valid, test)", [cs.get(k) for k in ("train", "valid", "test")], consumed)
    by_key = {(os.path.basename(s["prefix"]), s["split"]): s for s in plan["sources"]}
    blends = {b["split"]: b for b in plan.get("blends", [])}
    built_keys = set()
    for rec in mc["splits"]:
        split = rec["split"]
        print(f"{split} split ({'blended' if rec['blended'] else 'direct'}):")
        for m in rec["sources"]:
            name = os.path.basename(m["prefix"])
            built_keys.add((name, split))
            p = by_key.get((name, split))
            if p is None:
                check(f"{name}/{split} planned", "missing", "built")
                continue
            check(f"{name}/{split} documents", p["documents"], m["documents"])
            check(f"{name}/{split} tokens", p["tokens"], m["tokens"])
            check(f"{name}/{split} samples_requested", p["samples_requested"], m["num_samples"])
            check(f"{name}/{split} epochs_built", p["epochs_built"], m["epochs"] if m["epochs_whole"] else "partial")
            check(f"{name}/{split} samples_built", p["samples_built"], m["length"])
            if rec["blended"]:
                k = [os.path.basename(x["prefix"]) for x in rec["sources"]].index(name)
                check(f"{name}/{split} samples_drawn", p["samples_drawn"], rec["draws_consumed"][k])
        if rec["blended"]:
            b = blends.get(split)
            if b is None:
                check(f"{split} blend planned", "missing", "built")
                continue
            check(f"{split} blend size", b["size"], rec["length"])
            check(f"{split} blend draws (first {b['consumed']:,d})", b["draws"], rec["draws_consumed"])
    for key in sorted(set(by_key) - built_keys):
        check(f"{key[0]}/{key[1]} built", "planned", "not built")
    return passed, failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--docs", type=int, default=100_000_000, help="documents over all sources (default 1e8)")
    ap.add_argument("--tokens", type=int, default=None, help="tokens over all sources (default docs * 1000)")
    ap.add_argument("--samples", type=int, default=100_000_000, help="--train-samples (default 1e8)")
    ap.add_argument("--greedy-samples", type=int, default=10**9, help="greedy blend steps to time (default 1e9)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply docs, tokens, samples, greedy steps")
    ap.add_argument("--seq-length", type=int, default=2048)
    ap.add_argument("--global-batch-size", type=int, default=1024)
    ap.add_argument("--split", default="99,1,0")
    ap.add_argument("--eval-iters", type=int, default=1)
    ap.add_argument("--eval-interval", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--surplus", type=float, default=0.005, help="mid_level_dataset_surplus")
    ap.add_argument("--framework-version", default="0.16.1", help="megatron-core semantics the plan mirrors")
    ap.add_argument("--plan-repeats", type=int, default=3, help="plan runs; the median time and max RSS count")
    ap.add_argument("--workdir", default=None, help="directory for the corpus and the cache (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (a rerun with --workdir reuses it)")
    args = ap.parse_args(argv)
    args.docs = max(1000, int(args.docs * args.scale))
    args.tokens = int(args.tokens * args.scale) if args.tokens is not None else args.docs * 1000
    args.samples = max(args.global_batch_size, int(args.samples * args.scale))
    args.greedy_samples = max(1, int(args.greedy_samples * args.scale))
    spec = Spec(docs=args.docs, tokens=args.tokens, seed=args.seed)
    sizes, consumed = consumption(args.samples, args.global_batch_size, args.eval_iters, args.eval_interval)
    avail = mem_available()
    need = 60 * args.samples + 16 * args.docs  # megatron-core's peak: ~5.4 GB at 1e8 samples / 1e8 documents
    if 0 < avail < need:
        print(f"warning: {gb(avail)} of memory available, megatron-core may need ~{gb(need)}", file=sys.stderr)

    workdir, sources = prepare(args, spec)
    try:
        return bench(args, spec, sizes, consumed, workdir, sources)
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def bench(
    args: argparse.Namespace,
    spec: Spec,
    sizes: list[int],
    consumed: list[int],
    workdir: str,
    sources: list[dict[str, Any]],
) -> int:
    cache = os.path.join(workdir, "cache")
    shutil.rmtree(cache, ignore_errors=True)

    # 2. the plan, in fresh processes. An installed package has its bytecode (pip compiles it; a checkout gets it on
    # first import) and megatron-core's has: compile ours too, or a PYTHONDONTWRITEBYTECODE=1 environment makes
    # every plan recompile its ~50 modules (0.13 s measured) and times the compiler instead of the plan.
    package = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "neox_epoch")
    subprocess.run([sys.executable, "-m", "compileall", "-q", package], check=True)
    print("bytecode compiled for neox_epoch/ (as an install has it)")
    argv = plan_argv(args, spec, sources)
    before = files_under(workdir)
    runs = []
    for _ in range(max(1, args.plan_repeats)):
        run = run_measured(argv, cwd=workdir)
        if run.returncode != 0:
            fail("neox-epoch plan failed", run)
        runs.append(run)
    after = files_under(workdir)
    written = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    written_bytes = sum(after[k][0] for k in written if k in after)
    plan_wall = sorted(r.wall_s for r in runs)[len(runs) // 2]
    plan_cpu = sorted(r.cpu_s for r in runs)[len(runs) // 2]
    plan_rss = max(r.maxrss_bytes for r in runs)
    plan = json.loads(runs[0].stdout)
    print(
        f"plan: {', '.join(f'{r.wall_s:.3f}' for r in runs)} s wall, {plan_cpu:.3f} s CPU, peak RSS {mb(plan_rss)}, "
        f"train_iters {plan['train_iters']:,d}"
    )

    # 3. megatron-core, in a fresh process
    prefixes = [s["prefix"] for s in sources]
    mspec = {
        "seed": args.seed,
        "seq_length": args.seq_length,
        "prefixes": prefixes,
        "weights": list(spec.weights),
        "split": args.split,
        "cache": cache,
        "surplus": args.surplus,
        "sizes": sizes,
        "consumed": consumed,
    }
    print(f"megatron-core: building sizes={sizes} ...", flush=True)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    mrun = run_measured([sys.executable, "-c", MEGATRON, json.dumps(mspec)], cwd=workdir, env=env)
    if mrun.returncode != 0:
        fail("megatron-core build failed", mrun)
    mc = last_json(mrun.stdout)
    cache_bytes, _ = du(cache)
    print(
        f"megatron-core: {mrun.wall_s:.2f} s wall ({mc['import_s']:.2f} s imports, {mc['build_s']:.2f} s build), "
        f"peak RSS {mb(mrun.maxrss_bytes)}, cache {gb(cache_bytes)}"
    )

    # greedy blend counts at 1e9 (scaled) samples
    grun = run_measured([sys.executable, "-c", GREEDY, json.dumps(list(spec.weights)), str(args.greedy_samples)])
    if grun.returncode != 0:
        fail("greedy_counts failed", grun)
    g = last_json(grun.stdout)

    # 4. predicted vs built
    print("\npredicted (neox-epoch plan) vs built (megatron-core):")
    passed, failed = compare(plan, mc, consumed)
    print(f"comparison: {passed} PASS, {failed} FAIL")

    # 5. the table
    speed = mrun.wall_s / plan_wall
    speed_build = mc["build_s"] / plan_wall
    speed_cpu = mrun.cpu_s / plan_cpu
    mem = plan_rss / mrun.maxrss_bytes
    rows = [
        (
            "wall time, process (s)",
            f"{plan_wall:.3f}",
            f"{mrun.wall_s:.2f}",
            f"{speed:.1f}x",
            ">= 150x",
            speed >= SPEED_TARGET,
        ),
        (
            "  megatron build() only (s)",
            f"{plan_wall:.3f}",
            f"{mc['build_s']:.2f}",
            f"{speed_build:.1f}x",
            ">= 150x",
            speed_build >= SPEED_TARGET,
        ),
        (
            "CPU time, user+sys (s)",
            f"{plan_cpu:.3f}",
            f"{mrun.cpu_s:.2f}",
            f"{speed_cpu:.1f}x",
            ">= 150x",
            speed_cpu >= SPEED_TARGET,
        ),
        (
            "peak RSS (plan/megatron)",
            mb(plan_rss),
            mb(mrun.maxrss_bytes),
            f"1/{1 / mem:.0f}",
            "<= 1/50",
            mem <= MEMORY_TARGET,
        ),
        ("bytes written", f"{written_bytes:,d}", f"{cache_bytes:,d}", "", "plan 0", not written),
    ]
    head = ("", "neox-epoch plan", f"megatron-core {args.framework_version}", "ratio", "target", "")
    widths = (28, 16, 22, 8, 9, 4)
    print("\n" + "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip())
    for *cells, ok in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(cells, widths[:-1], strict=True)) + ("PASS" if ok else "FAIL"))
    total_tokens = sum(s["tokens"] for s in sources)
    print(
        f"corpus: {len(sources)} sources, {spec.docs:,d} documents, {total_tokens:,d} tokens; "
        f"seq {args.seq_length}, {args.samples:,d} train samples, sizes {sizes}; plan time = median of "
        f"{len(runs)} runs, RSS = max; load average {load_average()} (machine shared: wall times are noisy)"
    )
    g_ok = g["sum"] == args.greedy_samples
    print(
        f"greedy_counts({len(spec.weights)} weights, {args.greedy_samples:,d}): {g['seconds']:.2f} s "
        f"({grun.wall_s:.2f} s process, {grun.cpu_s:.2f} s CPU), peak RSS {mb(grun.maxrss_bytes)}, counts sum "
        f"{'ok' if g_ok else 'WRONG'}: {g['counts']}"
    )
    if written:
        print(f"plan wrote or changed: {written[:10]}")
    ok = failed == 0 and not written and g_ok and speed >= SPEED_TARGET and mem <= MEMORY_TARGET
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
