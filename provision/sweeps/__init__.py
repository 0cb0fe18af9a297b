"""Sweeps: hyperparameter search over a pool of (preemptible) TPUs, one supervised run per trial.

Pure decisions (``spec``: is the sweep spec valid; ``budget``: may another trial start; ``pool``:
which TPU it runs on; ``view``: which trial is best) beside the edges that act: ``store`` (the
sweep's directory in the bucket), ``study`` (Optuna, its journal in that directory), ``create``
(read and check the spec, write the sweep) and ``controller`` (the loop).
"""
