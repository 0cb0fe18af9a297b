"""Buckets: Google Cloud Storage (gcs.py) and bucket directories for the local provider (local.py)."""
