"""The cases of scripts/neox_golden.py: named, train_epochs, refused and randomized."""

from __future__ import annotations

from typing import Any

import numpy as np

from golden.calls import CaseSpec
from golden.common import HEADLINE_CASE
from golden.corpora import CorpusSpec

CORPUS_A = CorpusSpec("corpus_a", 11, 1000, 1, 300)
CORPUS_B = CorpusSpec("corpus_b", 12, 200, 1, 300)
CORPUS_VALID = CorpusSpec("corpus_valid", 13, 40, 1, 300)
CORPUS_TEST = CorpusSpec("corpus_test", 14, 20, 1, 300)
CORPUS_C0 = CorpusSpec("corpus_c0", 21, 400, 1, 300)
CORPUS_C1 = CorpusSpec("corpus_c1", 22, 60, 1, 300)
CORPUS_C2 = CorpusSpec("corpus_c2", 23, 250, 20, 120)


def one_epoch_iters(spec: CorpusSpec, seq_length: int, tbs: int, documents: tuple[int, int] | None = None) -> int:
    """train_iters of exactly one pass: S = (T-1)//seq_length samples, len = S-1, iters = (S-1)//tbs."""
    from neox_epoch.formats.corpus import random_documents

    docs = random_documents(spec.seed, spec.num_documents, spec.min_len, spec.max_len)
    a, b = documents if documents is not None else (0, spec.num_documents)
    tokens = sum(len(d) for d in docs[a:b])
    samples = (tokens - 1) // seq_length
    return (samples - 1) // tbs


def named_cases() -> list[CaseSpec]:
    """Cases a (data_path + split), b (one path, 'exactly one epoch'), c (three weighted paths)."""
    return [
        CaseSpec(
            name="a1_split_969_30_1",
            description="data_path + split 969,30,1 on a 1000-document corpus",
            mode="data_path",
            data_path=CORPUS_A,
            split="969,30,1",
            seq_length=64,
            train_iters=250,
            train_batch_size=8,
            eval_interval=100,
            eval_iters=5,
        ),
        CaseSpec(
            name="a2_split_98_1_1",
            description="data_path + split 98,1,1 on a 200-document corpus",
            mode="data_path",
            data_path=CORPUS_B,
            split="98,1,1",
            seq_length=32,
            train_iters=300,
            train_batch_size=4,
            eval_interval=50,
            eval_iters=3,
        ),
        CaseSpec(
            name="a3_split_one_epoch",
            description="data_path + split 969,30,1, train_iters = one pass over the train split (no 1.005 factor)",
            mode="data_path",
            data_path=CORPUS_A,
            split="969,30,1",
            seq_length=64,
            train_iters=one_epoch_iters(CORPUS_A, 64, 8, (0, 969)),
            train_batch_size=8,
            eval_interval=1000,
            eval_iters=2,
        ),
        CaseSpec(
            name=HEADLINE_CASE,
            description="train_data_paths with one path, train_iters = (S-1)//tbs: exactly one epoch asked",
            mode="train_data_paths",
            train=[CORPUS_A],
            valid=[CORPUS_VALID],
            test=[CORPUS_TEST],
            seq_length=64,
            train_iters=one_epoch_iters(CORPUS_A, 64, 8),
            train_batch_size=8,
            eval_interval=1000,
            eval_iters=2,
            copy_index_files=True,
            full_blend_exposure=True,
        ),
        CaseSpec(
            name="c1_three_paths_3_1_2",
            description="train_data_paths with three sources, weights 3:1:2",
            mode="train_data_paths",
            train=[CORPUS_C0, CORPUS_C1, CORPUS_C2],
            valid=[CORPUS_VALID],
            test=[CORPUS_TEST],
            train_weights=[3.0, 1.0, 2.0],
            seq_length=32,
            train_iters=300,
            train_batch_size=8,
            eval_interval=100,
            eval_iters=2,
            copy_index_files=True,
            full_blend_exposure=True,
        ),
        CaseSpec(
            name="c2_three_paths_by_num_docs",
            description="three sources, weight_by_num_documents with weighted_sampler_alpha 0.3",
            mode="train_data_paths",
            train=[CORPUS_C0, CORPUS_C1, CORPUS_C2],
            valid=[CORPUS_VALID],
            test=[CORPUS_TEST],
            train_weights=[3.0, 1.0, 2.0],
            weight_by_num_documents=True,
            weighted_sampler_alpha=0.3,
            seq_length=32,
            train_iters=300,
            train_batch_size=8,
            eval_interval=100,
            eval_iters=2,
            copy_index_files=True,
            full_blend_exposure=True,
        ),
    ]


def train_epochs_cases() -> list[CaseSpec]:
    """NeoX's train_epochs mode (train_iters None): data_path + split and two train paths without weights,
    train_epochs 1 and 3, gradient_accumulation_steps 1 and 2, data-parallel sizes 1 to 4."""
    return [
        CaseSpec(
            name="e1_split_epochs1_dp4",
            description="train_epochs 1, data_path + split 90,5,5, micro 2 * gas 1 * dp 4 = 8",
            mode="data_path",
            data_path=CORPUS_A,
            split="90,5,5",
            seq_length=64,
            train_iters=None,
            train_epochs=1,
            train_batch_size=8,
            micro_batch=2,
            gradient_accumulation_steps=1,
            data_parallel_size=4,
            eval_interval=100,
            eval_iters=5,
        ),
        CaseSpec(
            name="e2_split_epochs3_gas2",
            description="train_epochs 3, data_path + split 90,5,5, micro 3 * gas 2 * dp 2 = 12",
            mode="data_path",
            data_path=CORPUS_B,
            split="90,5,5",
            seq_length=32,
            train_iters=None,
            train_epochs=3,
            train_batch_size=12,
            micro_batch=3,
            gradient_accumulation_steps=2,
            data_parallel_size=2,
            eval_interval=50,
            eval_iters=3,
        ),
        CaseSpec(
            name="e3_two_paths_epochs1_gas2",
            description="train_epochs 1, two train paths, train_data_weights not given, micro 5 * gas 2 * dp 1 = 10",
            mode="train_data_paths",
            train=[CORPUS_C0, CORPUS_C1],
            valid=[CORPUS_VALID],
            test=[CORPUS_TEST],
            pass_weights=False,
            seq_length=32,
            train_iters=None,
            train_epochs=1,
            train_batch_size=10,
            micro_batch=5,
            gradient_accumulation_steps=2,
            data_parallel_size=1,
            eval_interval=100,
            eval_iters=2,
        ),
        CaseSpec(
            name="e4_two_paths_epochs3_dp3",
            description="train_epochs 3, two train paths, train_data_weights not given, micro 2 * gas 1 * dp 3 = 6",
            mode="train_data_paths",
            train=[CORPUS_C0, CORPUS_C2],
            valid=[CORPUS_VALID],
            test=[CORPUS_TEST],
            pass_weights=False,
            seq_length=32,
            train_iters=None,
            train_epochs=3,
            train_batch_size=6,
            micro_batch=2,
            gradient_accumulation_steps=1,
            data_parallel_size=3,
            eval_interval=100,
            eval_iters=2,
        ),
    ]


def refused_cases() -> list[CaseSpec]:
    """train_epochs configurations NeoX's validate_train_epochs refuses before building anything."""
    paths: dict[str, Any] = dict(
        mode="train_data_paths",
        train=[CORPUS_C0, CORPUS_C1],
        valid=[CORPUS_VALID],
        test=[CORPUS_TEST],
        seq_length=32,
        train_iters=None,
        train_epochs=1,
        train_batch_size=8,
        micro_batch=4,
        gradient_accumulation_steps=2,
        eval_interval=100,
        eval_iters=2,
    )
    return [
        CaseSpec(
            name="r1_epochs_weights_3_1",
            description="train_epochs with train_data_weights 3:1",
            train_weights=[3.0, 1.0],
            **paths,
        ),
        CaseSpec(
            name="r2_epochs_weights_2_2",
            description="train_epochs with equal weights that are not 1.0",
            train_weights=[2.0, 2.0],
            **paths,
        ),
        CaseSpec(
            name="r3_epochs_by_num_documents",
            description="train_epochs with weight_by_num_documents",
            weight_by_num_documents=True,
            weighted_sampler_alpha=0.3,
            pass_weights=False,
            **paths,
        ),
        CaseSpec(
            name="r4_epochs_and_iters",
            description="train_epochs and train_iters both given",
            mode="data_path",
            data_path=CORPUS_A,
            split="969,30,1",
            seq_length=64,
            train_iters=100,
            train_epochs=1,
            train_batch_size=8,
            micro_batch=8,
            eval_interval=100,
            eval_iters=2,
        ),
    ]


SPLITS = ["969,30,1", "98,1,1", "90,5,5", "80/10/10", "949,50,1", "1"]


def random_corpus(rng: np.random.RandomState, label: str, lo: int = 20, hi: int = 400) -> CorpusSpec:
    """A random corpus spec: lo..hi documents, lengths within 1..300."""
    min_len = int(rng.randint(1, 60))
    return CorpusSpec(
        label, int(rng.randint(0, 2**31 - 1)), int(rng.randint(lo, hi + 1)), min_len, int(rng.randint(min_len, 301))
    )


def random_cases(count: int) -> list[CaseSpec]:
    """Randomized small cases (both modes) with their parameters drawn from fixed seeds."""
    cases = []
    for k in range(count):
        rng = np.random.RandomState(1000 + k)
        mode = "data_path" if k % 2 == 0 else "train_data_paths"
        seq = int(rng.randint(8, 129))
        tbs = int(rng.choice([1, 2, 4, 8, 16]))
        eval_interval = int(rng.randint(10, 300))
        eval_iters = int(rng.randint(1, 6))
        factor = float(rng.uniform(0.1, 2.5))
        name = f"d{k}_random_{'split' if mode == 'data_path' else 'paths'}"
        if mode == "data_path":
            corpus = random_corpus(rng, f"{name}_corpus")
            mean_len = (corpus.min_len + corpus.max_len) / 2
            iters = max(1, int(factor * corpus.num_documents * mean_len / seq / tbs))
            cases.append(
                CaseSpec(
                    name=name,
                    description=f"random data_path case (seed {1000 + k}), ~{factor:.2f} epochs asked",
                    mode=mode,
                    data_path=corpus,
                    split=SPLITS[int(rng.randint(len(SPLITS)))],
                    seq_length=seq,
                    train_iters=iters,
                    train_batch_size=tbs,
                    eval_interval=eval_interval,
                    eval_iters=eval_iters,
                    copy_corpora=False,
                )
            )
        else:
            n_src = int(rng.randint(1, 4))
            train = [random_corpus(rng, f"{name}_train{i}") for i in range(n_src)]
            weights = [float(w) for w in rng.randint(1, 6, size=n_src)]
            by_docs = bool(rng.randint(2)) and n_src > 1
            alpha = float(rng.choice([0.3, 0.5, 1.0]))
            tokens = sum(c.num_documents * (c.min_len + c.max_len) / 2 for c in train)
            iters = max(1, int(factor * tokens / seq / tbs))
            cases.append(
                CaseSpec(
                    name=name,
                    description=f"random train_data_paths case (seed {1000 + k}), ~{factor:.2f} epochs asked",
                    mode=mode,
                    train=train,
                    valid=[random_corpus(rng, f"{name}_valid", 5, 40)],
                    test=[random_corpus(rng, f"{name}_test", 5, 40)],
                    train_weights=weights,
                    weight_by_num_documents=by_docs,
                    weighted_sampler_alpha=alpha if by_docs else 1.0,
                    seq_length=seq,
                    train_iters=iters,
                    train_batch_size=tbs,
                    eval_interval=eval_interval,
                    eval_iters=eval_iters,
                    copy_corpora=False,
                )
            )
    return cases
