"""Benchmarks: a synthetic node generator and the poll-cycle benchmark (``python -m
bench.cycle``). They print ratios against a floor measured in the same run."""
