"""Notebook views: `show_batch` (a sortable table of a rollout) and `live_view` (training progress + plot).

    s.show(batch)   # Jupyter: an HTML table (+ "sort by" controls with ipywidgets, until the next cell runs)
    s.train()       # Jupyter: a progress bar, the current reward, reward / KL / length charts per step

Every view leaves a static output that renders with no JavaScript and no network (a saved notebook
reopened, `jupyter nbconvert --to html`, GitHub): the table is a `BatchTable` (HTML in a notebook, text
in a terminal) shown as its own static output, with live sort controls above it that close when the next cell runs, and the
live view is replaced by a static HTML snapshot (progress, status, SVG charts) when training finishes. Outside Jupyter `s.train()` uses
the console progress bar (`ppokit.tracking`).
"""

from __future__ import annotations

import html
import time

from ppokit.data.render import question_text
from ppokit.tracking.progress import format_summary
from ppokit.tracking.svg import Series, line_chart, std_band

FOLD_AT = 160  # characters shown before a long text is folded into <details>
KL_KEYS = ("actor/kl", "kl/reward_kl", "actor/approx_kl")
TEXT_WIDTH = 60  # characters of prompt / response shown per row in the plain-text table
FULL_PROMPT = "rendered prompt"  # the row key of the whole chat-templated prompt (folded under the question)
CELL = "vertical-align:top;padding:3px 8px;border-bottom:1px solid #ddd"
# Jupyter's output CSS breaks <pre> text anywhere (word-break: break-all); the table wraps between words
# and breaks inside a word only when it is wider than the cell.
PRE = "white-space:pre-wrap;word-break:normal;overflow-wrap:break-word;margin:0"




def in_notebook() -> bool:
    """True inside a Jupyter kernel (where widgets and HTML can render)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and any(c.__name__ == "ZMQInteractiveShell" for c in type(shell).__mro__)


def have_ipywidgets() -> bool:
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------------- the batch table


def fold(text: str, limit: int = FOLD_AT) -> str:
    """HTML for `text`, escaped; folded into a <details> element when longer than `limit`."""
    safe = html.escape(text)
    if len(text) <= limit:
        return f"<pre style='{PRE}'>{safe}</pre>"
    head = html.escape(text[:limit])
    return (f"<details><summary><pre style='{PRE};display:inline'>{head}…</pre>"
            f"</summary><pre style='{PRE}'>{safe}</pre></details>")


def batch_rows(batch) -> list[dict]:
    """One dict per sequence: #, group, prompt, response, reward, reward/<function>, advantage, length.

    `prompt` is the user's last turn (the question); the whole chat-templated prompt the model saw is
    under FULL_PROMPT. `advantage` is the mean over the response's tokens (GRPO gives every token the
    same value); reward and advantage are None before `score()` / `compute_advantages()` ran.
    """
    from ppokit.rollout.agent_loop import is_exchange, turns_text  # multi-turn: model and tool turns marked

    rows, exchange = [], is_exchange(batch.turns, batch.score_fields)
    lengths = batch.response_lengths.tolist()
    for i in range(len(batch)):
        row = {"#": i, "group": int(batch.group_ids[i]),
               "prompt": question_text(batch.records[i], batch.prompt_texts[i]),
               "response": turns_text(batch.turns[i]) if exchange else batch.response_texts[i]}
        row["reward"] = float(batch.scores[i]) if batch.scores is not None else None
        for name, values in (batch.reward_terms or {}).items():
            row[f"reward/{name}"] = float(values[i])
        row["advantage"] = None
        if batch.advantages is not None:
            valid = batch.advantages[i][batch.loss_mask[i] > 0]
            row["advantage"] = float(valid.float().mean()) if len(valid) else 0.0
        row["length"] = int(lengths[i])
        row[FULL_PROMPT] = batch.prompt_texts[i]
        rows.append(row)
    return rows


def numeric_columns(rows: list[dict]) -> list[str]:
    """Columns a table can be sorted by (numbers, except the row number)."""
    if not rows:
        return []
    return [k for k in rows[0] if k not in ("#", "group") and any(isinstance(r.get(k), (int, float)) for r in rows)]


def table_columns(rows: list[dict]) -> list[str]:
    """The columns a table shows: every key but the full prompt (folded under the question instead)."""
    return [c for c in rows[0] if c != FULL_PROMPT] if rows else []


def sort_rows(rows: list[dict], by: str | None, descending: bool = True) -> list[dict]:
    """Rows ordered by the numeric column `by` (rows without a value last); unchanged when `by` is None."""
    if not by:
        return list(rows)
    if rows and by not in rows[0]:
        raise ValueError(f"cannot sort by {by!r}: the columns are {', '.join(rows[0])}")
    present = [r for r in rows if r.get(by) is not None]
    missing = [r for r in rows if r.get(by) is None]
    return sorted(present, key=lambda r: r[by], reverse=descending) + missing


def _cell_html(value, full_prompt: str | None = None) -> str:
    if isinstance(value, str):
        extra = ""
        if full_prompt and full_prompt.strip() != value:
            extra = (f"<details><summary style='color:#777'>full prompt</summary>"
                     f"<pre style='{PRE};color:#555'>{html.escape(full_prompt)}</pre></details>")
        return f"<td style='max-width:28em;text-align:left;{CELL}'>{fold(value)}{extra}</td>"
    if isinstance(value, float):
        return f"<td style='text-align:right;{CELL}'>{value:+.3f}</td>"
    return f"<td style='text-align:right;{CELL}'>{'' if value is None else value}</td>"


def rows_html(rows: list[dict], sort_by: str | None = None, descending: bool = True) -> str:
    """An HTML table of `rows` (long text folded, the full prompt one click under the question)."""
    if not rows:
        return "<p>empty batch</p>"
    rows = sort_rows(rows, sort_by, descending)
    cols = table_columns(rows)
    head = "".join(f"<th style='text-align:left;{CELL}'>{html.escape(c)}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(_cell_html(r.get(c), r.get(FULL_PROMPT) if c == "prompt" else None) for c in cols)
        + "</tr>" for r in rows)
    return (f"<table class='ppokit-batch' style='border-collapse:collapse;font-size:12px'>"
            f"<tr>{head}</tr>{body}</table>")


def _clip(text: str, width: int) -> str:
    text = " ".join(str(text).split())  # one line
    return text if len(text) <= width else text[: width - 1] + "…"


def rows_text(rows: list[dict], sort_by: str | None = None, descending: bool = True,
              width: int = TEXT_WIDTH) -> str:
    """A plain-text table of `rows`; prompts and responses are cut to `width` characters on one line."""
    if not rows:
        return "empty batch"
    rows = sort_rows(rows, sort_by, descending)
    cols = table_columns(rows)

    def cell(value) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:+.3f}"
        return _clip(value, width) if isinstance(value, str) else str(value)

    table = [cols] + [[cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(line[j]) for line in table) for j in range(len(cols))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in table)


class BatchTable:
    """A rollout as a table: HTML in a notebook (`_repr_html_`), text when printed. `.sort(by)` re-orders.

    Displayed in Jupyter with ipywidgets, it is two outputs: "sort by" controls, then the table as plain HTML,
    which the controls redraw in place. The table needs no widget, so a saved, reopened or exported notebook
    shows it wherever the cell stands; when the next cell runs the controls close (they would be dead in a
    saved notebook); run the cell again (or `table.sort(...)`) to sort it once more.
    """

    def __init__(self, rows: list[dict], sort_by: str | None = "reward", descending: bool = True):
        self.rows = rows
        self.sort_by = sort_by if rows and sort_by in rows[0] else None
        self.descending = descending
        self.controls = self.handle = self.controls_handle = None

    def sort(self, by: str = "reward", descending: bool = True) -> BatchTable:
        """The same rows sorted by another numeric column (e.g. "advantage", "length", "reward/rule")."""
        sort_rows(self.rows, by)  # checks the column exists
        return BatchTable(self.rows, by, descending)

    def sorted_rows(self) -> list[dict]:
        return sort_rows(self.rows, self.sort_by, self.descending)

    def _repr_html_(self) -> str:
        return rows_html(self.rows, self.sort_by, self.descending)

    def __str__(self) -> str:
        return rows_text(self.rows, self.sort_by, self.descending)

    __repr__ = __str__

    def static_bundle(self) -> dict:
        return {"text/html": self._repr_html_(), "text/plain": str(self)}

    def _ipython_display_(self) -> None:
        from IPython.display import display

        if not (in_notebook() and have_ipywidgets()):
            display(self.static_bundle(), raw=True)
            return
        # Two outputs: the controls (a widget) and the table (plain HTML, redrawn in place by the controls).
        # The table never depends on a widget, so it is in the saved notebook wherever the cell stands,
        # the last cell included (where no next cell comes to freeze it).
        self.controls = sort_controls(self)
        bundle = {**self.controls._repr_mimebundle_(), "text/plain": "(sort controls: run the cell to use them)"}
        self.controls_handle = display(bundle, raw=True, display_id=True)
        self.handle = display(self.static_bundle(), raw=True, display_id=True)
        freeze_before_next_cell(self)

    def redraw(self) -> None:
        """Show the table again as it is sorted now (the controls call this)."""
        if self.handle is not None:
            self.handle.update(self.static_bundle(), raw=True)

    def freeze(self) -> None:
        """Close the controls (they are not saved) and leave the static table as it was last sorted."""
        self.redraw()
        if getattr(self, "controls_handle", None) is not None:
            self.controls_handle.update({"text/plain": ""}, raw=True)
        if self.controls is not None:
            for widget in (self.controls.sort, self.controls.order, self.controls):
                widget.close()
        self.controls = None


def freeze_before_next_cell(table: BatchTable) -> None:
    """`table.freeze()` when the kernel starts the next cell (IPython's pre_run_cell event), once."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return

    def freeze(*_):
        shell.events.unregister("pre_run_cell", freeze)
        table.freeze()

    shell.events.register("pre_run_cell", freeze)


def sort_controls(table: BatchTable):
    """One widget: "sort by" and order controls; a change redraws the table's own (static HTML) output."""
    import ipywidgets as w

    numeric = numeric_columns(table.rows)
    sort = w.Dropdown(options=numeric, value=table.sort_by if table.sort_by in numeric else None,
                      description="sort by", layout=w.Layout(width="16em"))
    order = w.ToggleButtons(options=["descending", "ascending"], value="descending" if table.descending
                            else "ascending", style={"button_width": "7em"})

    def redraw(_=None):
        table.sort_by, table.descending = sort.value, order.value == "descending"
        table.redraw()

    sort.observe(redraw, names="value")
    order.observe(redraw, names="value")
    box = w.HBox([sort, order], layout=w.Layout(flex_flow="row nowrap", align_items="center"))
    box.sort, box.order = sort, order  # for code that inspects the view
    return box


def show_batch(batch, sort_by: str | None = "reward") -> BatchTable:
    """A table of `batch`: HTML in Jupyter (with sort controls when ipywidgets is there), text elsewhere."""
    if batch is None:
        raise ValueError("there is no batch to show yet: run batch = s.rollout() (or s.step()) first, "
                         "then s.show(batch)")
    return BatchTable(batch_rows(batch), sort_by)


# ---------------------------------------------------------------------------- the live training view


def live_plot_svg(history: list[tuple[int, dict]]) -> str:
    """Three small SVG charts (reward ± std with eval accuracy, KL, response length) from (step, metrics)."""
    steps = [s for s, _ in history]

    def col(*keys):
        return [next((m[k] for k in keys if m.get(k) is not None), None) for _, m in history]

    mean, std = col("reward/mean"), col("reward/std")
    lo, hi = std_band(mean, std, col("reward/min"), col("reward/max"))
    reward = [Series("reward/mean", steps, mean, lo, hi)]
    accuracy = col("eval/accuracy")
    if any(a is not None for a in accuracy):
        reward.append(Series("eval/accuracy", steps, accuracy))
    # KL to the reference when a KL term is on, else the policy's drift within the step
    kl = next((k for k in KL_KEYS if any(m.get(k) is not None for _, m in history)), KL_KEYS[0])
    charts = [
        line_chart(reward, "reward"),
        line_chart([Series(kl, steps, col(kl))], "KL"),
        line_chart([Series("response_length/mean", steps, col("response_length/mean"))], "response length"),
    ]
    return "<div style='display:flex;flex-wrap:wrap;gap:8px'>" + "".join(charts) + "</div>"


class LiveState:
    """What both live views show: the (step, metrics) history, the status line, the ETA."""

    def __init__(self, total: int, history: list[dict] | None = None):
        self.total = int(total)
        self.history: list[tuple[int, dict]] = [(int(h["step"]), h) for h in history or [] if "step" in h]
        self.step = self.history[-1][0] if self.history else 0
        self.status = f"step {self.step}/{self.total}: starting…"
        self.done = False
        self._started = time.monotonic()
        self._first_step = self.step

    def record(self, step: int, metrics: dict) -> None:
        self.history = [(s, m) for s, m in self.history if s != step] + [(int(step), dict(metrics))]
        self.step = int(step)
        self.status = format_summary(step, metrics, total=self.total)
        remaining = self.total - self.step
        if remaining > 0 and self.step > self._first_step:
            per_step = (time.monotonic() - self._started) / (self.step - self._first_step)
            self.status += f" | ETA {per_step * remaining:.0f}s"

    def close(self) -> None:
        self.done = True
        self.status += "  (done)"


def snapshot_html(state: LiveState) -> str:
    """The live view as static HTML: a progress element, the status line and the SVG charts."""
    bar = f"<progress value='{state.step}' max='{max(state.total, 1)}' style='width:240px'></progress>"
    status = f"<code>{html.escape(state.status)}</code>"
    plot = live_plot_svg(state.history) if state.history else ""
    return f"<div class='ppokit-train'><div>{bar} {status}</div>{plot}</div>"


class LiveView:
    """ipywidgets: a progress bar, the status line (current reward, KL, length) and the charts."""

    def __init__(self, total: int, history: list[dict] | None = None):
        import ipywidgets as w
        from IPython.display import display

        self.state = LiveState(total, history)
        self.bar = w.IntProgress(value=self.state.step, min=0, max=max(self.state.total, 1), description="train")
        self.label = w.Label(self.state.status)
        self.plot = w.HTML(live_plot_svg(self.state.history) if self.state.history else "")
        self.widget = w.VBox([w.HBox([self.bar, self.label]), self.plot])
        self.handle = display(self.widget, display_id=True)

    def update(self, step: int, metrics: dict) -> None:
        self.state.record(step, metrics)
        self.bar.value = min(self.state.step, self.bar.max)
        self.label.value = self.state.status
        self.plot.value = live_plot_svg(self.state.history)

    def close(self) -> None:
        self.state.close()
        self.label.value = self.state.status
        self.bar.bar_style = "success" if self.state.step >= self.state.total else "warning"
        if self.handle is not None:  # the finished view as static HTML: it survives saving and export
            self.handle.update({"text/html": snapshot_html(self.state), "text/plain": self.state.status}, raw=True)


class HtmlLiveView:
    """Without ipywidgets: one HTML output (progress element, status, charts) redrawn in place."""

    def __init__(self, total: int, history: list[dict] | None = None):
        from IPython.display import HTML, display

        self.state = LiveState(total, history)
        self._html = HTML
        self.handle = display(HTML(self.render()), display_id=True)

    def render(self) -> str:
        return snapshot_html(self.state)

    def update(self, step: int, metrics: dict) -> None:
        self.state.record(step, metrics)
        self._redraw()

    def close(self) -> None:
        self.state.close()
        self._redraw()

    def _redraw(self) -> None:
        if self.handle is not None:  # None when IPython has no shell to display into
            self.handle.update(self._html(self.render()))


def live_view(total: int, history: list[dict] | None = None):
    """The live training view for Jupyter: ipywidgets when installed, else redrawn HTML.

    `history` (the session's `{"step", **metrics}` rows so far) seeds the charts, so a `train()` after
    a few manual `step()`s plots the whole run.
    """
    if have_ipywidgets():
        return LiveView(total, history)
    return HtmlLiveView(total, history)
