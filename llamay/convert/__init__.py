"""Model conversion to GGUF without torch.

`convert_bert` turns a BERT-family Hugging Face folder (an embedding model such as
all-MiniLM-L6-v2, or a one-label cross-encoder) into a GGUF file llama.cpp runs.
"""

from llamay.convert.bert import ConvertResult, Dtype, convert_bert

__all__ = ["ConvertResult", "Dtype", "convert_bert"]
