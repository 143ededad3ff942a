"""PromptLoader: the seeded, resumable source of each step's prompts."""

from __future__ import annotations

import logging
import random

from ppokit.data.errors import DataError

logger = logging.getLogger("ppokit.data")


class PromptLoader:
    """Draws `batch_size` records per call to `next_batch()`, epoch after epoch, forever.

    Epoch e visits the records in the order `random.Random(seed + e).shuffle(range(N))` (or in file
    order with shuffle=False). Every batch has exactly `batch_size` records:
    - drop_last=False (default): the last batch of an epoch is topped up with the first records of the
      next epoch's order, so no record is skipped (a dataset smaller than a batch wraps around);
    - drop_last=True: the `N % batch_size` records left at the end of each epoch are skipped.
    `epoch` is the epoch the next record comes from. `state_dict()` / `load_state_dict()` capture the
    position, so a resumed run draws exactly what the uninterrupted run would have drawn.
    `len(loader)` is the number of batches per epoch (ceil(N / batch_size), or floor with drop_last).
    """

    def __init__(
        self,
        records: list[dict],
        batch_size: int,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
    ):
        if not records:
            raise DataError("the prompt loader got no records: the dataset is empty after filtering")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise DataError(f"the prompt batch size must be a positive integer, got {batch_size!r}")
        if drop_last and batch_size > len(records):
            raise DataError(
                f"drop_last=True with batch size {batch_size} but only {len(records)} records: every batch "
                "would be dropped; use drop_last=False or a smaller batch"
            )
        self.records = records
        self.batch_size = batch_size
        self.seed = int(seed)
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.epoch = 0
        self.position = 0  # index into the current epoch's order
        self.batches_drawn = 0
        self._order_epoch: int | None = None
        self._order: list[int] = []
        self.note = repeats_note(len(records), batch_size)
        if self.note:
            logger.warning(self.note)

    def __len__(self) -> int:
        n, b = len(self.records), self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def _epoch_order(self) -> list[int]:
        if self._order_epoch != self.epoch:
            order = list(range(len(self.records)))
            if self.shuffle:
                random.Random(self.seed + self.epoch).shuffle(order)
            self._order, self._order_epoch = order, self.epoch
        return self._order

    def _advance_if_done(self) -> None:
        n = len(self.records)
        if self.position >= n or (self.drop_last and n - self.position < self.batch_size):
            self.epoch += 1
            self.position = 0

    def next_batch(self) -> list[dict]:
        """The next `batch_size` records."""
        self._advance_if_done()
        batch: list[dict] = []
        while len(batch) < self.batch_size:
            order = self._epoch_order()
            take = min(self.batch_size - len(batch), len(self.records) - self.position)
            batch.extend(self.records[i] for i in order[self.position : self.position + take])
            self.position += take
            self._advance_if_done()
        self.batches_drawn += 1
        return batch

    def state_dict(self) -> dict:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "batches_drawn": self.batches_drawn,
            "seed": self.seed,
            "num_records": len(self.records),
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state`; the dataset must have the same number of records as when it was saved."""
        missing = [k for k in ("epoch", "position", "num_records") if k not in state]
        if missing:
            raise DataError(
                f"the prompt-loader state lacks {', '.join(missing)}; it is not a PromptLoader.state_dict()"
            )
        if state["num_records"] != len(self.records):
            raise DataError(
                f"cannot resume the prompt loader: the checkpoint's dataset had {state['num_records']} records "
                f"but this one has {len(self.records)}; resume with the same data (and max_prompt_len)"
            )
        if state.get("batch_size", self.batch_size) != self.batch_size:
            logger.warning(
                "the prompt batch size changed from %s to %s since the checkpoint; prompts continue from the "
                "same position but batches no longer match the uninterrupted run",
                state["batch_size"],
                self.batch_size,
            )
        for key in ("seed", "shuffle", "drop_last"):
            if key in state and state[key] != getattr(self, key):
                raise DataError(
                    f"cannot resume the prompt loader: the checkpoint has {key}={state[key]!r} but this run "
                    f"has {key}={getattr(self, key)!r}"
                )
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self.batches_drawn = int(state.get("batches_drawn", 0))
        self._order_epoch = None


def repeats_note(records: int, batch_size: int) -> str | None:
    """The sentence for a dataset smaller than one draw: how often every step repeats each record (None when a
    draw holds no record twice)."""
    if records >= batch_size:
        return None
    low, high = batch_size // records, -(-batch_size // records)
    times = f"{low} times" if low == high else f"{low} or {high} times"
    return (f"the training data has {records} prompt(s) but each step draws {batch_size}: every step trains on each "
            f"prompt {times} (copies, each with its own samples); add prompts or lower global_batch_size to avoid it")
