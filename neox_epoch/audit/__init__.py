"""``neox-epoch audit``: what an existing index cache really feeds the model.

Reads GPT-NeoX and megatron-core (and legacy Megatron-LM) index caches next to the data or in a cache
directory, checks them against the .bin/.idx they were built from, and, given how far training went,
counts how many times each document and token was an input. numpy only: no torch import.

Modules, bottom up: ``findings`` (what a damaged file turns into), ``validate`` (one streamed pass over an
index), ``exposure`` (per-token and per-document counts), ``blends`` (blend pairs and per-source passes),
``audit`` (orchestration), ``report`` (table, JSON, plot, manifest), ``cli``. The cache's files are read by
:mod:`neox_epoch.formats` (``cache_names``, ``npy``, ``cache_descriptions``); which indices training drew is
:mod:`neox_epoch.semantics.consumption`.
"""
