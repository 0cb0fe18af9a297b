"""Runs: preparing and starting a training run, its records in the bucket, the supervisor that
keeps it alive through preemption (the pure recovery policy beside it), and the executors that
start attempts locally or through the host agent."""
