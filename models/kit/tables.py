"""Per-slot device tables: one row per slot, plus a scratch row for padding.

A runner keeps what each slot needs on the device between steps (sampling settings,
the ids its repetition penalty covers, its random key and draw counter, a family's
own state such as a last hidden state) in tables indexed by slot, so a step gathers
a batch's rows with one index instead of walking contexts on the host. Row ``slots``
is scratch: the padding rows of a graph replay read and write it, and nothing a
caller relies on lives there.

Writes come in batches (a step's admissions together): :meth:`SlotTables.store`
uploads each dtype's values once and copies them into place; :meth:`fill` writes one
value into many rows without a host value crossing to the device (a Python scalar
written into a device tensor makes the host wait for the device).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from models.upload import upload


@dataclass(frozen=True)
class Column:
    """One table: its dtype, the shape of one row (``()`` for a scalar per slot), and
    the value every row starts with (and the scratch row keeps)."""

    dtype: torch.dtype
    shape: tuple[int, ...] = ()
    initial: float | int | bool = 0


class SlotTables:
    def __init__(self, slots: int, device: torch.device, columns: Mapping[str, Column]) -> None:
        self.slots = slots
        self.device = device
        self.columns = dict(columns)
        self._tables = {
            name: torch.full(
                (slots + 1, *column.shape), column.initial, dtype=column.dtype, device=device
            )
            for name, column in self.columns.items()
        }

    @property
    def scratch(self) -> int:
        """The padding row."""
        return self.slots

    def __getitem__(self, name: str) -> torch.Tensor:
        """The whole table ``[slots + 1, *shape]`` (index it with a batch's slots)."""
        return self._tables[name]

    def slot_index(self, slots: Sequence[int] | np.ndarray | torch.Tensor) -> torch.Tensor:
        if isinstance(slots, torch.Tensor):
            return slots
        return upload(np.asarray(slots, np.int64), self.device)

    def store(
        self,
        slots: Sequence[int] | np.ndarray | torch.Tensor,
        values: Mapping[str, Sequence[float] | Sequence[int] | Sequence[bool] | np.ndarray],
    ) -> None:
        """Write row ``i`` of each column's ``values`` into slot ``slots[i]``: one upload
        per dtype, then one copy per column (scalar columns only)."""
        index = self.slot_index(slots)
        by_dtype: dict[torch.dtype, list[str]] = {}
        for name in values:
            column = self.columns[name]
            if column.shape:
                raise ValueError(f"{name}: store takes scalar columns; write rows with copy")
            by_dtype.setdefault(column.dtype, []).append(name)
        for dtype, names in by_dtype.items():
            host = np.stack([np.asarray(values[n]) for n in names], axis=1)
            packed = upload(host, self.device, dtype)
            for i, name in enumerate(names):
                self._tables[name].index_copy_(0, index, packed[:, i])

    def fill(
        self, slots: Sequence[int] | np.ndarray | torch.Tensor, name: str, value: float
    ) -> None:
        """Set every listed slot's row of ``name`` to ``value`` (whole rows)."""
        self._tables[name].index_fill_(0, self.slot_index(slots), value)

    def reset(self, slots: Sequence[int] | np.ndarray | torch.Tensor, *names: str) -> None:
        """Rows of ``names`` back to their columns' initial values."""
        index = self.slot_index(slots)
        for name in names:
            self._tables[name].index_fill_(0, index, self.columns[name].initial)
