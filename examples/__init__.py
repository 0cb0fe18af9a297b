"""User code written against tpuctl's public contracts, run by the tests and the docs.

Each directory is what a user brings: a module of plain functions (``job: keras``,
docs/own-code.md) and a spec. They import only the public job API (``jobs.keras.inputs``,
``jobs.errors``, and for BERT ``jobs.bert``'s ``load_encoder`` and tokenizer): an import-linter
contract in pyproject.toml says so.
"""
