"""What runs on a cluster's host VM: the agent that starts the attempts a supervisor writes to the
bucket, and autodown."""
