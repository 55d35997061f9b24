"""Exactly one epoch over a megatron-core GPTDataset blend, trained with DeepSpeed, proven token by token.

Launch (CPU, two ranks over gloo)::

    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 examples/mcore_deepspeed_exact_epoch.py \\
        --ds-config ds.json --out run1

What it does, on every rank:

1. ``deepspeed.initialize`` a tiny GPT-style model (token embedding, one causal transformer block, output
   head; a step takes milliseconds on a CPU) with a torch optimizer object (no FusedAdam JIT). The global
   batch, micro batch and grad accumulation come from the DeepSpeed config (check it first with
   ``neox-epoch check-batch ds.json --num_gpus 2``).
2. ``neox_epoch.mcore.exact_config`` plans exactly ``--epochs`` passes over the train split of every
   source (the installed megatron-core's semantics), giving the verified blend weights, surplus 0.0, the
   builder sizes and ``train_iters``; ``install`` logs the plan on rank 0 and verifies the build.
3. The real ``BlendedMegatronDatasetBuilder`` builds the blend from the bundled demo corpus.
4. Training reads samples like Megatron's pretraining sampler: from ``consumed_samples`` on, in order; each
   micro step takes ``micro * dp`` consecutive samples and rank r takes its ``micro``-sized slice. Each rank
   records every (global sample, source, source sample, checksum of the tokens the model received,
   iteration). ``neox_epoch.mcore.live_counters`` is stepped after every iteration with the consumed
   samples and writes ``<out>/neox_epoch.jsonl`` (counters every ``--log-interval`` iterations, pass starts,
   resume, final) on rank 0.
5. At the end all records are gathered (``all_gather_object``) and rank 0 proves, by walking the real
   datasets' index arrays, that every train-split token of every source was an input token exactly
   ``--epochs`` times (a whole number), except the remainder the plan reports (samples under one global
   batch) and the tokens of the index that form no whole sample (each source's final partial sample); it
   checks every consumed sample's tokens against what the model received and writes ``<out>/report.json``
   and the records (``<out>/neox_epoch_consumed.json``). Exit code 0 only when the proof holds.

Resume: ``--stop-at-iter K`` saves a DeepSpeed checkpoint after iteration K (client state: iteration,
consumed samples, the global batch, the global batch the data was planned with, the counters' state_dict;
the records so far beside it) and exits; a second launch with ``--resume`` loads it, plans and builds the
data with the saved planning batch, restores the counters (which check their state against the built
blend) and continues from sample ``consumed_samples``, also under another DeepSpeed config with another
global batch: it then runs ``(train_samples - consumed_samples) // new_global_batch`` more iterations. The
report covers the union of both launches.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import logging
import os
import sys
import time
import zlib
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 512  # the tiny model sees token % VOCAB; the proof uses the real token ids
RECORDS = "neox_epoch_consumed.json"

log = logging.getLogger("mcore_deepspeed_exact_epoch")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ds-config", required=True, help="DeepSpeed JSON config (train_batch_size, micro batch, ...)")
    p.add_argument("--out", required=True, help="directory for report.json, the index cache and checkpoints")
    p.add_argument(
        "--data-dir",
        default=os.path.join(ROOT, "demo", "data"),
        help="directory of the demo corpus (written if missing)",
    )
    p.add_argument("--sources", default="web,code,books", help="comma-separated demo sources to blend")
    p.add_argument("--split", default="98,1,1", help="megatron-core split string")
    p.add_argument("--seq-length", type=int, default=64, help="tokens per sample")
    p.add_argument("--epochs", type=float, default=1.0, help="passes over every source's train split")
    p.add_argument("--seed", type=int, default=1234, help="data shuffling and model init seed")
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate")
    p.add_argument("--log-interval", type=int, default=10, help="iterations between live counter records")
    p.add_argument("--stop-at-iter", type=int, help="save a checkpoint after this iteration and exit")
    p.add_argument("--resume", action="store_true", help="load the latest checkpoint in <out>/checkpoints")
    p.add_argument("--expected-world", type=int, help="fail before building anything unless WORLD_SIZE is this")
    p.add_argument(
        "--with-shm-op",
        action="store_true",
        help="let DeepSpeed JIT-compile its CPU shared-memory op (skipped by default: 15+ s, unused)",
    )
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--local_rank", type=int, help="set by the deepspeed launcher")
    return p.parse_args(argv)


# ----------------------------------------------------------------------------------------------------------
# the model


def tiny_gpt(seq_length: int, width: int = 32) -> Any:
    """Token + position embedding, one causal pre-norm transformer block, output head (~44k parameters)."""
    import torch

    class TinyGPT(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = torch.nn.Embedding(VOCAB, width)
            self.pos = torch.nn.Embedding(seq_length, width)
            self.block = torch.nn.TransformerEncoderLayer(
                width, nhead=2, dim_feedforward=2 * width, dropout=0.0, batch_first=True, norm_first=True
            )
            self.head = torch.nn.Linear(width, VOCAB)
            self.register_buffer(
                "mask", torch.nn.Transformer.generate_square_subsequent_mask(seq_length), persistent=False
            )

        def forward(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            x = self.tok(tokens % VOCAB) + self.pos.weight[: tokens.shape[1]]
            n = tokens.shape[1]
            mask: torch.Tensor = self.mask  # type: ignore[assignment]
            x = self.block(x, src_mask=mask[:n, :n], is_causal=True)
            logits = self.head(x)
            return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), (labels % VOCAB).reshape(-1))

    return TinyGPT()


# ----------------------------------------------------------------------------------------------------------
# megatron-core data


def null_tokenizer() -> Any:
    """megatron-core's NullTokenizer (module path by version)."""
    try:
        from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

        return NullTokenizer(vocab_size=65536)
    except ImportError:
        from megatron.training.tokenizer.tokenizer import _NullTokenizer

        return _NullTokenizer(65535)


def dataset_config(args: argparse.Namespace, prefixes: list[str]) -> Any:
    """The GPTDatasetConfig a megatron-core user would write (equal weights, default surplus)."""
    import dataclasses

    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig

    kw: dict[str, Any] = dict(
        random_seed=args.seed,
        sequence_length=args.seq_length,
        blend=(prefixes, [1.0] * len(prefixes)),
        split=args.split,
        path_to_cache=os.path.join(args.out, "index_cache"),
        tokenizer=null_tokenizer(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
    )
    names = {f.name for f in dataclasses.fields(GPTDatasetConfig)}
    return GPTDatasetConfig(**{k: v for k, v in kw.items() if k in names})


def source_of(train: Any, n: int) -> tuple[int, int]:
    """(source, sample within the source's GPTDataset) of global train sample ``n``."""
    if hasattr(train, "dataset_index"):
        return int(train.dataset_index[n]), int(train.dataset_sample_index[n])
    return 0, n


def gpt_datasets(train: Any) -> list[Any]:
    return list(train.datasets) if hasattr(train, "dataset_index") else [train]


def sample_spans(ds: Any, i: int, seq_length: int) -> list[tuple[int, int, int]]:
    """(document, start, stop) of the ``seq_length`` input tokens of sample ``i``, from the index arrays."""
    j = int(ds.shuffle_index[i])
    d, off = (int(x) for x in ds.sample_index[j])
    lengths = ds.dataset.sequence_lengths
    spans, need = [], seq_length
    while need > 0 and d < len(ds.document_index):
        doc = int(ds.document_index[d])
        take = min(int(lengths[doc]) - off, need)
        if take > 0:
            spans.append((doc, off, off + take))
            need -= take
        d, off = d + 1, 0
    return spans


def checksum(tokens: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(tokens, dtype=np.int64).tobytes())


# ----------------------------------------------------------------------------------------------------------
# the proof (rank 0)


def prove(train: Any, setup: Any, records: list[list[int]], seq_length: int, passes: int) -> dict[str, Any]:
    """Count every train-split token's exposure from the consumed records; compare with the plan.

    With ``passes`` whole passes no token may be an input more than ``passes`` times, and the exposure
    missing to ``passes`` per token must be exactly the plan's remainder (samples under one global batch)
    plus the tokens of the passes' index that form no whole sample (fewer than ``seq_length + 1`` per
    source). For one pass that is "every token once, except the remainder and each source's final partial
    sample, which are never seen"."""
    plan = setup.plan
    n = setup.train_samples
    ids = sorted(r[0] for r in records)
    distinct = len(set(ids))
    consumed_block = ids == list(range(n))
    datasets = gpt_datasets(train)
    train_plans = [s for s in plan.sources if s.split == "train"]
    per_source: list[dict[str, Any]] = []
    mismatches = 0
    for k, (ds, sp) in enumerate(zip(datasets, train_plans)):
        lengths = ds.dataset.sequence_lengths
        counts = {int(d): np.zeros(int(lengths[int(d)]), dtype=np.int32) for d in ds.indices}
        mine = [r for r in records if r[1] == k]
        for _, _, i, crc, _ in mine:
            spans = sample_spans(ds, i, seq_length)
            toks = np.concatenate([np.asarray(ds.dataset.get(doc, offset=a, length=b - a)) for doc, a, b in spans])
            if checksum(toks) != crc:
                mismatches += 1
            for doc, a, b in spans:
                counts[doc][a:b] += 1
        allc = np.concatenate(list(counts.values())) if counts else np.zeros(0, dtype=np.int32)
        tokens = int(allc.size)
        partial = tokens - sp.samples_per_epoch * seq_length  # the final partial sample (and the extra token)
        # the passes' index holds (passes * tokens - 1) // seq_length samples (one more than passes * samples per
        # epoch when the epochs' leftovers add up to a sample); the plan draws them all but its remainder
        whole = sp.samples_built if sp.epochs_built == passes else passes * sp.samples_per_epoch
        short = whole - sp.samples_drawn  # samples of this source in the plan's remainder
        leftover = passes * tokens - whole * seq_length  # tokens of the passes' index in no sample
        per_source.append(
            {
                "name": sp.name,
                "train_tokens": tokens,
                "planned_train_tokens": sp.tokens,
                "documents": len(counts),
                "samples_per_epoch": sp.samples_per_epoch,
                "epochs_built": sp.epochs_built,
                "target_samples": sp.target_samples,
                "samples_drawn_planned": sp.samples_drawn,
                "samples_consumed": len(mine),
                "distinct_samples_consumed": len({r[2] for r in mine}),
                "tokens_seen_once": int((allc == 1).sum()),
                "tokens_seen_more_than_once": int((allc > 1).sum()),
                "tokens_never_seen": int((allc == 0).sum()),
                "tokens_seen_passes_times": int((allc == passes).sum()),
                "tokens_seen_more_than_passes": int((allc > passes).sum()),
                "shortfall": int(passes * tokens - int(allc.sum())),
                "shortfall_expected": short * seq_length + leftover,
                "leftover_tokens": leftover,
                "remainder_samples": short,
                "remainder_tokens": short * seq_length,
                "final_partial_tokens": partial,
                "never_seen_expected": short * seq_length + partial,
                "max_times_seen": int(allc.max()) if allc.size else 0,
            }
        )
    total = sum(s["train_tokens"] for s in per_source)
    partial = sum(s["final_partial_tokens"] for s in per_source)
    leftover = sum(s["leftover_tokens"] for s in per_source)
    shortfall = sum(s["shortfall"] for s in per_source)
    checks = {
        "consumed_exactly_samples_0_to_train_samples": consumed_block,
        "no_sample_twice": distinct == len(ids),
        "draws_equal_plan": all(s["samples_consumed"] == s["samples_drawn_planned"] for s in per_source),
        "no_token_more_than_passes": all(s["tokens_seen_more_than_passes"] == 0 for s in per_source),
        "shortfall_equals_remainder_plus_leftover": shortfall == plan.remainder_tokens + leftover,
        "per_source_shortfall_as_expected": all(s["shortfall"] == s["shortfall_expected"] for s in per_source),
        "train_tokens_equal_plan": all(s["train_tokens"] == s["planned_train_tokens"] for s in per_source),
        "model_tokens_match_dataset": mismatches == 0,
    }
    digest = hashlib.sha256(json.dumps(sorted(r[:4] for r in records)).encode()).hexdigest()
    return {
        "consumed": {"samples": len(ids), "distinct": distinct, "duplicates": len(ids) - distinct, "expected": n},
        "consumed_digest": digest,
        "tokens": {
            "train_tokens": total,
            "passes": passes,
            "seen_once": sum(s["tokens_seen_once"] for s in per_source),
            "seen_more_than_once": sum(s["tokens_seen_more_than_once"] for s in per_source),
            "never_seen": sum(s["tokens_never_seen"] for s in per_source),
            "seen_passes_times": sum(s["tokens_seen_passes_times"] for s in per_source),
            "seen_more_than_passes": sum(s["tokens_seen_more_than_passes"] for s in per_source),
            "shortfall": shortfall,
            "leftover_tokens": leftover,
            "remainder_tokens": plan.remainder_tokens,
            "final_partial_tokens": partial,
            "seen_once_expected": total - plan.remainder_tokens - partial,
        },
        "sources": per_source,
        "cross_check": {"samples_checked": len(records), "mismatches": mismatches},
        "checks": checks,
        "exact_passes": all(checks.values()),
        "exactly_one_pass": passes == 1 and all(checks.values()),
    }


# ----------------------------------------------------------------------------------------------------------
# training


def micro_batches(start: int, stop: int, micro: int, dp: int, rank: int) -> Any:
    """Megatron's pretraining sampler: consecutive blocks of ``micro * dp`` samples, rank r's slice of each."""
    for first in range(start, stop, micro * dp):
        yield list(range(first + rank * micro, first + (rank + 1) * micro))


def model_checksum(engine: Any) -> float:
    import torch

    with torch.no_grad():
        return float(sum(p.double().abs().sum().item() for p in engine.module.parameters()))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stdout)
    logging.getLogger("megatron").setLevel(logging.WARNING)
    os.makedirs(args.out, exist_ok=True)
    if args.expected_world is not None:
        from neox_epoch.batch.guard import check_world

        check_world(args.expected_world)

    import deepspeed
    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)  # ranks share the CPU cores: oversubscription costs more than it gives

    if not args.with_shm_op:  # the CPU shm op JIT-compiles for 15+ s and plays no part here (gloo)
        setattr(importlib.import_module("deepspeed.comm.torch"), "build_shm_op", lambda: None)  # noqa: B010
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank != 0:
        logging.getLogger().setLevel(logging.WARNING)

    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset

    from neox_epoch.demo import write_demo_corpus
    from neox_epoch.mcore import exact_config, install, live_counters

    if rank == 0:
        write_demo_corpus(args.data_dir)
    dist.barrier()
    names = [s.strip() for s in args.sources.split(",") if s.strip()]
    prefixes = [os.path.join(args.data_dir, f"{name}_text_document") for name in names]

    torch.manual_seed(args.seed)
    model = tiny_gpt(args.seq_length)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=args.ds_config)
    gbs = int(engine.train_batch_size())
    micro = int(engine.train_micro_batch_size_per_gpu())
    gas = int(engine.gradient_accumulation_steps())
    assert gbs == micro * gas * world

    # Resume, megatron-core's way: the position in the data is the consumed-sample count, not iteration x batch.
    # The data is planned (and built) with the global batch of the first launch, saved in the checkpoint, so a
    # resume with another global batch reads the same dataset from consumed_samples on.
    ckpt_dir = os.path.join(args.out, "checkpoints")
    start_iter, consumed, plan_gbs = 0, 0, gbs
    client: dict[str, Any] = {}
    records_before: list[list[int]] = []
    launches: list[dict[str, int]] = []
    if args.resume:
        path, loaded = engine.load_checkpoint(ckpt_dir)
        if path is None:
            raise SystemExit(f"--resume: no checkpoint in {ckpt_dir}")
        client = dict(loaded)
        start_iter, consumed = int(client["iteration"]), int(client["consumed_samples"])
        plan_gbs = int(client["plan_global_batch_size"])
        if rank == 0:
            with open(
                os.path.join(path if os.path.isdir(path) else os.path.dirname(path), RECORDS), encoding="utf-8"
            ) as f:
                saved = json.load(f)
            records_before, launches = saved["records"], saved["launches"]
        log.info(
            "resumed from %s at iteration %d (consumed samples %d; global batch %d, was %d)",
            path,
            start_iter,
            consumed,
            gbs,
            int(client["global_batch_size"]),
        )

    setup = exact_config(dataset_config(args, prefixes), args.epochs, plan_gbs)
    uninstall = install(setup, log)  # logs the plan (rank 0); verifies the build below
    train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, list(setup.sizes), lambda: True, setup.config).build()
    uninstall()
    counters = live_counters(train, setup, log_dir=args.out, log_interval=args.log_interval)
    if args.resume:
        counters.load_state_dict(client["neox_epoch_counters"])  # refuses a dataset built differently

    # iterations of the current global batch that fit in the planned samples (Megatron's sampler drops a
    # last partial batch); with the first launch's batch that is setup.train_iters
    end_iter = start_iter + (setup.train_samples - consumed) // gbs
    stop_iter = end_iter if args.stop_at_iter is None else min(args.stop_at_iter, end_iter)
    start_consumed = consumed
    mine: list[list[int]] = []
    batches = micro_batches(consumed, consumed + (stop_iter - start_iter) * gbs, micro, world, rank)
    loss_value = float("nan")
    t0 = time.time()
    for iteration in range(start_iter + 1, stop_iter + 1):
        for _ in range(gas):
            ids = next(batches)
            samples = [train[n] for n in ids]
            tokens = torch.stack([s["tokens"] for s in samples])
            labels = torch.stack([s["labels"] for s in samples])
            for n, tok in zip(ids, tokens):
                src, i = source_of(train, n)
                mine.append([n, src, i, checksum(tok.numpy()), iteration])
            loss = engine(tokens, labels)
            engine.backward(loss)
            engine.step()
            loss_value = float(loss.item())
        consumed += gbs
        counters.step(iteration, consumed)
    train_seconds = time.time() - t0
    counters.final()
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, mine)
    records = records_before + [r for part in gathered for r in part]
    launches = launches + [
        {
            "start_iter": start_iter,
            "end_iter": stop_iter,
            "samples": sum(len(part) for part in gathered),
            "global_batch_size": gbs,
            "start_consumed": start_consumed,
            "end_consumed": consumed,
        }
    ]
    code = 0
    if stop_iter < end_iter:  # stop mid-run: checkpoint + counter + what was consumed so far
        tag = f"iter_{stop_iter}"
        engine.save_checkpoint(
            ckpt_dir,
            tag=tag,
            client_state={
                "iteration": stop_iter,
                "consumed_samples": consumed,
                "global_batch_size": gbs,
                "plan_global_batch_size": plan_gbs,
                "neox_epoch_counters": counters.state_dict(),
            },
        )
        if rank == 0:
            with open(os.path.join(ckpt_dir, tag, RECORDS), "w", encoding="utf-8") as f:
                json.dump({"records": records, "launches": launches}, f)
            log.info("stopped after iteration %d of %d: checkpoint %s", stop_iter, end_iter, tag)
    elif rank == 0:
        passes = int(args.epochs) if float(args.epochs).is_integer() else 0  # the token proof is for whole passes
        proof = prove(train, setup, records, args.seq_length, passes)
        plan = setup.plan
        report = {
            "megatron_core_version": setup.version,
            "deepspeed_version": deepspeed.__version__,
            "world_size": world,
            "global_batch_size": gbs,
            "plan_global_batch_size": plan_gbs,
            "micro_batch_size": micro,
            "gradient_accumulation_steps": gas,
            "seq_length": args.seq_length,
            "split": args.split,
            "sources": names,
            "epochs": args.epochs,
            "plan": {
                "train_iters": setup.train_iters,
                "train_samples": setup.train_samples,
                "sizes": list(setup.sizes),
                "remainder_samples": plan.remainder_samples,
                "remainder_tokens": plan.remainder_tokens,
                "weights": plan.settings.get("weights"),
                "targets": plan.settings.get("targets"),
            },
            "launches": launches,
            **proof,
            "final_loss": loss_value,
            "model_checksum": model_checksum(engine),
            "train_seconds_this_launch": round(train_seconds, 3),
            "seconds_this_launch": round(time.time() - started, 3),
        }
        with open(os.path.join(args.out, "report.json"), "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
        with open(os.path.join(args.out, RECORDS), "w", encoding="utf-8") as f:
            json.dump(
                {"records": sorted(records), "fields": ["sample", "source", "source_sample", "crc32", "iteration"]}, f
            )
        t = proof["tokens"]
        log.info(
            "proof: %s train tokens, %s seen %s time(s), %s more, shortfall %s (= remainder %s + tokens in "
            "no sample %s): exact passes: %s",
            t["train_tokens"],
            t["seen_passes_times"],
            passes,
            t["seen_more_than_passes"],
            t["shortfall"],
            t["remainder_tokens"],
            t["leftover_tokens"],
            proof["exact_passes"],
        )
        code = 0 if proof["exact_passes"] else 3
    flag = torch.tensor([code])
    dist.broadcast(flag, 0)
    dist.barrier()
    dist.destroy_process_group()
    return int(flag.item())


if __name__ == "__main__":
    exit_code = main()
    # The work is done and the process group destroyed. Leave without running the interpreter's teardown:
    # on CPU a rank aborts in C++ static destructors there now and then ("terminate called without an
    # active exception", return code -6 / launcher 250), which would fail a run that succeeded.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
