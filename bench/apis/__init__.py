"""The API-route benchmark (`python -m bench.apis`): one chat workload through the OpenAI,
Anthropic and Ollama routes, and model switch times.

main.py (the run), common.py (sizes, limits, one streamed request's timing), clients.py (the
workload as each route's request, raw or by the official client), routes.py (part 1), switch.py
(part 2).
"""
