"""``python -m jobs.pretraining``: pretraining data from a text corpus (:mod:`jobs.pretraining.create`)."""

from .create import main

if __name__ == "__main__":
    raise SystemExit(main())
