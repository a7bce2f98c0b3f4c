"""The serving benchmark (`python -m bench.serve`): llamay against llama.cpp's own
`llama-server`, same model and workload.

main.py (the run), load.py (prompts and one streamed completion), phases.py (the
measurements, each over one running server), llama_server.py (`python -m
bench.serve.llama_server` builds the baseline server once), ceiling.py (`python -m
bench.serve.ceiling`: batched decode in llama.cpp itself, no server).
"""
