"""What runs on the accelerator: the TPUEstimator-style runner and the BERT jobs.

``python -m jobs run SPEC`` is the entry point (docs/jobs.md). The control plane may import
``jobs.spec``, ``jobs.progress``, ``jobs.exitcodes`` and ``jobs.errors``: they need no
TensorFlow. Everything that trains imports TensorFlow, and never the Google Cloud client
libraries (gs:// goes through tf.io.gfile).
"""
