"""The VisualDL side of a run: one folder per run, tags named as in metrics.jsonl, no copies, no flat lines.

What VisualDL 2.5.3 does (read in its own code), and what ppokit does about it:
  - It opens on the first tab of the server's list (server/api.py ``get_component_tabs``: a Python set, so a
    different tab from one server start to the next, often the model-graph upload page) unless
    ``visualdl --component_tabs scalar text hyper_parameters`` fixes it; nothing in a record file can choose
    it, so the README's command and the run summary carry the flag.
  - It shows one run per folder of ``--logdir`` (the newest record file in it): each run writes its own
    subfolder, named after the run; a second run of that name gets ``NAME-2`` rather than mixing curves.
  - Its scalar page groups tags by the text before the first "/", sorts the groups by name (case-insensitive)
    and opens only the first (ChartPage.js: ``opened: index === 0``); the others are one click each. So the
    reward and evaluation charts share one group whose name sorts first, ``0 reward and eval``
    (``0 reward and eval/reward/mean``, ``0 reward and eval/eval/accuracy``): the first screen shows them without
    typing. Every other tag is its metrics.jsonl key, unchanged (``actor/kl``); the part after the group name is
    always the key, so a chart is found under the name the files use.
  - A hyper-parameter trial is named by its folder as the server reached it from ``--logdir``
    (server/lib.py ``get_hparam_list``): ``vdl_log/grpo`` with the README's relative ``--logdir vdl_log``, a long
    path the table cuts with an absolute one; the first hyper-parameter, ``run``, is the run's own short name.
  - It keeps 10 texts per tag (the server's reservoir): sample tags hold 10 logged steps each
    (``samples/1 · from step 11`` ...), so every logged step stays visible.

Series that would only repeat another chart or draw a flat line are held back while they do (``held_back``):
copies of another metric (one reward function = ``reward/mean``, ``returns/mean`` = ``advantages/mean`` without
a critic, ``eval/pass@1`` = ``eval/accuracy``), metrics constant by construction in common set-ups (clip
fractions and approx. KL with one update per rollout, skipped groups without skip_group, the eval set's size)
and timings of phases that did not run (under a millisecond). Once one differs it is written with its whole
history. The report says once which series VisualDL left out and why (``left_out``).
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

# Write order within a step: the groups a person reads first, then the rest by name.
GROUP_ORDER = ("reward", "eval", "response_length", "actor", "critic", "kl", "timing")
# The server keeps this many texts per tag (visualdl.server.data_manager.DEFAULT_PLUGIN_MAXSIZE["text"]).
TEXTS_PER_TAG = 10
SAMPLES_SHOWN = 4
REWARD_STATS = ("reward/mean", "reward/std", "reward/min", "reward/max", "reward/skipped_groups")
_EVAL_ALIAS = re.compile(r"^eval/(.*?)(pass|maj|mean)@1$")
NOT_FUNCTIONS = REWARD_STATS + ("reward/raw_mean",)
# Constant while the set-up makes them so: held back until a value differs from the first.
# Constant while the set-up makes them so, (the value, why); None: whatever the first value was.
CONSTANT_BY_CONSTRUCTION = {
    "actor/clipfrac": (0.0, "one update per rollout step: the policy that sampled is the one updated (ratio 1)"),
    "actor/clipfrac_lower": (0.0, "one update per rollout step (ratio 1: the dual clip never bites)"),
    "actor/clipfrac_upper": (0.0, "one update per rollout step (ratio 1)"),
    "actor/approx_kl": (0.0, "one update per rollout step (ratio 1)"),
    "reward/skipped_groups": (0.0, "no group is skipped unless reward_on_error is skip_group and scoring fails"),
    "eval/prompts": (None, "the size of the eval set, the same at every evaluation"),
    "cpu/update_threads": (None, "the thread count set when the run started, unchanged"),
    "cpu/rollout_threads": (None, "the decoding thread count, fixed for the run"),
    "response_length/max": (None, "the same at every step (answers cut at max_dec_len)"),
    "reward/max": (None, "the same at every step (the best answer of every step scored alike)"),
    "reward/min": (None, "the same at every step (the worst answer of every step scored alike)"),
}
HEADLINE_GROUP = "0 reward and eval"  # sorts before every letter: VisualDL's first, opened group
HEADLINE_OF = ("reward", "eval")
PHASE_NOT_RUN_S = 1e-3  # a timing under a millisecond: the phase did not run (e.g. no reference model)


def visualdl_tag(name: str) -> str:
    """The VisualDL tag of a metric: ``0 reward and eval/<key>`` for reward/* and eval/*, else its metrics.jsonl
    key, unchanged."""
    return f"{HEADLINE_GROUP}/{name}" if name.partition("/")[0] in HEADLINE_OF else name


def tag_rank(name: str) -> tuple[int, int]:
    """Write order within a step: reward/mean and reward/std first (the first charts of the first group)."""
    firsts = ("reward/mean", "reward/std")
    head = name.partition("/")[0]
    group = GROUP_ORDER.index(head) if head in GROUP_ORDER else len(GROUP_ORDER)
    return group, firsts.index(name) if name in firsts else len(firsts)


def copy_of(name: str, metrics: dict) -> str | None:
    """The metric ``name`` may repeat in meaning: the one reward function's ``reward/<function>`` and
    ``reward/raw_mean`` are ``reward/mean`` (unless shaping, normalising or clipping changes it);
    ``returns/mean`` is ``advantages/mean`` without a critic (returns = advantages + 0);
    ``eval/pass@1`` is ``eval/accuracy``, and with one sample per prompt so are ``eval/maj@1`` and ``mean@1``.
    Such a metric is written to VisualDL only once its value differs (then with its whole history)."""
    if name == "reward/raw_mean":
        return "reward/mean"
    if name == "returns/mean":
        return "advantages/mean"
    if name.startswith("reward/") and name not in NOT_FUNCTIONS:
        functions = [k for k in metrics if k.startswith("reward/") and k not in NOT_FUNCTIONS]
        return "reward/mean" if functions == [name] else None
    match = _EVAL_ALIAS.match(name)
    return f"eval/{match.group(1)}accuracy" if match else None


def held_back(name: str, value: float, metrics: dict, first: float | None) -> bool:
    """Whether this value of ``name`` adds nothing to VisualDL yet: a copy of ``copy_of``'s original, a
    constant-by-construction metric still at its first value ``first``, or a phase that did not run."""
    original = copy_of(name, metrics)
    if original in metrics and _same(value, metrics[original]):
        return True
    if name in CONSTANT_BY_CONSTRUCTION:
        expected = CONSTANT_BY_CONSTRUCTION[name][0]
        if expected is not None:
            return _same(value, expected)
        return first is None or _same(value, first)
    return name.startswith("timing/") and name.endswith("_s") and abs(value) < PHASE_NOT_RUN_S


def left_out(rows: list[dict]) -> dict[str, str]:
    """{metric: why} for the metrics of ``rows`` (metrics.jsonl) that VisualDL never got: see ``held_back``."""
    firsts: dict[str, float] = {}
    shown: set[str] = set()
    for row in rows:
        values = {k: float(v) for k, v in row.items() if k not in ("step", "time") and _finite(v)}
        for name, value in values.items():
            if not held_back(name, value, values, firsts.get(name)):
                shown.add(name)
            firsts.setdefault(name, value)
    out = {}
    for name in sorted(set(firsts) - shown):
        probe = next(r for r in rows if _finite(r.get(name)))
        original = copy_of(name, probe)
        if original is not None and original in probe:
            out[name] = f"the same as {original} at every step"
        elif name in CONSTANT_BY_CONSTRUCTION:
            out[name] = f"constant {firsts[name]:g}: {CONSTANT_BY_CONSTRUCTION[name][1]}"
        else:
            out[name] = "under a millisecond at every step: the phase did not run (its work is done elsewhere)"
    return out


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def run_folder(logging_dir: Path, name: str) -> Path:
    """``logging_dir/NAME``, or ``NAME-2``, ``NAME-3`` ... when an earlier run already wrote records there."""
    parts = [re.sub(r"[^A-Za-z0-9._@+-]+", "_", p) for p in str(name).split("/") if p not in ("", ".", "..")]
    base = "/".join(parts) or "run"
    candidate, n = logging_dir / base, 1
    while candidate.is_dir() and any("vdlrecords" in p.name for p in candidate.iterdir()):
        n += 1
        candidate = logging_dir / f"{base}-{n}"
    return candidate


class VisualDLBackend:
    """Scalars, sample texts and hparams through ``visualdl.LogWriter`` into one new record file of ``run_dir``."""

    name = "visualdl"

    def __init__(self, run_dir: Path, display_name: str = ""):
        from visualdl import LogWriter

        self.display_name = display_name or run_dir.name
        # VisualDL shows the newest file of a directory (by name); nanoseconds keep a resumed run's
        # file after its predecessor even within the same second.
        self.writer = LogWriter(
            logdir=str(run_dir), file_name=f"vdlrecords.{time.time_ns():019d}.log", display_name=display_name
        )
        self.file = self.writer.file_name
        self._written: set[str] = set()  # VisualDL tags that have records in this file
        self._held: dict[str, list[tuple[int, float]]] = {}  # series held back (yet): their history
        self._firsts: dict[str, float] = {}  # each series' first value (constant-by-construction checks)
        self._text_steps: list[int] = []  # steps with sample texts, in order (for the 10-per-tag blocks)
        self._pending_hparams: tuple[dict, list[str]] | None = None

    def scalars(self, step: int, metrics: dict[str, float], skip: frozenset[str] = frozenset()) -> None:
        """Write a step's metrics (those whose tag is in ``skip`` only serve as the originals of copies)."""
        for name in sorted(metrics, key=tag_rank):
            tag, value = visualdl_tag(name), metrics[name]
            if tag in skip:
                continue
            first = self._firsts.get(name)  # None at a series' first value
            self._firsts.setdefault(name, value)
            if tag not in self._written and held_back(name, value, metrics, first):
                self._held.setdefault(name, []).append((step, value))
                continue
            for held_step, held_value in self._held.pop(name, []):  # it differs now: its history first
                self.writer.add_scalar(tag=tag, value=held_value, step=held_step)
            self.writer.add_scalar(tag=tag, value=value, step=step)
            self._written.add(tag)
        if self._pending_hparams is not None:  # after the first scalars: the record file starts with the charts
            self._write_hparams(*self._pending_hparams)

    def replay(self, rows: list[dict]) -> None:
        """Send a resumed run's kept metrics rows for the tags the carried records lack (copies held back)."""
        carried = frozenset(self._written)
        for row in rows:
            values = {k: float(v) for k, v in row.items() if k not in ("step", "time") and _finite(v)}
            if isinstance(row.get("step"), int):
                self.scalars(row["step"], values, skip=carried)

    def samples(self, step: int, lines: list[str]) -> None:
        """One tag per sample and block of 10 logged steps: ``samples/1 · from step 1``, ``samples/1 · from step 11``."""
        if step not in self._text_steps:
            self._text_steps.append(step)
        index = self._text_steps.index(step)
        first = self._text_steps[index - index % TEXTS_PER_TAG]
        for i, line in enumerate(lines[:SAMPLES_SHOWN], start=1):
            self.writer.add_text(tag=f"samples/{i} · from step {first}", text_string=line, step=step)

    def text(self, step: int, tag: str, text: str) -> None:
        self.writer.add_text(tag=tag, text_string=text, step=step)

    def hparams(self, hparams: dict[str, int | float | str], metric_names: list[str]) -> None:
        if self._written:
            self._write_hparams(hparams, metric_names)
        else:
            self._pending_hparams = (hparams, metric_names)

    def _write_hparams(self, hparams: dict, metric_names: list[str]) -> None:
        """The table's metrics: those the run logs (seen by now; eval/* when the run evaluates), no others."""
        self._pending_hparams = None
        evaluates = str(hparams.get("do_eval", "")).lower() == "true"
        seen = set(self._firsts)
        metrics = [m for m in metric_names if m in seen or (m.startswith("eval/") and evaluates)]
        hparams = {"run": self.display_name, **{k: v for k, v in hparams.items() if k != "run"}}
        self.writer.add_hparams(hparams_dict=hparams, metrics_list=[visualdl_tag(m) for m in metrics])

    def carry_over(self, previous_file: str, max_step: int) -> int:
        """Copy scalars and texts with step <= max_step from an earlier run's file; returns records copied.

        VisualDL displays only the newest file of a directory, so a resumed run copies the history
        it continues into its own file. Records are read one by one with VisualDL's RecordReader,
        so a file cut short by a crash yields everything before the damaged record.
        """
        from google.protobuf.message import DecodeError
        from visualdl.proto import record_pb2
        from visualdl.reader.record_reader import RecordReader

        copied = 0
        for raw in RecordReader(filepath=previous_file).get_all():
            record = record_pb2.Record()
            try:
                record.ParseFromString(raw)
            except DecodeError:
                break
            for value in record.values:
                kind = value.WhichOneof("one_value")
                if value.id > max_step or kind not in ("value", "text"):
                    continue
                if kind == "value":
                    self.writer.add_scalar(tag=value.tag, value=value.value, step=value.id, walltime=value.timestamp)
                    self._written.add(value.tag)
                else:
                    text = value.text.encoded_text_string
                    self.writer.add_text(tag=value.tag, text_string=text, step=value.id, walltime=value.timestamp)
                    if value.tag.startswith("samples/") and value.id not in self._text_steps:
                        self._text_steps.append(value.id)
                copied += 1
        self._text_steps.sort()
        return copied

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        if self._pending_hparams is not None:  # a run that logged no scalar still keeps its arguments
            self._write_hparams(*self._pending_hparams)
        self.writer.close()
