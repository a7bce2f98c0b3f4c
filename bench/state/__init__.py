"""The state benchmark (`python -m bench.state`): what the prefix cache and server-held contexts
buy, each against a baseline measured in the same run.

main.py (the run), common.py (sizes, fitted prompts, servers, one streamed chat), prefix.py,
contexts.py, tickets.py and tenants.py (the measurements; `python -m bench.state.tenants` runs
the last alone).
"""
