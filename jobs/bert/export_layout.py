"""What a fine-tune's ``<model_dir>/saved_model`` holds besides the SavedModel, by name.

Kept apart from :mod:`jobs.bert.serving` (which imports TensorFlow to write the export) so that
``python -m jobs.bert.predict`` can say "not a SavedModel" from these names alone, in a fraction
of a second, before TensorFlow loads.
"""

from __future__ import annotations

SAVED_MODEL_DIR = "saved_model"
MODEL_INFO = "tpuctl_model.json"          # kind, casing, sequence length: how to tokenize for it
CLASSIFIER, SQUAD = "classifier", "squad"
