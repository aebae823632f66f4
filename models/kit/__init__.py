"""The family kit: what every autoregressive family's runner stands on.

- :mod:`models.kit.tables`: per-slot device tables (sampling settings, penalty
  history, random keys and counters, a family's own per-slot state) with a scratch
  row for padding, written in batches;
- :mod:`models.kit.sampler`: the device sampler over those tables: the processors
  (repetition penalty, temperature, top-k, top-p, masks) in the order a family's
  reference applies them, and counter-based per-row draws;
- :mod:`models.kit.graphed`: a batched step over int64 rows replayed from CUDA graphs
  captured per batch bucket at start-up, padding rows on the scratch slot;
- :mod:`models.kit.results`: a step's ``StepResult`` built from arrays.

A family writes its model hooks on top (its prompt, one step, what a step emits,
when a unit ends); docs/adding-a-model.md walks through one.
"""
