"""How many times a run reads its training data, and when that is too many to be training.

A spec whose data is far smaller than the steps x batch it must feed still "trains": the epoch
stream (:mod:`jobs.data`) repeats it, the loss falls and the metrics reach 1.0 on what the model
has memorised. That is a mistake (a one-line corpus, the wrong file) more often than a choice, so
the runner says so, in one line of the job's log (``tpuctl logs``), for every job that knows how
many examples it has. Pure: no TensorFlow.

``MAX_EPOCHS`` is 100: BERT's recipes read their data far fewer times (pretraining about 40
epochs: 1M steps of 256 sequences over 3.3 billion words; fine-tuning 2 to 4: run_classifier.py's
``num_train_epochs`` 3, SQuAD's 2 or 3), and the tiny specs of ``make demo`` about 10, while a
one-line corpus trained as the tiny pretraining spec says is read over a thousand times.
"""

from __future__ import annotations

MAX_EPOCHS = 100


def overuse_warning(examples: int, steps: int, batch: int) -> str | None:
    """One line when ``steps`` of ``batch`` examples read ``examples`` more than
    :data:`MAX_EPOCHS` times (None otherwise, or when the count is unknown: 0)."""
    if examples <= 0 or steps <= 0:
        return None
    epochs = steps * batch / examples
    if epochs <= MAX_EPOCHS:
        return None
    within = max(1, MAX_EPOCHS * examples // batch)
    return (f"warning: {steps} steps of train_batch_size {batch} read each of the {examples} training examples "
            f"{epochs:.0f} times (more than {MAX_EPOCHS} epochs): the model can only memorise them, and its "
            f"metrics say nothing about new data; add data, or lower num_train_steps to {within} or less "
            f"(--set num_train_steps={within})")
