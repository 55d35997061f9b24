"""The parts of scripts/json_snapshot.py (run that script; these modules are imported by it)."""
