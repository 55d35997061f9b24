"""``neox-epoch report RUN_LOG_DIR``: a run's ``neox_epoch.jsonl`` as a page people look at.

``log`` reads the JSONL the hooks (and the megatron-core counters) write into launches; ``series`` turns them
into per-source pass curves, pass boundaries, resumes with what changed and early stops; ``exposure`` the
token-exposure histograms (estimated from the counters, or exact from ``neox-epoch audit --json``); ``svg``
draws the plots and ``page`` writes one self-contained HTML file; ``cli`` registers the subcommand.
No torch, DeepSpeed or megatron import anywhere here.
"""
