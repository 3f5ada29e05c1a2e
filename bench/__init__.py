"""Benchmarks of the reference gateway and overlay validator, run with ``python -m bench``.

Each benchmark prints a table with its targets and PASS/MISS, and contributes one section to the
JSON results file, so a run can be compared with an earlier one. Targets are reported, never
asserted: a slow machine gets a MISS in the output, not a failing test.
"""
