"""``python -m jobs.keras.export REQUEST``: the SavedModel of a ``job: keras`` run on the JAX
backend, written by the TensorFlow backend.

Keras reads its backend once per process, so the JAX run hands the trained values to this
process (:func:`jobs.keras.job.in_tensorflow`: ``KERAS_BACKEND=tensorflow``, no GPU), which
builds the user's model and writes the SavedModel as a TensorFlow run does
(:meth:`jobs.keras.job.KerasJob.write_saved_model`): a graph of TensorFlow's own, serving a
batch of any size on any platform. Why not Keras' ``ExportArchive`` from JAX:
:meth:`jobs.keras.job.KerasJob.export_in_tensorflow`. A mistake in the user's code is one error
line, exit 2.
"""

from __future__ import annotations

import pickle
import sys

from ..errors import ConfigError, report


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    with open(args[0], "rb") as f:
        request = pickle.load(f)   # a jobs.keras.job.ExportRequest
    from . import user as user_lib
    from .job import KerasJob

    try:
        job = KerasJob(request.spec, request.search)
        job.user = user_lib.load(request.spec.module, request.search)
        job.splits, job.model_split = request.splits, request.model_split
        job.write_saved_model(request.values, request.path)
    except ConfigError as exc:
        report(exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
