"""Speculative decoding (`python -m bench.speculative`): llamay with speculation against llamay
without it and against llama-server's own lookup speculation, same run, same prompts.

main.py (the run), texts.py (the note, passage, file and question), workloads.py (them as
request bodies per model), servers.py (the servers and what is measured on each), client.py
(one streamed request, llamay's draft counters), compare.py (ratios, targets, identity).
"""
