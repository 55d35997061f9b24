"""Benchmark of ``neox-epoch audit`` on a synthetic index of ~100M samples (run by hand).

    python bench/audit_bench.py                      # 100M samples, seq 2048, ~100B tokens, 2 epochs
    python bench/audit_bench.py --samples 20000000   # smaller
    python bench/audit_bench.py --dir /big/tmp --keep
    python bench/audit_bench.py --epochs 1           # one epoch (megatron-core's usual build)

It writes a NeoX-named index (doc/sample/shuffle .npy built with numpy the way NeoX builds them: the
documents tiled over ``--epochs`` (default 2) epochs and shuffled once, a boundary every seq_length tokens, a shuffled
permutation) next to a synthetic .idx whose sizes average ``--doc-tokens`` and a sparse .bin (only the
sizes matter). Then, each in a fresh process so that peak RSS (``resource.getrusage``) is its own:

1. ``read``: ``np.load`` + ``sum`` of the three .npy files (reading them once): the reference;
2. ``gather``: ``sizes[doc_idx]`` with numpy (one thread), the .idx size of every document copy looked up
   at random: not a target, a floor (any exact per-copy audit does at least this one random access per copy);
3. ``validate``: the audit without consumption (every check, one streamed pass);
4. ``exposure@F``: the audit with ``--consumed`` = F x len, for each F of ``--consumed-fractions``
   (default 0.5 and 1.0: half the samples is the NeoX "one epoch" case and the worst case for the
   exposure bookkeeping, every sample boundary where drawn/undrawn changes being an event; 1.0 is a
   whole run).

With ``--old TREE`` (a checkout of an earlier commit with its extensions built in place:
``git worktree add TREE COMMIT`` then ``python setup.py build_ext --inplace`` there), every audit run is
also made with that tree's code (its own bench script as the child, the tree first on ``sys.path``), and
each audit line ends with the ratios new/old of wall time and peak RSS.

It prints wall time, peak RSS and the ratios to ``read``. The list runs ``--repeat`` times (default 3),
interleaved (read, gather, validate, validate old, ..., read, gather, ...), so that a slow spell of the
machine (on a VM the same work can take 1.4x longer from one process to the next) falls on every run
alike; each line gives the fastest wall time of its run and the spread, and the ratios are fastest to
fastest. Targets: the audit with ``--consumed`` half the samples at most 2x ``read`` (at 30M and 100M samples),
peak RSS at most the old tree's. ``gather`` says how far below that any exact per-copy audit can go on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

CHUNK = 1 << 24


def _write_idx(prefix: str, sizes: np.ndarray) -> None:
    """MMIDIDX .idx for uint16 tokens with these sizes; a sparse .bin of the matching length."""
    from neox_epoch.formats.idx import MAGIC

    n = sizes.shape[0]
    with open(prefix + ".idx", "wb") as f:
        f.write(MAGIC + struct.pack("<Q", 1) + struct.pack("<B", 8) + struct.pack("<QQ", n, n + 1))
        f.write(sizes.astype(np.int32).tobytes())
        base = 0
        for a in range(0, n, CHUNK):
            s = sizes[a : a + CHUNK].astype(np.int64) * 2
            p = np.empty_like(s)
            p[0] = base
            np.cumsum(s[:-1], out=p[1:])
            p[1:] += base
            base = int(p[-1] + s[-1])
            f.write(p.tobytes())
        for a in range(0, n + 1, CHUNK):
            f.write(np.arange(a, min(n + 1, a + CHUNK), dtype=np.int64).tobytes())
    with open(prefix + ".bin", "wb") as f:
        f.truncate(base)


def generate(
    directory: str, samples: int, seq: int, doc_tokens: int, epochs: int = 2, seed: int = 1234
) -> dict[str, object]:
    t0 = time.time()
    tokens_target = (samples * seq) // epochs
    n_docs = max(1, tokens_target // doc_tokens)
    sizes = np.random.RandomState(seed + 1).randint(1, 2 * doc_tokens, size=n_docs).astype(np.int32)
    rng = np.random.RandomState(seed)  # as NeoX: the seed drives the two shuffles only
    T = int(sizes.sum(dtype=np.int64))
    S = (epochs * T - 1) // seq
    prefix = os.path.join(directory, "synth_text_document")
    _write_idx(prefix, sizes)
    doc = np.tile(np.arange(n_docs, dtype=np.int32), epochs)
    rng.shuffle(doc)
    ns = S - 5
    base = f"{prefix}_train_0_indexmap_{ns}ns_{seq}sl_{seed}s_packedpi_ac"
    np.save(base + "_doc_idx.npy", doc)
    # sample boundaries every seq tokens of the stream, in chunks of the document index
    sample = np.empty((S + 1, 2), dtype=np.int32)
    cum = 0
    row = 0
    for a in range(0, doc.shape[0], CHUNK):
        d = doc[a : a + CHUNK]
        s = sizes[d].astype(np.int64)
        after = np.cumsum(s) + cum
        lo_row, hi_row = row, min(S + 1, int((after[-1] - 1) // seq) + 1)
        if a + CHUNK >= doc.shape[0]:
            hi_row = S + 1
        b = np.arange(lo_row, hi_row, dtype=np.int64) * seq
        p = np.searchsorted(after, b, side="right")
        sample[lo_row:hi_row, 0] = p + a
        sample[lo_row:hi_row, 1] = b - (after[p] - s[p])
        row, cum = hi_row, int(after[-1])
    np.save(base + "_sample_idx.npy", sample)
    del sample
    shuffle = np.arange(S, dtype=np.uint32)
    rng.shuffle(shuffle)
    np.save(base + "_shuffle_idx.npy", shuffle)
    return {
        "prefix": prefix,
        "base": base,
        "docs": n_docs,
        "tokens": T,
        "samples": S,
        "epochs": epochs,
        "generate_s": round(time.time() - t0, 1),
    }


def _child(mode: str, base: str, consumed: int) -> None:
    t0 = time.time()
    c0 = time.process_time()  # CPU time of all the process's threads
    if mode == "read":
        total = 0
        for role in ("doc", "sample", "shuffle"):
            a = np.load(f"{base}_{role}_idx.npy")
            total += int(a.sum(dtype=np.int64))
            del a
        extra: dict[str, object] = {"checksum": total}
    elif mode == "gather":  # a floor for any exact per-copy audit: each copy's .idx size, looked up at random
        from neox_epoch.formats import idx as idxmod

        hdr = idxmod.read_header(base.split("_train_")[0], check_bin=False)
        sizes = np.fromfile(hdr.prefix + ".idx", dtype=np.int32, offset=hdr.sizes_offset, count=hdr.sequence_count)
        doc = np.load(f"{base}_doc_idx.npy", mmap_mode="r")
        total = 0
        for a in range(0, doc.shape[0], CHUNK):
            total += int(sizes[np.asarray(doc[a : a + CHUNK])].sum(dtype=np.int64))
        extra = {"checksum": total}
    else:
        from neox_epoch.audit.audit import AuditOptions, run_audit
        from neox_epoch.formats.cache_names import discover

        res = run_audit(
            discover([f"{base}_{r}_idx.npy" for r in ("doc", "sample", "shuffle")]),
            AuditOptions(consumed=consumed if mode == "exposure" else None),
        )
        r = res.indexes[0]
        extra = {
            "findings": [str(f) for f in res.findings],
            "epochs": r.epochs,
            "samples": r.samples,
            "exposure": r.exposure.to_json()["tokens"] if r.exposure else None,
        }
    wall = time.time() - t0
    cpu = time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kB
    hwm = None
    try:  # the kernel's high-water mark of this process image (Linux), as a cross-check
        with open("/proc/self/status", encoding="ascii") as f:
            hwm = next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmHWM:"))
    except (OSError, StopIteration):
        pass
    print(
        json.dumps(
            {
                "mode": mode,
                "wall_s": round(wall, 4),
                "cpu_s": round(cpu, 3),
                "peak_rss_bytes": rss,
                "vmhwm_bytes": hwm,
                **extra,
            }
        )
    )


def _versus(out: dict[str, dict[str, Any]], label: str) -> str:
    """New/old ratios of wall time and peak RSS for an audit line that has an old twin."""
    old = out.get(label + " old")
    if old is None:
        return ""
    new = out[label]
    wall = float(new["wall_s"]) / max(float(old["wall_s"]), 1e-9)
    rss = int(new["peak_rss_bytes"]) / max(int(old["peak_rss_bytes"]), 1)
    return f"  new/old: wall {wall:.2f}x, peak RSS {rss:.2f}x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=100_000_000)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--doc-tokens", type=int, default=2000, help="average document length")
    ap.add_argument("--epochs", type=int, default=2, help="copies of every document in the index")
    ap.add_argument("--consumed-fractions", default="0.5,1.0", help="comma-separated fractions of len to consume")
    ap.add_argument("--dir", default=None, help="where to write the synthetic index (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the files")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="with --dir: reuse an index generated there before with the same sizes (kept with --keep)",
    )
    ap.add_argument("--repeat", type=int, default=3, help="rounds of the whole list, interleaved (fastest taken)")
    ap.add_argument(
        "--runs", default=None, help="comma-separated subset of read,validate,exposure to run (default: all)"
    )
    ap.add_argument("--old", default=None, help="a checkout of an earlier commit to compare with (see above)")
    ap.add_argument("--child", nargs=3, metavar=("MODE", "BASE", "CONSUMED"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        if args.child[0] == "generate":
            samples, seq, doc_tokens, epochs = (int(x) for x in args.child[2].split(","))
            print(json.dumps(generate(args.child[1], samples, seq, doc_tokens, epochs)))
        else:
            _child(args.child[0], args.child[1], int(args.child[2]))
        return
    if args.epochs < 1:
        ap.error(f"--epochs {args.epochs}: at least 1")
    if args.repeat < 1:
        ap.error(f"--repeat {args.repeat}: at least 1")
    root = directory = args.dir or tempfile.mkdtemp(prefix="audit_bench_")
    if args.epochs != 2:  # another corpus: its own subdirectory (the 2-epoch one keeps its place for --reuse)
        directory = os.path.join(directory, f"epochs_{args.epochs}")
    os.makedirs(directory, exist_ok=True)
    try:
        # generate in a child too: a child's ru_maxrss starts from its parent's at fork on Linux, so the
        # parent must stay small for the measured children's numbers to be their own
        key = f"{args.samples},{args.seq},{args.doc_tokens}"
        saved = os.path.join(directory, f"bench_{key.replace(',', '_')}.json")
        key += f",{args.epochs}"
        if args.reuse and os.path.exists(saved):
            with open(saved, encoding="utf-8") as f:
                info = json.load(f)
        else:
            gen = subprocess.run(
                [sys.executable, __file__, "--child", "generate", directory, key],
                capture_output=True,
                text=True,
                check=True,
            )
            info = json.loads(gen.stdout.strip().splitlines()[-1])
            with open(saved, "w", encoding="utf-8") as f:
                json.dump(info, f)
        print(
            f"synthetic index: {info['samples']:,} samples, {info['docs']:,} documents, "
            f"{info['tokens']:,} tokens x {info['epochs']} epochs, seq {args.seq} ({info['generate_s']} s to generate)"
        )
        length = int(info["samples"]) - 1
        runs = [("read", 0), ("gather", 0), ("validate", 0)]
        runs += [(f"exposure@{f}", int(float(f) * length)) for f in args.consumed_fractions.split(",")]
        if args.runs:
            keep = set(args.runs.split(","))
            runs = [r for r in runs if r[0].split("@")[0] in keep or r[0] == "read"]
        if args.old:
            runs = [
                r
                for label, c in runs
                for r in ([(label, c)] + ([(label + " old", c)] if label not in ("read", "gather") else []))
            ]
        # an installed package has its bytecode (pip compiles it; a checkout gets it on first import): compile both
        # trees' first, or a PYTHONDONTWRITEBYTECODE=1 environment times the compiler inside every audit child
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        for tree in (here, *([args.old] if args.old else [])):
            subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(tree, "neox_epoch")], check=True)
        results: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in runs}  # the audit's JSON lines
        # every child in the environment `neox-epoch` gives its commands (cli.quiet_blas): numpy's OpenBLAS pool to one
        # thread, or its threads spin for about 0.1 s after numpy's import beside the audit's two
        child_env = {**os.environ, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1")}
        for _ in range(args.repeat):
            for label, consumed in runs:
                old = label.endswith(" old")
                script = os.path.join(args.old, "bench", "audit_bench.py") if old else __file__
                env = {**child_env, "PYTHONPATH": args.old} if old else child_env
                proc = subprocess.run(
                    [
                        sys.executable,
                        script,
                        "--child",
                        label.split("@")[0].split()[0],
                        str(info["base"]),
                        str(consumed),
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                    env=env,
                )
                results[label].append({**json.loads(proc.stdout.strip().splitlines()[-1]), "consumed": consumed})

        gb = 1e9
        out = {label: min(rs, key=lambda r: float(r["wall_s"])) for label, rs in results.items()}
        read = max(float(out["read"]["wall_s"]), 0.01)
        read_median = statistics.median(float(x["wall_s"]) for x in results["read"])
        for label, r in out.items():
            ratio = float(r["wall_s"]) / read
            hwm = r.get("vmhwm_bytes")
            walls = [float(x["wall_s"]) for x in results[label]]
            spread = f" (of {'/'.join(f'{w:.3f}' for w in walls)})" if len(walls) > 1 else ""
            spread += f", median {statistics.median(walls) / read_median:.2f}x read's" if len(walls) > 1 else ""
            print(
                f"{label:13s} wall {float(r['wall_s']):7.3f} s{spread}  ({ratio:5.3f}x read)  cpu {r['cpu_s']:>6} s"
                f"  peak RSS {int(r['peak_rss_bytes']) / gb:5.2f} GB"
                + (f" (VmHWM {int(hwm) / gb:5.2f} GB)" if hwm else "")
                + (f"  findings {len(r['findings'])}" if "findings" in r else "")
                + _versus(out, label)
                + (
                    f"  consumed {r['consumed']:,}: tokens by times seen {r.get('exposure')}"
                    if r.get("exposure")
                    else ""
                )
            )
    finally:
        if not args.keep and not args.reuse and args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
