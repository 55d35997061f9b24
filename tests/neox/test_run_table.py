"""The table the NeoX hooks log at build time: names in full (they used to be cut to 14 characters), and a prefix
listed twice in the train blend as one row, merged as the plan's table merges it (plan/repeated.py)."""

from __future__ import annotations

from typing import Any

from neox_epoch.formats.corpus import write_random_corpus
from neox_epoch.formats.neox_config import EpochBlock
from neox_epoch.neox.hook_build import render_table
from neox_epoch.neox.planning import make_run_plan
from neox_epoch.plan.repeated import merge_repeated

LONG = "web_pages_of_the_long_tail_text_document"


def test_in_run_table_full_names_and_one_row_per_prefix(tmp_path: Any) -> None:
    long, code = str(tmp_path / LONG), str(tmp_path / "code")
    write_random_corpus(long, 7, 200, 1, 100)
    write_random_corpus(code, 8, 100, 1, 100)
    values = {
        "train_data_paths": [long, code, long],
        "valid_data_paths": [long],
        "test_data_paths": [long],
        "train_data_weights": [1.0, 1.0, 1.0],
        "seq_length": 8,
        "train_batch_size": 4,
        "train_micro_batch_size_per_gpu": 4,
        "train_iters": 1000,
        "lr_decay_iters": 1000,
        "warmup": 0.0,
        "eval_interval": 1000,
        "eval_iters": 1,
    }
    rp = make_run_plan(values, EpochBlock())
    rows = [
        {
            "name": s.name,
            "prefix": s.prefix,
            "tokens": s.tokens,
            "samples_per_epoch": s.samples_per_epoch,
            "samples_requested": s.samples_requested,
            "epochs_built": s.epochs_built,
            "samples_built": s.samples_built,
            "length": s.length,
            "samples_drawn": s.samples_drawn,
            "passes": s.passes,
            "target_passes": None,
            "separate_epochs": False,
        }
        for s in rp.train
    ]
    assert [r["samples_drawn"] for r in rows] == [1334, 1333, 1333]
    lines = render_table(rp, rows).splitlines()
    assert lines[1:4] == [
        "  source                                                tokens  samples/epoch  requested  epochs built"
        "                 drawn    passes  target",
        "  web_pages_of_the_long_tail_text_document (listed 2x)   10326           1290       2680             2"
        "  2667 (1334 distinct)  2.067442       -",
        "  code                                                    5306            663       1340             3"
        "                  1333  2.010558       -",
    ]
    merged = [s for s in merge_repeated(rp.plan).sources if s.split == "train"]  # the plan's own merged row
    assert (
        merged[0].name,
        merged[0].copies,
        merged[0].samples_drawn,
        merged[0].samples_distinct,
        merged[0].samples_requested,
    ) == (LONG, 2, 2667, 1334, 2680)
