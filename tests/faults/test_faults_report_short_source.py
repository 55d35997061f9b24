"""Fault suite, validation: a source shorter than one sample in the report (``samples_per_epoch: 0``).

NeoX builds a one-token source thousands of epochs over (each sample spans the whole split many times). The report
printed passes 0.0 for it, and its exposure estimate over those epochs stopped the report (exit 3, a float
overflow). Its passes are counted in tokens, ``samples x seq_length / tokens``; a log that records no tokens for it
is refused in one line. The run log is written by the hooks' own writers (tests/helpers/run_logs.py).
"""

from __future__ import annotations

import json
import os

import pytest
from faults_util import cli, refused, tree  # noqa: E402
from run_logs import blend_values, launch  # noqa: E402

from neox_epoch.formats.corpus import write_corpus  # noqa: E402
from neox_epoch.formats.neox_config import EpochBlock  # noqa: E402

SEQ = 32


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = str(tmp_path_factory.mktemp("short"))
    write_corpus(os.path.join(d, "one"), [[7]])
    write_corpus(os.path.join(d, "web"), [list(range(50))] * 40)
    values = blend_values([os.path.join(d, "one"), os.path.join(d, "web")], [0.5, 0.5], SEQ, 8, train_iters=20)
    return os.path.dirname(launch(os.path.join(d, "log"), values, EpochBlock()))


def test_passes_of_a_one_token_source_in_tokens(log_dir: str) -> None:
    before = tree(log_dir)
    code, out, err = cli(["report", log_dir, "--json"])
    assert code == 0, err
    rows = {row["source"]: row for row in json.loads(out)["numbers"]}
    one, web = rows["one"], rows["web"]
    assert one["samples_per_epoch"] == 0 and one["samples"] == 80
    assert one["passes"] == 80 * SEQ / 1 == 2560.0  # samples x seq_length / tokens (the log's plan: 1 token)
    assert web["passes"] == round(80 / 62, 6)  # 2,000 tokens: (2000 - 1) // 32 = 62 samples per epoch
    assert tree(log_dir) == before


def test_no_tokens_recorded_is_refused(log_dir: str, tmp_path: str) -> None:
    path = os.path.join(str(tmp_path), "neox_epoch.jsonl")
    with open(os.path.join(log_dir, "neox_epoch.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    for record in records:
        for source in record.get("sources", []) if record.get("event") == "plan" else []:
            if source["name"] == "one":
                source["tokens"] = None
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records))
    refused(cli(["report", path, "--json"]), "report", "one: samples_per_epoch is 0", "cannot be counted")
