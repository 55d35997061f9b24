"""Plan time of every real Pythia/StableLM config in the test corpora (the vendored tarball of
tests/neox/test_neox_real_configs.py) at 256 GPUs: ``plan``, exact mode (``--epochs 1``) and ``--epochs 1e9``.

    python bench/real_config_bench.py [--world 256] [--repeat 1]

Each config is paired with the test's own data file (its data keys pointed at one synthetic corpus, 40,000
documents of 300-20,000 tokens) and a 256-GPU hostfile, with the keys the tool tells a user to remove removed
(the test's ``advised_copy``). Each line: seconds in-process (imports already done: the command's own work)
and the exit code; the last line the slowest of each kind against the 1 s target. NeoX itself is not run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "helpers"))


def prepare(root: str, n: int) -> list[tuple[str, list[str]]]:
    """In ``root`` (the working directory): every real config with its data file and an ``n``-GPU hostfile;
    (the config's path in the tarball, the files to give ``plan``) per config."""
    import numpy as np

    import tests.neox.test_neox_real_configs as real
    from neox_epoch.formats.corpus import write_sized_corpus

    configs = real.extract_configs(root)
    with open(f"hostfile_{n}", "w", encoding="utf-8") as f:
        f.write("\n".join(f"node{i} slots=8" for i in range(max(1, n // 8))) + "\n")
    with open(f"world_{n}.yml", "w", encoding="utf-8") as f:
        f.write(json.dumps({"hostfile": f"hostfile_{n}"}) + "\n")
    sizes = [int(x) for x in np.random.RandomState(7).randint(300, 20_000, size=40_000)]
    os.makedirs("corpora")
    write_sized_corpus("corpora/corpus", sizes)
    cases = []
    for rel in configs:
        stem = os.path.splitext(os.path.basename(rel))[0]
        own = real.data_file(root, rel)
        for v in (v for k, v in own.items() if k.endswith("paths")):
            for p in v:
                for ext in (".bin", ".idx"):
                    if not os.path.exists(p + ext):
                        os.symlink(os.path.abspath("corpora/corpus" + ext), p + ext)
        with open(f"{stem}_data.yml", "w", encoding="utf-8") as f:
            f.write(json.dumps(own) + "\n")
        path, _ = real.advised_copy(root, rel, [f"{stem}_data.yml", f"world_{n}.yml"])
        cases.append((rel, [path, f"{stem}_data.yml", f"world_{n}.yml"]))
    return cases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    import tests.neox.test_neox_real_configs as real

    root = tempfile.mkdtemp(prefix="real-config-bench-")
    os.chdir(root)
    cases = prepare(root, args.world)
    worst: dict[str, float] = {}
    for rel, files in cases:
        cells = []
        for kind, extra in (("plan", []), ("exact", ["--epochs", "1"]), ("1e9", ["--epochs", "1e9"])):
            best, code = float("inf"), 0
            for _ in range(args.repeat):
                t = time.perf_counter()
                code, _out, _err = real.run_plan(["plan", *files, *extra, "--json"])
                best = min(best, time.perf_counter() - t)
            worst[kind] = max(worst.get(kind, 0.0), best)
            cells.append(f"{kind} {best:6.3f} s (exit {code})")
        print(f"  {rel:45s} " + "  ".join(cells), flush=True)
    print(
        f"slowest at {args.world} GPUs: "
        + ", ".join(f"{k} {v:.3f} s" for k, v in worst.items())
        + f"  (target < 1 s: {'PASS' if max(worst.values()) < 1.0 else 'FAIL'})"
    )


if __name__ == "__main__":
    main()
