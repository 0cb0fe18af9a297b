"""Pretraining data: a text corpus -> masked-LM / next-sentence TFRecord shards, without a TPU.

- :mod:`jobs.pretraining.create`: the command line (``python -m jobs.pretraining``) and the exact
  single stream, byte for byte create_pretraining_data.py's output;
- :mod:`jobs.pretraining.parallel`: the same sampling in bounded-memory parts over all cores, and
  :mod:`jobs.pretraining.beam` the same parts as an Apache Beam pipeline (options:
  :mod:`jobs.pretraining.beam_options`);
- :mod:`jobs.pretraining.sampling`: the original's sampling rules for one document,
  :mod:`jobs.pretraining.data_options` its flags and their rule;
- :mod:`jobs.pretraining.corpus_parts`, :mod:`jobs.pretraining.corpus_inputs`: where the parts of a
  corpus start and what each input file is; :mod:`jobs.pretraining.records`: a TFRecord writer;
  :mod:`jobs.pretraining.fast_tokenization`: the Rust tokenizer when it gives the same tokens.

Only the exact stream's writer and ``tokenizers`` need more than Python: the control plane
(``tpuctl data``) checks options and inputs with these modules in its own process. BERT's
tokenizer (:mod:`jobs.bert.tokenization`) is the one shared piece; the model is never imported.
"""
