"""``tpuctl stage``: rsync-style staging of BERT checkpoints and data into buckets and back.

- :mod:`.ignore`, :mod:`.plan`, :mod:`.options`: pure decisions (excludes; what to send, skip and
  delete given two listings; option parsing), tested without I/O.
- :mod:`.endpoints`: SRC/DEST text to a bucket (or directory) and prefix.
- :mod:`.executor`: runs transfer jobs on one bounded thread pool, retrying checksum mismatches.
- :mod:`.run`: the whole stage: check, list, compare, plan, execute, summarize.
"""
