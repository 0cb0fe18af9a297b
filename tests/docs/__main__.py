"""``python -m tests.docs``: every shell block of README.md and docs/*.md, run or skipped and why."""

from tests.docs import table

print(table())
