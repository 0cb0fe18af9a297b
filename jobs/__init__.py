"""What runs on the accelerator: the TPUEstimator-style runner, its public job API, the BERT
jobs and ``job: keras`` (a user's own Keras model, docs/own-code.md).

``python -m jobs run SPEC`` is the entry point (docs/jobs.md). The control plane may import
``jobs.spec``, ``jobs.usercode`` (a ``job: keras`` module read without running it),
``jobs.runner.progress``, ``jobs.exitcodes`` and ``jobs.errors``: they need no TensorFlow. Everything
that trains imports TensorFlow, and never the Google Cloud client libraries (gs:// goes through
tf.io.gfile).
"""
