"""The options of pretraining data creation (create_pretraining_data.py's flags) and their rule.

A leaf module (no tokenizer, no TensorFlow, not even lazily): ``tpuctl data`` checks the options
with it in its own process, before it stages a corpus or starts the job side, and names them as
its command line spells them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class DataOptions:
    """One data creation's options: create_pretraining_data.py's flags, names and defaults."""

    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    dupe_factor: int = 10
    short_seq_prob: float = 0.1
    do_whole_word_mask: bool = False
    random_seed: int = 12345

    @property
    def most_predictions(self) -> int:
        """The most positions a sequence of ``max_seq_length`` tokens gets masked (the budget of
        ``jobs.pretraining.sampling.mask_tokens``): a larger ``max_predictions_per_seq`` only pads."""
        return max(1, round(self.max_seq_length * self.masked_lm_prob))

    def problem(self, flag: Callable[[str], str] = lambda name: f"--{name}") -> tuple[str, str] | None:
        """The first option out of range as (cause, fix), naming the option and a value that
        works, or None. ``flag`` spells an option as the command line that took it
        (``--max_seq_length`` here, ``--max-seq-length`` in ``tpuctl data``)."""
        n, p = self.max_seq_length, self.masked_lm_prob
        if n < 5:
            return (f"{flag('max_seq_length')} {n} is too short for [CLS] A [SEP] B [SEP]",
                    f"use {flag('max_seq_length')} 5 or more (BERT's is 128)")
        if not 0.0 < p < 1.0:
            return (f"{flag('masked_lm_prob')} {p} is not a fraction between 0 and 1",
                    f"use {flag('masked_lm_prob')} 0.15 (BERT's)")
        if self.dupe_factor < 1:
            return (f"{flag('dupe_factor')} {self.dupe_factor} makes no examples",
                    f"use {flag('dupe_factor')} 1 or more (BERT's is 10)")
        fits = self.most_predictions
        why = (f"at most {fits} of {n} tokens {'is' if fits == 1 else 'are'} masked at "
               f"{flag('masked_lm_prob')} {p}")
        if self.max_predictions_per_seq < 1:
            return (f"{flag('max_predictions_per_seq')} {self.max_predictions_per_seq} masks nothing",
                    f"use {flag('max_predictions_per_seq')} {fits} ({why})")
        if self.max_predictions_per_seq > n:
            return ((f"{flag('max_predictions_per_seq')} {self.max_predictions_per_seq} is more than "
                    f"{flag('max_seq_length')} {n} allows"),
                    f"use {flag('max_predictions_per_seq')} {fits} ({why}) or a longer {flag('max_seq_length')}")
        return None
