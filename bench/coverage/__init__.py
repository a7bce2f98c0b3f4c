"""The schema-coverage benchmark (`python -m bench.coverage`): how much of real-world JSON
Schema llamay's compiler takes, and whether what it takes is right.

main.py (the run and its tally), measure.py (one schema compiled and checked, in a worker),
pool.py (the workers, with a time budget each), corpus.py (`python -m bench.coverage.corpus`
rebuilds the corpus in bench/data).
"""
