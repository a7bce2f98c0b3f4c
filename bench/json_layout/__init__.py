"""The JSON-layout benchmark (`python -m bench.json_layout`): compact vs indented vs free JSON on
the default model, which layout extracts better.

main.py (the run), cases.py (the extraction cases).
"""
