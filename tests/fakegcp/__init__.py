"""A fake Google Cloud (Cloud TPU v1/v2 and Compute Engine) for tpuctl's tests, served on loopback.

Faithful enough that the real client libraries and ``gcloud`` work against it unmodified; see
docs/fakegcp.md. Start it with ``python -m tests.fakegcp`` or :class:`tests.fakegcp.fixture.FakeGCP`.
"""
