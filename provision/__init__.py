"""tpuctl's control plane: CLI, providers, CIDR allocation, staging, supervisor, idle reaper.

Never imports TensorFlow; imports the Google Cloud client libraries only where a command needs them.
"""

__version__ = "0.1.0"
