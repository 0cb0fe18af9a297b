"""``progress_pattern:``: a ``job: command`` program's own output lines as progress.

Most training scripts already print their progress (nanoGPT: ``iter 100: loss 2.3456, time
12.34ms, mfu 1.23%``) and write nothing for tpuctl. A spec may name a regular expression with
named groups; worker 0's agent matches it against each line of the program's output, and a line
that matches is one progress line, as if the program had appended it to
``$TPUCTL_PROGRESS_FILE`` (:mod:`provision.runs.reports` folds both the same way):

- ``step`` (required): the step, a whole number;
- ``loss``, ``examples_per_sec``, ``steps_per_sec``: those numbers;
  ``checkpoint_step``, ``num_train_steps``: those whole numbers;
- any other group: a metric of that name.

Python's ``re`` backtracks and cannot be interrupted, so a pattern is bounded where it is checked
and where it runs: at most :data:`MAX_PATTERN` characters, no repeat of varying length and no
alternatives inside a repeat (``(a+)+``, ``(ab|a)*`` and the like take exponential time on a line
that almost matches), and only lines of at most
:data:`MAX_LINE` characters are matched (longer ones are progress bars or dumps, not a report).
Standard library only: the control plane checks the spec with it before anything is created.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Any

with warnings.catch_warnings():   # the parser re itself uses, to see a pattern's structure: public
    warnings.simplefilter("ignore", DeprecationWarning)     # names, deprecated since 3.11, still there
    import sre_constants as _sre_constants
    import sre_parse as _sre_parser

MAX_PATTERN = 500
MAX_LINE = 1024
INT_KEYS = ("step", "checkpoint_step", "num_train_steps")
FLOAT_KEYS = ("loss", "examples_per_sec", "steps_per_sec")
EXAMPLE = r"iter (?P<step>\d+): loss (?P<loss>[\d.]+)"
_REPEATS = {_sre_constants.MAX_REPEAT, _sre_constants.MIN_REPEAT, getattr(_sre_constants, "POSSESSIVE_REPEAT", None)}


def problem(pattern: Any) -> str | None:
    """Why ``pattern`` cannot be a ``progress_pattern``, in one line that names the fix; None if it can."""
    fix = f"e.g. progress_pattern: '{EXAMPLE}'"
    if not isinstance(pattern, str) or not pattern:
        return f"progress_pattern must be a regular expression with a named group step; {fix}"
    if len(pattern) > MAX_PATTERN:
        return f"progress_pattern has {len(pattern)} characters; keep it to {MAX_PATTERN} ({fix})"
    try:
        compiled = re.compile(pattern)
        tree = _sre_parser.parse(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        return f"progress_pattern is not a regular expression ({exc}); {fix}"
    if "step" not in compiled.groupindex:
        return f"progress_pattern has no named group step: write (?P<step>\\d+) where the step is; {fix}"
    if _nested_repeat(tree, inside=False):
        return ("progress_pattern repeats a group that itself repeats or has alternatives (like (a+)+ or "
                "(ab|a)*), which can take exponential time on one line; repeat single characters or classes "
                f"instead; {fix}")
    return None


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The checked pattern, compiled (ValueError with :func:`problem`'s words if it is not one)."""
    why = problem(pattern)
    if why:
        raise ValueError(why)
    return re.compile(pattern)


def metric_groups(pattern: Any) -> list[str]:
    """The metrics a pattern reports: its named groups other than the progress keys ([] for none)."""
    if not isinstance(pattern, str) or problem(pattern):
        return []
    return [g for g in re.compile(pattern).groupindex if g not in INT_KEYS + FLOAT_KEYS]


def match(compiled: re.Pattern[str], line: str) -> dict[str, Any] | None:
    """The progress line ``line`` says, as a ``$TPUCTL_PROGRESS_FILE`` object, or None when it says
    none (no match, too long, or a ``step`` that is not a whole number)."""
    if len(line) > MAX_LINE:
        return None
    found = compiled.search(line)
    if found is None:
        return None
    groups = {k: v for k, v in found.groupdict().items() if v is not None}
    step = _whole(groups.pop("step", None))
    if step is None:
        return None
    item: dict[str, Any] = {"step": step}
    metrics: dict[str, float] = {}
    for name, text in groups.items():
        if name in INT_KEYS:
            value: float | int | None = _whole(text)
        else:
            value = _number(text)
        if value is None:
            continue
        if name in INT_KEYS or name in FLOAT_KEYS:
            item[name] = value
        else:
            metrics[name] = float(value)
    if metrics:
        item["metrics"] = metrics
    return item


def _whole(text: str | None) -> int | None:
    if text is None or not re.fullmatch(r"\s*[0-9]{1,16}\s*", text):
        return None
    return int(text)


def _number(text: str) -> float | None:
    cleaned = text.strip().rstrip("%")
    if len(cleaned) > 40:
        return None
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _nested_repeat(tree: Any, *, inside: bool) -> bool:
    """Whether a repeat holds a repeat of varying length or a choice of alternatives, anywhere in
    ``tree``: the two ways one line can be matched in exponentially many ways."""
    for op, arg in tree:
        if op in _REPEATS:
            low, high, body = arg
            if inside and low != high:
                return True
            if _nested_repeat(body, inside=inside or high is _sre_constants.MAXREPEAT or high > 1):
                return True
            continue
        if op == _sre_constants.BRANCH and inside:
            return True
        if any(_nested_repeat(sub, inside=inside) for sub in _children(op, arg)):
            return True
    return False


def _children(op: Any, arg: Any) -> list[Any]:
    """The subpatterns of one node of a parsed pattern (groups, alternatives, lookarounds)."""
    if op == _sre_constants.SUBPATTERN:
        return [arg[-1]]
    if op == _sre_constants.BRANCH:
        return list(arg[1])
    if op in (_sre_constants.ASSERT, _sre_constants.ASSERT_NOT):
        return [arg[1]]
    if op == getattr(_sre_constants, "ATOMIC_GROUP", None):
        return [arg]
    if op == _sre_constants.GROUPREF_EXISTS:
        return [b for b in arg[1:] if b is not None]
    return []
