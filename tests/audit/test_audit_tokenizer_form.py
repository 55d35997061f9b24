"""Why a cache built by one Megatron-LM version is rebuilt by the other: the GPTDataset description's ``tokenizer``
entry, part of the md5 in the cache's file names, has another form in Megatron-LM 0.16.1 (its legacy tokenizers:
``class`` the bare name, ``tokenizer_path`` a list) than in 0.19 (megatron-core's tokenizers: ``class``
module-qualified). Both caches are built by the real builder with the tokenizer each version's
``megatron.training.global_vars.build_tokenizer`` makes for ``--tokenizer-type NullTokenizer --vocab-size 100``
(tests/helpers/mcore_tokenizer_cache.py, under each stack's Python), and audited here."""

from __future__ import annotations

import glob
import json
import os
import subprocess

import frameworks
import pytest
import stacks
from paths import HELPERS

from neox_epoch.cli import main
from neox_epoch.formats.cache_descriptions import child_digest
from neox_epoch.formats.corpus import write_sized_corpus

pytestmark = [pytest.mark.megatron_lm, frameworks.needs_stack("neox")]  # builds with both stacks' Pythons: once

SCRIPT = os.path.join(HELPERS, "mcore_tokenizer_cache.py")
TOKENIZERS = {
    "neox": {"class": "_NullTokenizer", "tokenizer_path": [None], "vocab_size": "100"},
    "today": {
        "class": "megatron.core.tokenizers.text.models.default_tokenizer.DefaultTokenizerText",
        "tokenizer_path": None,
        "vocab_size": "100",
    },
}
NOTES = {
    "neox": "tokenizer '_NullTokenizer' is described as Megatron-LM 0.16.1 describes it (its legacy tokenizer's: "
    "class the bare name, tokenizer_path a list); Megatron-LM 0.19 writes megatron-core's tokenizer's: class "
    "module-qualified, tokenizer_path a string or null, so its description's md5 (the hash in these file "
    "names) differs and a Megatron-LM 0.19 run does not find this cache: it builds a new one",
    "today": "tokenizer 'megatron.core.tokenizers.text.models.default_tokenizer.DefaultTokenizerText' is described as "
    "Megatron-LM 0.19 describes it (megatron-core's tokenizer's: class module-qualified, tokenizer_path a "
    "string or null); Megatron-LM 0.16.1 writes its legacy tokenizer's: class the bare name, tokenizer_path "
    "a list, so its description's md5 (the hash in these file names) differs and a Megatron-LM 0.16.1 run "
    "does not find this cache: it builds a new one",
}


def _build(stack: str, python: str, prefix: str, cache: str) -> dict:
    env = dict(os.environ)
    if stack == "neox":  # Megatron-LM core_v0.16.1's tree over the 0.16.1 wheel; 0.19.2's wheel has megatron.training
        env["PYTHONPATH"] = frameworks.megatron_lm_dir()
    else:
        env.pop("PYTHONPATH", None)
    r = subprocess.run([python, SCRIPT, prefix, cache, "100"], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_audit_says_why_the_other_version_rebuilds_a_cache(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    pythons = stacks.require_stacks()
    prefix = str(tmp_path / "corpus")
    write_sized_corpus(prefix, [50] * 40)
    descriptions, digests = {}, {}
    for stack in ("neox", "today"):
        cache = str(tmp_path / f"cache_{stack}")
        assert _build(stack, pythons[stack], prefix, cache) == TOKENIZERS[stack]
        (path,) = glob.glob(os.path.join(cache, "*-GPTDataset-train-description.txt"))
        descriptions[stack], digests[stack] = json.load(open(path, encoding="utf-8")), os.path.basename(path)[:32]
        assert main(["audit", cache, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["indexes"][0]["notes"] == [NOTES[stack]] and not report["findings"]
    assert digests["neox"] != digests["today"]
    assert descriptions["neox"]["tokenizer"] == TOKENIZERS["neox"]
    assert descriptions["today"]["tokenizer"] == TOKENIZERS["today"]
    # the tokenizer entry is the whole difference: 0.16.1's description with 0.19's entry has 0.19's md5
    assert child_digest({**descriptions["neox"], "tokenizer": TOKENIZERS["today"]}) == digests["today"]
    assert child_digest(descriptions["neox"]) == digests["neox"]
