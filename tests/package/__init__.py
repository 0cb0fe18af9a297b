"""The installed package: tests/package/test_installed.py (make test-package)."""
