"""BERT token classification (named entities, CoNLL input) through ``job: keras``."""
