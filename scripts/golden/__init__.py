"""The parts of scripts/neox_golden.py (run that script; these modules are imported by it)."""
