"""The bill: the pure idle policy, the reaper that deletes idle and dead TPUs, and cost accounting."""
