"""Constrained output: JSON schema, GBNF, regex and Lark grammars enforced while sampling.

`Grammar` is the validated, model-independent constraint (build it at request
validation time; every constructor raises GrammarError for what cannot be enforced, or,
for a non-strict JSON schema, lists it in `Grammar.unenforced`). After generation,
`llamay.grammar.validate.validate(schema, value)` reports what a value violates.
`Constraint` is one request's matcher over the model's llguidance tokenizer, compiled
through that tokenizer's `CompileCache` (`Model.compile_cache`): per step,
`fill_mask` -> mask the logits -> sample -> `consume`.
"""

from .constraint import CompileCache, Compiled, Constraint, allocate_mask, byte_compile_cache
from .grammar import Grammar, GrammarKind
from .runtime import byte_tokenizer
from .schema import SchemaError

__all__ = [
    "Grammar",
    "GrammarKind",
    "SchemaError",
    "Constraint",
    "Compiled",
    "allocate_mask",
    "CompileCache",
    "byte_tokenizer",
    "byte_compile_cache",
]
