"""What a TPU generation delivers, and how often spot capacity is taken back: published figures.

``tpuctl estimate`` turns a job's FLOPs per step into time and dollars with three numbers per
candidate: the generation's peak bf16 FLOP/s (:mod:`provision.catalog.accelerators`, sourced
here), the fraction of that peak a BERT-class training step reaches (model FLOPs utilisation,
MFU), and the interruptions a spot or preemptible TPU suffers. tpuctl's own ledger of past runs
replaces the last two as soon as it has measured them (:mod:`provision.runs.history`); until
then these published figures stand in, and every one says where it comes from and whether it was
measured on that generation or carried over from another (``measured_here``).

How the utilisation figures were derived, with the FLOPs model of
:meth:`jobs.bert.config.BertConfig.train_flops_per_sequence` (6 x parameters x tokens plus
attention's two products, the model every estimate uses, so the model's own error cancels):

- v2: BERT-Base, sequence length 128, batch 128, 1,000,000 steps in about 54 hours on a TPU v2-8
  (Antyukhov, "Pre-training BERT from scratch with cloud TPU", Towards Data Science, 2019-05-09):
  128e6 sequences x 85.9 GFLOP / (54 h x 180 TFLOP/s) = 0.314. The article's batch and step
  count are read from its configuration listing; the 54 hours is its headline figure.
- v3: BERT-Large, batch 512, 1,000,000 steps (90 % at length 128, 10 % at 512) in 81.4 hours on
  16 TPU v3 chips: the baseline row of Table 1 of You et al., "Reducing BERT Pre-Training Time
  from 3 Days to 76 Minutes" (arXiv:1904.00962v1, 2019): 0.308. The same table's 76.19 minutes
  on 1,024 chips (batch 65,536/32,768, 8,599 steps) gives 0.308 too.
- v4, v5e (v5litepod), v5p, v6e: no BERT-Base or BERT-Large throughput on these generations was
  found in a source that states batch, steps and time; the v3 figure is carried over and marked
  so. Google's 63 % "computational efficiency" on v4 (MLPerf Training v1.1 Open, 200B and 480B
  BERT-like models, Google Cloud blog 2021-12) is for matrices hundreds of times larger and is
  not used. Newer generations add FLOP/s faster than memory bandwidth, so a model of BERT-Base's
  size may reach less than this on them: measure it (a short run) before a long one.
"""

from __future__ import annotations

from dataclasses import dataclass

from .accelerators import AcceleratorType


@dataclass(frozen=True)
class Figure:
    """A published number, what it is in a few words, its source and date, and whether it was
    measured where it is used (False: carried over from elsewhere, or an assumption)."""

    value: float
    label: str
    source: str
    date: str
    measured_here: bool = True

    def flag(self) -> str:
        """The figure's basis in a few words: published or assumed, and what."""
        return f"{'published' if self.measured_here else 'assumed'}: {self.label}"

    def to_dict(self) -> dict[str, object]:
        return {"value": self.value, "label": self.label, "source": self.source, "date": self.date,
                "measured_here": self.measured_here}


# Peak bf16 FLOP/s per chip: the value lives in accelerators.GENERATIONS; its source here.
PEAK_SOURCES: dict[str, str] = {
    "v2": "cloud.google.com/tpu/docs/v2 (45 TFLOP/s per chip, 180 per v2-8 board)",
    "v3": "cloud.google.com/tpu/docs/v3 (123 TFLOP/s per chip, bf16; read 2026-11)",
    "v4": "cloud.google.com/tpu/docs/v4 (275 TFLOP/s per chip, bf16; read 2026-11)",
    "v5litepod": "cloud.google.com/tpu/docs/v5e (197 TFLOP/s per chip, bf16)",
    "v5p": "cloud.google.com/tpu/docs/v5p (459 TFLOP/s per chip, bf16)",
    "v6e": "cloud.google.com/tpu/docs/v6e (918 TFLOP/s per chip, bf16)",
}

_ANTYUKHOV = "towardsdatascience.com/pre-training-bert-from-scratch-with-cloud-tpu-6e2f71028379"
_LAMB = "arXiv:1904.00962v1 (You et al., Reducing BERT Pre-Training Time from 3 Days to 76 Minutes), Table 1"
_V2 = "Antyukhov 2019: BERT-Base seq 128 on a v2-8, 1M steps of batch 128 in about 54 h"
_V3 = "You et al. 2019: BERT-Large on 16 v3 chips, 1M steps of batch 512 in 81.4 h"
_CARRIED = "v3's figure carried over, no published BERT throughput found for this generation"

UTILISATION: dict[str, Figure] = {
    "v2": Figure(0.314, _V2, _ANTYUKHOV, "2019-05-09"),
    "v3": Figure(0.308, _V3, _LAMB, "2019-04-01"),
    **{gen: Figure(0.308, _CARRIED, _LAMB, "2019-04-01", measured_here=False)
       for gen in ("v4", "v5litepod", "v5p", "v6e")},
}

# Interruptions per billed hour when the ledger has no history for the zone and type.
PREEMPTIBLE_LIMIT = Figure(
    1 / 24, "preemptible TPUs stop after 24 h at the latest (a floor: no rate is published for earlier ones)",
    "docs.cloud.google.com/tpu/docs/preemptible (TPU Spot VMs have no such limit)", "2026-11")
SPOT_RATE = Figure(
    1 / 24, "1 per 24 h, the preemptible limit as a stand-in: no rate is published for TPU Spot VMs",
    "docs.cloud.google.com/tpu/docs/preemptible", "2026-11", measured_here=False)
# Seconds from a preemption to the first new step when the ledger has measured none: a TPU VM's
# deletion and creation, the host's bootstrap and the job's restore.
RECOVERY_S = Figure(
    600.0, "10 min (a TPU VM's deletion and creation take minutes; tpuctl's local benchmark measures 28 s "
           "of its own share)", "docs/contributing.md (the recovery benchmark)", "2026-11", measured_here=False)


def peak_flops(acc: AcceleratorType) -> float:
    """The slice's peak bf16 FLOP/s."""
    return acc.peak_bf16_flops


def utilisation(acc: AcceleratorType) -> Figure:
    return UTILISATION[acc.generation.name]


def default_preemptions_per_hour(interruptible: bool, spot: bool) -> Figure | None:
    """Expected interruptions per hour of a tier with no history; None on demand."""
    if not interruptible:
        return None
    return SPOT_RATE if spot else PREEMPTIBLE_LIMIT
