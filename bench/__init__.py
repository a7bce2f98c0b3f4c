"""Benchmarks. Each prints one JSON object and compares against a baseline measured in the same
run; none is a test. A benchmark of several modules is a package of its area, run as
`python -m bench.AREA` (apis, coverage, json_layout, serve, state, structured); one of a
single module is a module (fairness, fleet, library, redact, retrieval, soak). `bench.common`
holds what they share: server-sent events, percentiles, machine load, JSON output. Server
processes are started by `llamay.testing.server`, the launcher the tests use too.
"""
