"""Speed per quantisation (`python -m bench.quants`): llamay against llama.cpp's `llama-server`
on Llama-3.2-shaped random-weight models in Q4_0, Q4_K_M, Q5_K_M, Q6_K and Q8_0, with the
memory-bandwidth limit of decoding beside each figure.

main.py (the run), models.py (the models, written and quantised once, cached), bandwidth.py (the
machine's memory read bandwidth).
"""
