#!/usr/bin/env python3
"""Golden numbers from REAL GPT-NeoX data code, written as test fixtures.

Usage::

    NEOX_DIR=/path/to/gpt-neox python scripts/neox_golden.py OUT_DIR [--neox-commit SHA]

Run it with a Python environment that can import NeoX's data code (see ``scripts/neox_env.sh``) and
in which ``neox_epoch`` is importable. Nothing of NeoX is copied: the script imports NeoX from
``$NEOX_DIR`` and calls its own functions.

For every case the script writes deterministic random corpora (``neox_epoch.formats.corpus``) into a fresh
temporary directory, builds a minimal argument object with exactly the attributes NeoX reads, and
calls NeoX's ``build_train_valid_test_data_loaders`` -- the function ``megatron/training.py`` calls --
which in turn runs ``get_train_valid_test_split_`` / ``build_train_valid_test_datasets`` (``data_path``
mode) or ``get_normalized_weights_and_num_samples`` / ``weights_by_num_docs`` /
``build_weighted_datasets`` / ``build_the_dataset`` / ``BlendableDataset`` (``train_data_paths`` mode).
Those inner functions are wrapped in memory (never edited) only to record the arguments NeoX passed
and the results it got. The one CUDA call on that path (``torch.cuda.LongTensor``) is replaced by a
CPU tensor factory; distributed state is a 1-process gloo group plus NeoX's ``mpu``.

In NeoX's ``train_epochs`` mode (the ``e*`` cases: train_iters None, every split built for one epoch) the
script then calls NeoX's own ``megatron.training.update_iterations`` on the loaders NeoX built, and records
the train_iters it sets, the loader's batch and length. The loader batch is micro * dp, dp read from NeoX's
``mpu``; a data-parallel size above 1 is answered in memory for this one process, as its rank 0. The ``r*``
cases are configurations NeoX refuses in that mode; the exception and message are recorded.

Then, for the first ``train_iters * train_batch_size`` samples of each case's training dataset (in
``train_epochs`` mode: the distinct samples of the cycled loader, at most one pass of full batches), the
script maps every sample back to (document, token position) through the dataset's own
``doc_idx``/``sample_idx``/``shuffle_idx`` (and the blend's ``dataset_index``/``dataset_sample_index``),
checks the mapped tokens against ``dataset[i]['text']`` for every sample, and records how often each
token of each source was an input token (``tokens[:-1]``).

Output: ``OUT_DIR/neox_golden.json`` (sorted keys, indent 1) and ``OUT_DIR/neox_cache/`` holding the
named corpora (.bin/.idx) and the NeoX index files (.npy) of the headline case and of the blend cases,
laid out as NeoX's own data directory would be (index files beside the corpora).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from golden.catalogue import named_cases, random_cases, refused_cases, train_epochs_cases
from golden.common import HEADLINE_CASE, die
from golden.corpora import Corpus, corpus_record
from golden.fixtures import copy_fixtures, headline, neox_commit, versions
from golden.neox_setup import capture_fd1, init_distributed, install_recorders, load_neox
from golden.run import run_case, run_refused_case


def main(argv: list[str] | None = None) -> int:
    """Entry point: build every case with NeoX and write the fixtures to OUT_DIR."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="directory for neox_golden.json and neox_cache/")
    parser.add_argument("--neox-commit", help="NeoX commit to record (default: asked of git, else 'unknown')")
    parser.add_argument("--random-cases", type=int, default=8, help="number of randomized cases (default 8)")
    parser.add_argument("--keep-workdir", action="store_true", help="keep the temporary directory and NeoX's log")
    args = parser.parse_args(argv)

    started = time.time()
    try:
        import neox_epoch.formats.corpus  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        try:
            import neox_epoch.formats.corpus  # noqa: F401
        except ImportError as exc:
            die(f"cannot import neox_epoch: {exc}")
    neox = load_neox(os.environ.get("NEOX_DIR"))
    workdir = tempfile.mkdtemp(prefix="neox_golden_")
    log = os.path.join(workdir, "neox.log")
    try:
        with capture_fd1(log):
            init_distributed(neox, workdir)
        install_recorders(neox)
        cases = named_cases() + random_cases(args.random_cases) + train_epochs_cases()
        refused = refused_cases()
        records: dict[str, Any] = {}
        refused_records: dict[str, Any] = {}
        results = []
        all_corpora: dict[str, Corpus] = {}
        refused_names = {case.name for case in refused}
        for case in cases + refused:
            t0 = time.time()
            runner = run_refused_case if case.name in refused_names else run_case
            try:
                record, corpora, directory = runner(neox, case, workdir, log)
            except Exception:
                print(f"neox_golden: case {case.name} failed; NeoX's log: {log}", file=sys.stderr)
                args.keep_workdir = True
                raise
            (refused_records if case.name in refused_names else records)[case.name] = record
            results.append((case, corpora, directory))
            all_corpora.update(corpora)
            print(f"{case.name}: {time.time() - t0:.1f} s", file=sys.stderr)

        out_json = os.path.join(args.out_dir, "neox_golden.json")
        os.makedirs(args.out_dir, exist_ok=True)
        if os.path.exists(out_json):
            os.remove(out_json)
        shutil.rmtree(os.path.join(args.out_dir, "neox_cache"), ignore_errors=True)
        fixtures = copy_fixtures(args.out_dir, results)
        copied = set(fixtures["files"])
        golden: dict[str, Any] = {
            "generator": "scripts/neox_golden.py",
            "neox_commit": neox_commit(neox.neox_dir, args.neox_commit),
            "versions": versions(neox),
            "corpora": {
                label: {**corpus_record(c), "copied": f"{label}.bin" in copied}
                for label, c in sorted(all_corpora.items())
            },
            "cases": records,
            "refused": refused_records,
            "headline": headline(records[HEADLINE_CASE]),
            "neox_cache": fixtures,
        }
        with open(out_json, "w", encoding="utf-8") as f:
            json.dump(golden, f, sort_keys=True, indent=1)
            f.write("\n")
    finally:
        if args.keep_workdir:
            print(f"neox_golden: work directory kept: {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    h = golden["headline"]
    print(
        f"wrote {out_json}: {len(records)} cases in {time.time() - started:.1f} s; headline: "
        f"{h['epochs_built']} epochs built, unseen {h['fraction_unseen']:.4f}, once {h['fraction_once']:.4f}, "
        f"twice {h['fraction_twice']:.4f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
