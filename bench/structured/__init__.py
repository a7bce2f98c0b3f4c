"""The structured-output benchmark (`python -m bench.structured`): what JSON schemas and tools
cost, on two vocabulary sizes.

main.py (the run), common.py (prompt, schema, sizes, issues), models.py (the models measured),
decode.py and engine.py (part 1: decode through the server and in the engine), compile.py
(parts 2 and 3: mask and compile time), tools.py (part 4: the tool-call round trip).
"""
