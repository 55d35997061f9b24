"""Framework arithmetic, pinned to numbers observed when running the real frameworks (shared notes, [ran])."""

from __future__ import annotations

import numpy as np
import pytest

from neox_epoch.semantics import blend, greedy_numpy, mcore, neox


def test_neox_split_boundaries_match_real_neox():
    """NeoX's get_train_valid_test_split_ gave [0,969,999,1000] for 1000 docs and [0,194,200,200] for 200."""
    assert neox.split_boundaries("969,30,1", 1000) == [0, 969, 999, 1000]
    assert neox.split_boundaries("969, 30, 1", 200) == [0, 194, 200, 200]
    assert neox.split_boundaries("98/1/1", 100) == [0, 98, 99, 100]


def test_neox_buffer_even_for_one_source():
    """The 1.005: one source asked for 1000 -> 1005; weights 3:1 -> 754 and 252 (real NeoX)."""
    assert neox.normalized_weights_and_num_samples([1.0], 1000)[1] == [1005]
    assert neox.normalized_weights_and_num_samples([3.0, 1.0], 1000)[1] == [754, 252]
    assert neox.normalized_weights_and_num_samples([3.0, 1.0], 1000, buffer=1.0)[1] == [750, 250]


def test_neox_weights_by_num_docs_two_sources_alpha_one():
    """With 2 sources and alpha=1 the formula always gives [0.5, 0.5] (real NeoX)."""
    assert neox.weights_by_num_docs([10, 990], 1.0) == pytest.approx([0.5, 0.5])


def test_neox_epochs_and_len():
    """(E*T - 1) // seq >= N: T=1000, seq=10 -> one epoch gives 99 samples; 100 samples need 2 epochs."""
    b = neox.build(1000, 10, 99)
    assert (b.epochs, b.samples_built, b.length) == (1, 99, 98)
    b = neox.build(1000, 10, 100)
    assert (b.epochs, b.samples_built, b.length) == (2, 199, 198)


def test_mcore_epochs_add_extra_token():
    """E*T >= N*L + a: with a=0 and T % L == 0 one epoch gives T/L samples; with a=1 one fewer."""
    assert mcore.build(1000, 10, 100, add_extra_token=0).epochs == 1
    assert mcore.build(1000, 10, 100, add_extra_token=1).epochs == 2
    assert mcore.build(1000, 10, None).samples_built == 99


def test_mcore_eighty_percent_rule():
    """Final epoch drawn < int(0.8 * per_epoch) samples -> shuffled separately."""
    assert mcore.build(1000, 10, 99 + 70).separate_final_epoch  # 70 < 79
    assert not mcore.build(1000, 10, 99 + 80).separate_final_epoch  # 80 >= 79


def test_mcore_buffer_rules_by_version():
    """<=0.10: ceil(N*w*1.005); 0.11-0.12: ceil(ceil(N*w)*1.005); >=0.13.1: surplus (0 -> the targets)."""
    w = mcore.normalize([1, 2])
    assert mcore.mid_level_sizes(w, 1000, "0.10.0") == ([335, 670], [335, 670])
    assert mcore.mid_level_sizes(w, 1000, "0.12.2") == ([334, 667], [336, 671])
    assert mcore.mid_level_sizes(w, 1000, "0.16.1", surplus=0.0) == ([334, 667], [334, 667])


def test_mcore_split_matrix():
    assert mcore.split_matrix("98,1,1")[2] == pytest.approx((0.99, 1.0))
    assert mcore.split_matrix("100,0,0")[1:] == [None, None]
    assert mcore.split_range((0.98, 0.99), 20) == (20, 20)  # the empty valid split of the notes


@pytest.mark.parametrize("seed", range(20))
def test_greedy_c_equals_python(seed):
    """The C replay and the Python replay of build_blending_indices agree step for step (counts and marks)."""
    rng = np.random.RandomState(seed)
    w = blend.normalize(rng.rand(rng.randint(1, 7)))
    n = int(rng.randint(1, 5000))
    marks = [(i, 1 + int(rng.randint(0, max(1, n // len(w))))) for i in range(len(w))]
    c_counts, c_pos = blend.advance(w, 0, [0] * len(w), n, marks)
    p_counts, p_pos = greedy_numpy.stepped(w, 0, [0] * len(w), n, marks)
    assert c_counts == p_counts and c_pos == p_pos and sum(c_counts) == n


def test_greedy_checkpoints_are_prefixes():
    """Counts at several checkpoints in one pass equal separate runs."""
    w = blend.normalize([3, 1, 2])
    d = blend.greedy_draws(w, [10, 1000, 7])
    assert d.counts == (
        tuple(blend.greedy_counts(w, 10)),
        tuple(blend.greedy_counts(w, 1000)),
        tuple(blend.greedy_counts(w, 7)),
    )
    assert blend.greedy_counts(w, 1000) == [500, 167, 333]


@pytest.mark.parametrize("seed", range(3))
def test_threaded_replay_is_exact(seed, monkeypatch):
    """Runs of >= 8M steps are split over threads from guessed states and stitched where the true trajectory
    meets the guessed one; counts and mark positions must equal the single-thread replay."""
    rng = np.random.RandomState(100 + seed)
    n = int(rng.randint(2, 9))
    w = blend.normalize(rng.randint(1, 1000, n).astype(float) if seed % 2 else rng.rand(n))
    size = int(rng.randint(8_000_000, 9_000_000))
    marks = [(i, int(w[i] * size * f) + 1) for i in range(n) for f in (0.2, 0.6, 0.95)]
    monkeypatch.setenv("NEOX_EPOCH_THREADS", "1")
    one = blend.advance(w, 0, [0] * n, size, marks)
    monkeypatch.setenv("NEOX_EPOCH_THREADS", "3")
    three = blend.advance(w, 0, [0] * n, size, marks)
    assert one == three and sum(one[0]) == size and all(p >= 0 for p in one[1])


def test_many_sources_generic_loop():
    """More than 16 sources take the generic C loop; it must equal the Python replay."""
    w = blend.normalize(np.random.RandomState(7).rand(40))
    assert blend.advance(w, 0, [0] * 40, 20000) == greedy_numpy.stepped(w, 0, [0] * 40, 20000, [])
