"""Benchmark harness: gramgen vs xgrammar / llguidance (run `python -m bench`)."""
