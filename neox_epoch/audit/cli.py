"""``neox-epoch audit PATH... [--consumed N | --train-iters I --global-batch-size B | --config NEOX.yml...]``

Read-only: it writes nothing but ``--manifest`` and ``--plot`` (atomically). Exit 0 clean, 1 findings,
2 usage errors.
"""

from __future__ import annotations

import argparse
import sys
from typing import IO, TYPE_CHECKING, Any

from neox_epoch.errors import AuditError
from neox_epoch.util.helptext import examples
from neox_epoch.util.output import Input, Output, check_output, write_output

if TYPE_CHECKING:
    from neox_epoch.audit.audit import AuditOptions


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "audit",
        help="audit existing index caches: epochs, samples, staleness, per-token exposure",
        description="Audit GPT-NeoX / megatron-core / legacy Megatron-LM index caches against their .bin/.idx, and "
        "count how often each token and document was an input for a given consumption.",
        **examples(
            "neox-epoch audit data/                                        # every index cache under data/",
            "neox-epoch audit data/ --train-iters 5000 --global-batch-size 512 --json   # and the exposure",
        ),
    )
    p.add_argument(
        "paths", nargs="+", metavar="PATH", help="cache files, directories (searched recursively) or data prefixes"
    )
    p.add_argument("--consumed", type=int, metavar="N", help="train samples consumed (train_iters x global batch size)")
    p.add_argument("--train-iters", type=int, metavar="I", help="iterations trained (with --global-batch-size)")
    p.add_argument("--global-batch-size", type=int, metavar="B", help="samples per iteration")
    p.add_argument(
        "--config",
        nargs="+",
        metavar="NEOX_YML",
        help="NeoX config files: train_iters, train_batch_size, "
        "train_data_paths/train_data_weights (to replay a NeoX blend)",
    )
    p.add_argument(
        "--data-prefix",
        action="append",
        default=[],
        metavar="P",
        help="the .bin/.idx prefix to check against (default: from the cache); repeat to match by base name",
    )
    p.add_argument(
        "--add-extra-token",
        type=int,
        choices=(0, 1),
        default=None,
        help="megatron-core add_extra_token_to_sequence when the cache does not tell (default 1)",
    )
    p.add_argument(
        "--manifest", metavar="FILE", help="write per-document exposure (CSV) with first/last iteration seen"
    )
    p.add_argument("--plot", metavar="FILE.svg", help="the token exposure histograms on one y-scale, as an SVG image")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    p.set_defaults(func=run)


#: the largest sample count the frameworks' int64 sample indices and counters hold
INT64_MAX = (1 << 63) - 1


def _options(args: argparse.Namespace) -> AuditOptions:
    """Consumed samples, global batch size and NeoX blend settings from the options and config files."""
    for name, count in (("--consumed", args.consumed), ("--train-iters", args.train_iters)):
        if count is not None and count < 0:
            raise AuditError(f"{name}: {count} is negative; expected a sample or iteration count >= 0")
    if args.global_batch_size is not None and args.global_batch_size <= 0:
        raise AuditError(f"--global-batch-size: {args.global_batch_size}; expected a positive number of samples")
    iters, gbs = args.train_iters, args.global_batch_size
    blend: dict[str, Any] = {}
    if args.config:
        from neox_epoch.batch.neox import neox_batch
        from neox_epoch.formats import neox_config

        cfg = neox_config.load_neox_configs(list(args.config), check_keys=False)
        iters = neox_config.get_int(cfg, "train_iters") if iters is None else iters
        gbs = neox_batch(cfg).train_batch_size if gbs is None else gbs
        blend = _neox_blend_settings(cfg)
    consumed: int | None = None
    if (args.consumed or 0) > INT64_MAX or (iters or 0) * (gbs or 0) > INT64_MAX:
        raise AuditError(
            f"--consumed: {args.consumed or iters * gbs} samples is more than a 64-bit count holds "
            f"({INT64_MAX}): the frameworks count and index samples in int64; check the number"
        )
    if args.consumed is not None:
        if args.train_iters is not None:
            raise AuditError(
                "--consumed and --train-iters: give one of them (consumed = train_iters x global batch size)"
            )
        consumed = args.consumed
    elif iters is not None:
        if gbs is None:
            raise AuditError("--train-iters needs --global-batch-size (or a --config with train_batch_size)")
        consumed = iters * gbs
    elif args.config:
        raise AuditError("--config: no train_iters in the config files; give --train-iters or --consumed")
    from neox_epoch.audit.audit import AuditOptions

    return AuditOptions(
        consumed=consumed,
        global_batch_size=gbs,
        data_prefixes=tuple(args.data_prefix),
        add_extra_token=args.add_extra_token,
        **blend,
    )


def _neox_blend_settings(cfg: Any) -> dict[str, Any]:
    """The AuditOptions of a NeoX blend from the config's train_data_paths and train_data_weights."""
    from neox_epoch.formats import neox_config

    paths = cfg.values.get("train_data_paths")
    paths = [paths] if isinstance(paths, str) else paths
    if not (isinstance(paths, list) and all(isinstance(path, str) for path in paths)):
        return {}
    weights = cfg.values.get("train_data_weights")
    if weights is not None and not (
        isinstance(weights, list)
        and len(weights) == len(paths)
        and all(isinstance(weight, (int, float)) for weight in weights)
    ):
        raise AuditError(
            f"--config: train_data_weights {weights!r}: expected {len(paths)} numbers, one per train_data_paths entry"
        )
    return {
        "neox_train_paths": tuple(paths),
        "neox_train_weights": tuple(float(weight) for weight in weights or [1.0] * len(paths)),
        "neox_weight_by_num_documents": bool(cfg.values.get("weight_by_num_documents", False)),
        "neox_weighted_sampler_alpha": float(neox_config.get_float(cfg, "weighted_sampler_alpha", 1.0) or 1.0),
    }


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from neox_epoch.audit import report
    from neox_epoch.audit.audit import AuditResult, run_audit
    from neox_epoch.formats.cache_names import discover

    out = out or sys.stdout
    options = _options(args)
    if args.manifest and options.consumed is None:
        raise AuditError(
            "--manifest needs a consumption: --consumed, --train-iters with --global-batch-size, or --config"
        )
    groups = discover(list(args.paths))
    inputs = _inputs(args, groups)
    for written in _outputs(args):
        check_output(written, inputs)  # before the audit: a refused path costs nothing
    if args.plot:
        report.check_plot_format(args.plot)
    progress = report.TtyProgress(enabled=False if args.no_progress else None)
    results: list[AuditResult] = []
    if args.manifest:
        write_output(
            Output(args.manifest, "--manifest", example="manifest.csv"),
            lambda f: results.append(
                run_audit(groups, options, progress, report.ManifestWriter(f, options.global_batch_size))
            ),
            inputs,
        )
    res = results[0] if results else run_audit(groups, options, progress)
    out.write(report.render_json(res) if args.json else report.render_text(res))
    if args.plot:
        report.plot(res, Output(args.plot, "--plot", example="exposure.svg"), inputs)
    return 1 if res.findings else 0


def _outputs(args: argparse.Namespace) -> list[Output]:
    """The files this run writes (--manifest, --plot)."""
    return ([Output(args.manifest, "--manifest", example="manifest.csv")] if args.manifest else []) + (
        [Output(args.plot, "--plot", example="exposure.svg")] if args.plot else []
    )


def _inputs(args: argparse.Namespace, groups: list[Any]) -> list[Input]:
    """Every file the audit reads (never written over by --manifest or --plot)."""
    found: list[Input] = [(path, "an audited path") for path in args.paths]
    found += [(path, "the --config input") for path in args.config or []]
    found += [(p + ext, "--data-prefix data") for p in args.data_prefix for ext in (".idx", ".bin")]
    found += [(path, "an audited cache file") for group in groups for path in group.files.values()]
    return found
