"""Notebook views: `show_batch` (a sortable table of a rollout) and `live_view` (training progress + plot).

Both use ipywidgets when it is installed and degrade to plain HTML (IPython.display) or text otherwise.
"""

from __future__ import annotations

import html

from ppokit.tracking.svg import Series, line_chart

FOLD_AT = 160  # characters shown before a long text is folded into <details>


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where widgets can render)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and shell.__class__.__name__ == "ZMQInteractiveShell"


def fold(text: str, limit: int = FOLD_AT) -> str:
    """HTML for `text`, escaped; folded into a <details> element when longer than `limit`."""
    safe = html.escape(text)
    if len(text) <= limit:
        return f"<pre style='white-space:pre-wrap;margin:0'>{safe}</pre>"
    head = html.escape(text[:limit])
    return f"<details><summary><pre style='white-space:pre-wrap;margin:0;display:inline'>{head}…</pre></summary>" \
           f"<pre style='white-space:pre-wrap;margin:0'>{safe}</pre></details>"


def batch_rows(batch) -> list[dict]:
    """One dict per sequence: prompt, response, reward, per-function rewards, advantage, length."""
    rows = []
    lengths = batch.response_lengths.tolist()
    for i in range(len(batch)):
        row = {"#": i, "group": int(batch.group_ids[i]), "prompt": batch.prompt_texts[i],
               "response": batch.response_texts[i], "length": int(lengths[i])}
        row["reward"] = float(batch.scores[i]) if batch.scores is not None else None
        for name, values in batch.reward_terms.items():
            row[f"reward/{name}"] = float(values[i])
        if batch.advantages is not None:
            valid = batch.advantages[i][batch.response_mask[i] > 0]
            row["advantage"] = float(valid[0]) if len(valid) else 0.0
        rows.append(row)
    return rows


def rows_html(rows: list[dict], sort_by: str | None = None, descending: bool = True) -> str:
    """An HTML table of `rows` (long text folded), optionally sorted by a numeric column."""
    if sort_by:
        rows = sorted(rows, key=lambda r: (r.get(sort_by) is None, r.get(sort_by) or 0), reverse=descending)
    if not rows:
        return "<p>empty batch</p>"
    cols = list(rows[0].keys())
    head = "".join(f"<th style='text-align:left'>{html.escape(c)}</th>" for c in cols)
    body = []
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c)
            if isinstance(v, str):
                cells.append(f"<td style='max-width:28em;vertical-align:top'>{fold(v)}</td>")
            elif isinstance(v, float):
                cells.append(f"<td style='vertical-align:top'>{v:+.3f}</td>")
            else:
                cells.append(f"<td style='vertical-align:top'>{'' if v is None else v}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table style='border-collapse:collapse;font-size:12px'><tr>{head}</tr>{''.join(body)}</table>"


def show_batch(batch):
    """A sortable table in Jupyter (ipywidgets); plain HTML without ipywidgets; text outside a notebook."""
    rows = batch_rows(batch)
    if not in_notebook():
        return "\n".join(
            f"[{r['#']}] reward={r['reward']} adv={r.get('advantage')} len={r['length']}\n  {r['response'][:200]!r}"
            for r in rows
        )
    try:
        import ipywidgets as w
    except ImportError:
        from IPython.display import HTML

        return HTML(rows_html(rows, "reward"))
    numeric = [k for k, v in rows[0].items() if isinstance(v, (int, float)) and k != "#"] if rows else []
    sort = w.Dropdown(options=numeric, value="reward" if "reward" in numeric else None, description="sort by")
    order = w.ToggleButtons(options=["descending", "ascending"], value="descending")
    table = w.HTML(rows_html(rows, sort.value, True))

    def redraw(_=None):
        table.value = rows_html(rows, sort.value, order.value == "descending")

    sort.observe(redraw, names="value")
    order.observe(redraw, names="value")
    return w.VBox([w.HBox([sort, order]), table])


class LiveView:
    """Progress, the current reward, and a reward / KL / length plot refreshed every step."""

    def __init__(self, total: int):
        import ipywidgets as w
        from IPython.display import display

        self.total = total
        self.history: list[tuple[int, dict]] = []
        self.bar = w.IntProgress(min=0, max=total, description="train")
        self.label = w.Label("starting…")
        self.plot = w.HTML("")
        display(w.VBox([w.HBox([self.bar, self.label]), self.plot]))

    def update(self, step: int, metrics: dict) -> None:
        self.history.append((step, metrics))
        self.bar.value = step
        reward = metrics.get("reward/mean")
        self.label.value = f"step {step}/{self.total}" + (f"  reward {reward:.3f}" if reward is not None else "")
        self.plot.value = live_plot_svg(self.history)

    def close(self) -> None:
        self.label.value = self.label.value + "  (done)"


def live_plot_svg(history: list[tuple[int, dict]]) -> str:
    """Three small SVG charts (reward ± std, KL, response length) from (step, metrics) pairs."""
    steps = [s for s, _ in history]

    def col(key):
        return [m.get(key) for _, m in history]

    mean, std = col("reward/mean"), col("reward/std")
    lo = [m - s if m is not None and s is not None else None for m, s in zip(mean, std)]
    hi = [m + s if m is not None and s is not None else None for m, s in zip(mean, std)]
    charts = [
        line_chart([Series("reward/mean", steps, mean, lo, hi)], "reward"),
        line_chart([Series("actor/kl", steps, col("actor/kl"))], "KL"),
        line_chart([Series("response_length/mean", steps, col("response_length/mean"))], "response length"),
    ]
    return "<div style='display:flex;flex-wrap:wrap'>" + "".join(charts) + "</div>"


def live_view(total: int):
    """A LiveView in Jupyter with ipywidgets; raises ImportError without it (callers fall back to the console)."""
    import ipywidgets  # noqa: F401

    return LiveView(total)
