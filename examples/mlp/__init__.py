"""A small Keras classifier (not BERT) trained by the runner: docs/own-code.md."""
