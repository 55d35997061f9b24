"""The data fingerprint (neox_epoch.formats.fingerprint): read from real .bin/.idx files, compared field by field."""

from __future__ import annotations

import json
import os

import pytest

from neox_epoch.errors import ConfigError, IndexFileError
from neox_epoch.formats.fingerprint import DataFingerprint, SourceFingerprint, compare, fingerprint, message
from neox_epoch.plan.stages import StagesConfig

PLAN = StagesConfig.from_mapping(
    {"stages": [{"name": "s1", "passes": {"a": 1}}, {"name": "s2", "passes": {"a": 0.5, "b": 1}}]}
).to_mapping()


def test_source_numbers(fixed_corpus):
    """3 documents of 3, 5, 7 uint16 tokens: .idx = 34 header + 3*4 sizes + 3*8 pointers + 4*8 doc indices."""
    source = SourceFingerprint.of(fixed_corpus("a", [3, 5, 7]))
    assert source == SourceFingerprint(name="a", idx_bytes=102, documents=3, tokens=15, dtype="uint16")


def test_same_data_no_difference(fixed_corpus):
    prefixes = [fixed_corpus("a", [3, 5, 7]), fixed_corpus("b", [4])]
    old = fingerprint(prefixes, seq_length=8, seed=1234, stages=PLAN)
    assert compare(old, fingerprint(prefixes, seq_length=8, seed=1234, stages=PLAN)) == []
    assert message([]) == ""
    # stored as JSON in a checkpoint and read back
    assert DataFingerprint.from_dict(json.loads(json.dumps(old.to_dict()))) == old


def test_changed_corpus_named_in_one_line(tmp_path, fixed_corpus):
    """A source rewritten with one more document (+4 size, +8 pointer, +8 document index bytes): the line
    names the source and each changed count."""
    a = fixed_corpus("a", [3, 5, 7])
    old = fingerprint([a], seq_length=8, seed=1)
    fixed_corpus("a", [3, 5, 7, 2])
    diffs = compare(old, fingerprint([a], seq_length=8, seed=1))
    assert [str(d) for d in diffs] == [
        "source 'a' idx_bytes 102 -> 122",
        "source 'a' documents 3 -> 4",
        "source 'a' tokens 15 -> 17",
    ]
    assert message(diffs) == (
        "the data changed since the checkpoint: source 'a' idx_bytes 102 -> 122; source 'a' documents 3 -> 4; "
        "source 'a' tokens 15 -> 17"
    )


def test_settings_sources_and_stages(fixed_corpus):
    a, b, c = fixed_corpus("a", [3]), fixed_corpus("b", [4]), fixed_corpus("c", [5])
    old = fingerprint([a, b], seq_length=8, seed=1, stages=PLAN)
    later = StagesConfig.from_mapping(
        {"stages": [{"name": "s1", "passes": {"a": 1}}, {"name": "s2", "passes": {"a": 1, "b": 1}}]}
    ).to_mapping()
    new = fingerprint([b, c], seq_length=16, seed=2, stages=later)
    assert [str(d) for d in compare(old, new)] == [
        "source 'a' present -> removed",
        "source 'c' absent -> added",
        "seq_length 8 -> 16",
        "seed 1 -> 2",
        "stage 2 {'name': 's2', 'passes': {'a': 0.5, 'b': 1.0}} -> {'name': 's2', 'passes': {'a': 1.0, 'b': 1.0}}",
    ]
    assert [str(d) for d in compare(old, fingerprint([b, a], seq_length=8, seed=1, stages=PLAN))] == [
        "source order a,b -> b,a"
    ]


def test_moved_corpus_same_identity(tmp_path, fixed_corpus):
    """The name is the prefix's last path component: the same files elsewhere compare equal."""
    a = fixed_corpus("a", [3, 5])
    old = fingerprint([a], 8, 1)
    os.makedirs(tmp_path / "moved")
    for ext in (".bin", ".idx"):
        os.rename(a + ext, tmp_path / "moved" / ("a" + ext))
    assert compare(old, fingerprint([str(tmp_path / "moved" / "a.idx")], 8, 1)) == []


def test_refusals(tmp_path, fixed_corpus):
    with pytest.raises(IndexFileError):
        fingerprint([str(tmp_path / "missing")], 8, 1)
    a = fixed_corpus("a", [3])
    os.makedirs(tmp_path / "x")
    other = str(tmp_path / "x" / "a")
    for ext in (".bin", ".idx"):
        with open(a + ext, "rb") as f, open(other + ext, "wb") as g:
            g.write(f.read())
    with pytest.raises(ConfigError, match="two sources are named 'a'"):
        fingerprint([a, other], 8, 1)
    with pytest.raises(ConfigError, match="format None"):
        DataFingerprint.from_dict({"sources": []})
