"""A self-contained HTML report of a run, built from the files the Tracker writes.

``python -m ppokit.tracking.report OUTPUT_DIR [--out FILE]`` or ``build_report(output_dir)``. The page has
inline SVG charts and inline CSS only: it opens offline and loads nothing from anywhere. It works on
interrupted runs (an incomplete last line is skipped and reported) and on runs that recorded only
metrics (missing sections say "not recorded").

Metric names the charts look for (the trainer logs these):
  reward/mean, reward/std (band), reward/min, reward/max, reward/<function>
  response_length/mean|max|min, response_length/clip_ratio
  actor/pg_loss, actor/kl, actor/kl_loss, actor/entropy, actor/clipfrac, actor/grad_norm, actor/lr,
  kl/beta (the KL controller's coefficient), critic/value_loss, critic/vf_clipfrac, critic/grad_norm, critic/lr
  timing/<phase>_s (and timing/step_s), eval/<metric>
Any other metric is listed in a table of last/min/max values.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime
from html import escape
from pathlib import Path

from ppokit.errors import PpokitError
from ppokit.tracking.console import duration
from ppokit.tracking.jsonl import read_jsonl
from ppokit.tracking.progress import AFTER_STEP
from ppokit.tracking.report_args import args_section, headline
from ppokit.tracking.report_facts import left_out_section, outcome_lines, wall_time_gaps
from ppokit.tracking.svg import Series, bar_chart, fmt_number, line_chart, std_band
from ppokit.tracking.vdl import left_out

REWARD_STATS = ("reward/mean", "reward/std", "reward/min", "reward/max")
# reward/* metrics that are not one reward function's mean: a count, and the sum before normalising
NOT_FUNCTIONS = ("reward/skipped_groups", "reward/raw_mean")
KL_OFF_NOTE = ("KL is 0 at every step: no KL term is on (kl_loss_coeff is 0 and the algorithm puts no KL in the "
               "reward), so the actor is never compared with a reference model. Set kl_loss_coeff (GRPO) or "
               "kl_coeff (PPO) to watch it. actor/approx_kl, the policy's drift within a step, is 0 too when each "
               "rollout gets one optimizer step.")
# (chart title, y label, regex on the metric name); a metric goes to the first chart it matches
SIGNAL_CHARTS = (
    ("Response length", "tokens", r"^(response|prompt)_length/(mean|max|min)$"),
    ("KL divergence", "", r"(^|/)(kl|kl_loss|ppo_kl|approx_kl)$"),
    ("KL coefficient", "", r"^kl/beta$"),
    ("Entropy", "nats", r"(^|/)entropy(_loss)?$"),
    ("Responses cut at max_dec_len", "fraction", r"^response_length/clip_ratio$"),
    ("Clip fraction", "fraction", r"clipfrac|clip_frac|clip_fraction"),  # PPO's ratio clip only
    ("Gradient norm", "", r"grad_norm"),
    ("Learning rate", "", r"(^|/)(lr|learning_rate)$"),
    ("Losses", "", r"(^|/)[a-z0-9_]*loss$"),
)
SAMPLES_PER_STEP = 6
SAMPLE_TEXT_LIMIT = 4000
CSS = """
body{font-family:sans-serif;max-width:1340px;margin:24px auto;padding:0 16px;color:#222}
h1{font-size:22px;margin-bottom:4px}.headline{font-size:16px;margin:0 0 12px}h3 small{font-weight:normal;color:#777}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
.charts{display:flex;flex-wrap:wrap;gap:12px}.charts svg{border:1px solid #eee;background:#fff}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f5f5f5}.note{background:#fff4d6;border:1px solid #e6c66a;padding:8px 12px;
margin:8px 0}.missing{color:#777;font-style:italic}.sample{border:1px solid #ddd;margin:10px 0;padding:8px}
.facts{font-size:13px;color:#444}pre{white-space:pre-wrap;word-break:break-word;background:#f7f7f7;
padding:6px;margin:4px 0;font-size:12px;max-height:360px;overflow:auto}
"""


class ReportError(PpokitError):
    """The output directory cannot be reported on (message says why and what to do)."""


@dataclass
class RunData:
    output_dir: Path
    rows: list[dict]  # one merged row per step, sorted by step
    samples: list[dict] | None
    args: dict | None
    notes: list[str] = field(default_factory=list)
    interrupted: bool = False
    state: dict = field(default_factory=dict)  # tracking_state.json: started_at, wall_s (when closed)
    info: dict = field(default_factory=dict)  # args_info.json: defaults, no_effect, plan


def load_run(output_dir: str | Path) -> RunData:
    """Read metrics.jsonl (required), samples.jsonl and args.json (optional) of a run."""
    output_dir = Path(output_dir)
    metrics_path = output_dir / "metrics.jsonl"
    if not metrics_path.is_file():
        where = "does not exist" if not output_dir.exists() else "has no metrics.jsonl"
        raise ReportError(
            f"{output_dir} {where}; pass the output_dir of a ppokit run (the folder its metrics.jsonl is in)."
        )
    metrics = read_jsonl(metrics_path)
    run = RunData(output_dir, merge_by_step(metrics.rows), None, None, metrics.problems("metrics.jsonl"))
    run.interrupted = metrics.truncated_last_line
    samples_path = output_dir / "samples.jsonl"
    if samples_path.is_file():
        samples = read_jsonl(samples_path)
        run.samples = [r for r in samples.rows if _is_step(r.get("step"))]
        run.notes += samples.problems("samples.jsonl")
    run.args = _json_file(output_dir / "args.json", run.notes, "the arguments are not shown")
    run.state = _json_file(output_dir / "tracking_state.json", run.notes, "the wall time is the last row's") or {}
    run.info = _json_file(output_dir / "args_info.json", run.notes, "every argument is shown") or {}
    return run


def _json_file(path: Path, notes: list[str], consequence: str) -> dict | None:
    if not path.is_file():
        return None
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        notes.append(f"{path.name} is not valid JSON, so {consequence}.")
        return None
    return loaded if isinstance(loaded, dict) else None


def same_series(rows: list[dict], keys: list[str]) -> list[list[str]]:
    """``keys`` grouped by identical values at every step (e.g. eval/accuracy, pass@1 and maj@1 with one
    sample per prompt): one list per distinct quantity, in the order of ``keys``."""
    groups: list[list[str]] = []
    for key in keys:
        column = _column(rows, key)
        for group in groups:
            other = _column(rows, group[0])
            if all((a is None) == (b is None) and (a is None or abs(a - b) <= 1e-9 * max(1.0, abs(b)))
                   for a, b in zip(column, other)):
                group.append(key)
                break
        else:
            groups.append([key])
    return groups


def _title(group: list[str]) -> str:
    """"eval/accuracy (= pass@1, maj@1)": the first name, and the others that are the same numbers."""
    head = group[0].rsplit("/", 1)[0] + "/"
    rest = [k.removeprefix(head) for k in group[1:]]
    return group[0] + (f" (= {', '.join(rest)})" if rest else "")


def _is_step(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def merge_by_step(rows: list[dict]) -> list[dict]:
    """One row per step (later values win, so train and eval rows of a step combine), sorted by step."""
    merged: dict[float, dict] = {}
    for row in rows:
        if _is_step(row.get("step")):
            merged.setdefault(row["step"], {}).update(row)
    return [merged[k] for k in sorted(merged)]


def metric_names(rows: list[dict]) -> list[str]:
    names: dict[str, None] = {}
    for row in rows:
        for key, value in row.items():
            if key not in ("step", "time") and (value is None or _is_step(value)):
                names[key] = None
    return list(names)


def _column(rows: list[dict], key: str) -> list[float | None]:
    return [row.get(key) if _is_step(row.get(key)) else None for row in rows]


def _series(rows: list[dict], keys: list[str], x_key: str = "step") -> list[Series]:
    xs = _column(rows, x_key)
    return [Series(key, xs, _column(rows, key)) for key in keys]


def _missing(what: str) -> str:
    return f'<p class="missing">{escape(what)}: not recorded.</p>'


def _charts(svgs: list[str]) -> str:
    return '<div class="charts">' + "".join(svgs) + "</div>"


def reward_section(rows: list[dict], names: list[str], plan: dict | None = None) -> str:
    """Reward mean ± std against step and against wall time (its gaps explained), plus per-function rewards."""
    if "reward/mean" not in names:
        return "<h2>Reward</h2>" + _missing("reward/mean")
    mean, std = _column(rows, "reward/mean"), _column(rows, "reward/std")
    lo, hi = std_band(mean, std, _column(rows, "reward/min"), _column(rows, "reward/max"))
    has_std = any(v is not None for v in std)
    name = "reward mean ± std" if has_std else "reward mean"
    band = {"lo": lo, "hi": hi} if has_std else {}
    svgs = [
        line_chart([Series(name, _column(rows, "step"), mean, **band)], "Reward by step", "step", "reward"),
        line_chart(
            [Series(name, _column(rows, "time"), mean, **band)],
            "Reward by wall time",
            "wall time (s)",
            "reward",
        ),
    ]
    extremes = [k for k in ("reward/min", "reward/max") if k in names]
    per_fn = [k for k in names if k.startswith("reward/") and k not in REWARD_STATS + NOT_FUNCTIONS]
    copies = [k for k in per_fn + ["reward/raw_mean"] if k in names and
              same_series(rows, ["reward/mean", k]) == [["reward/mean", k]]]
    if extremes:
        svgs.append(line_chart(_series(rows, ["reward/mean", *extremes]), "Reward range", "step", "reward"))
    if [k for k in per_fn if k not in copies]:
        svgs.append(line_chart(_series(rows, per_fn[:8]), "Reward by function", "step", "reward"))
    note = (f'<p class="missing">{escape(", ".join(copies))} equal reward/mean at every step (no chart of '
            "their own).</p>" if copies else "")
    gaps = wall_time_gaps(rows, plan)
    if gaps:
        note += ('<p class="facts">Gaps in reward by wall time: ' + escape("; ".join(gaps)) + ".</p>")
    return "<h2>Reward</h2>" + _charts(svgs) + note


def signals_section(rows: list[dict], names: list[str], dropped: dict | None = None) -> tuple[str, set[str]]:
    """Length, KL, entropy, clip fraction, grad norm, LR and losses; returns the HTML and names used.
    A chart whose only metrics are in ``dropped`` (flat or copies, said in the note) is not called missing."""
    used: set[str] = set()
    svgs, missing = [], []
    free = [n for n in names if not n.startswith(("reward/", "timing/", "eval/"))]
    for title, y_label, pattern in SIGNAL_CHARTS:
        keys = [n for n in free if n not in used and re.search(pattern, n)]
        used.update(keys)
        if keys:
            svgs.append(line_chart(_series(rows, keys[:8]), title, "step", y_label))
        elif any(re.search(pattern, n) for n in dropped or ()):
            continue
        elif title in (
            "Response length",
            "KL divergence",
            "Entropy",
            "Clip fraction",
            "Gradient norm",
            "Learning rate",
        ):
            missing.append(title)
    html = "<h2>Training signals</h2>" + _charts(svgs)
    kl = [v for n in used | set(dropped or ()) if re.search(SIGNAL_CHARTS[1][2], n)
          for v in _column(rows, n) if v is not None]
    if kl and all(v == 0 for v in kl):
        html += f'<div class="note">{escape(KL_OFF_NOTE)}</div>'
    if missing:
        html += _missing(", ".join(missing))
    return html, used


def timing_section(rows: list[dict], names: list[str], final_save_s: float | None = None) -> str:
    """Seconds per phase against step, and the mean seconds per phase as bars."""
    keys = [n for n in names if n.startswith("timing/") and n not in AFTER_STEP]
    if not keys:
        return "<h2>Time per phase</h2>" + _missing("timing/*")
    means = []
    for key in keys:
        values = [v for v in _column(rows, key) if v is not None]
        if values:
            means.append((key.removeprefix("timing/"), sum(values) / len(values)))
    svgs = [line_chart(_series(rows, keys[:8]), "Time per phase", "step", "seconds")]
    svgs.append(bar_chart(means, "Mean time per step and phase", " s"))
    outside = []  # one-off work between the steps: not a per-step mean
    evals = [v for v in _column(rows, "timing/eval_s") if v is not None]
    if evals:
        outside.append(f"evaluation{'s' if len(evals) > 1 else ''} {fmt_number(sum(evals))} s"
                       + (f" ({len(evals)} × {fmt_number(sum(evals) / len(evals))} s)" if len(evals) > 1 else ""))
    if final_save_s is not None:
        outside.append(f"final save {fmt_number(final_save_s)} s")
    facts = f'<p class="facts">outside the steps: {escape("; ".join(outside))}</p>' if outside else ""
    return "<h2>Time per phase</h2>" + facts + _charts(svgs)


def eval_section(rows: list[dict], names: list[str]) -> str:
    """One chart per distinct eval/* quantity (identical series share one; a constant is a sentence)."""
    keys = [n for n in names if n.startswith("eval/")]
    if not keys:
        return "<h2>Evaluation</h2>" + _missing("eval/*")
    eval_rows = [r for r in rows if any(r.get(k) is not None for k in keys)]
    constant = [k for k in keys if len({v for v in _column(eval_rows, k) if v is not None}) == 1
                and len(eval_rows) > 1 and not re.search(r"accuracy|pass@|maj@|mean@|reward", k)]
    svgs = []
    for group in same_series(eval_rows, [k for k in keys if k not in constant])[:12]:
        group_rows = [r for r in eval_rows if r.get(group[0]) is not None]
        svgs.append(line_chart(_series(group_rows, [group[0]]), _title(group), "step"))
    facts = "; ".join(f"{k} {fmt_number(next(v for v in _column(eval_rows, k) if v is not None))} at every "
                      "evaluation" for k in constant)
    at = ", ".join(_fact(r["step"]) for r in eval_rows)
    return ("<h2>Evaluation</h2>" + f'<p class="facts">evaluated at step{"s" if len(eval_rows) > 1 else ""} {at}'
            + (f"; {escape(facts)}" if facts else "") + "</p>" + _charts(svgs))


def other_metrics_section(rows: list[dict], names: list[str], used: set[str]) -> str:
    """Metrics no chart shows, as a table of last, min and max values."""
    keys = [n for n in names if n not in used and (n in NOT_FUNCTIONS or not n.startswith(("reward/", "timing/",
                                                                                             "eval/")))]
    keys = [n for n in keys if not (n == "reward/raw_mean" and same_series(rows, ["reward/mean", n]) ==
                                    [["reward/mean", n]])]  # a copy the reward section names
    if not keys:
        return ""
    body = []
    for key in keys:
        values = [v for v in _column(rows, key) if v is not None]
        cells = (
            [fmt_number(values[-1]), fmt_number(min(values)), fmt_number(max(values))]
            if values
            else ["—"] * 3
        )
        body.append("<tr><td>" + escape(key) + "</td>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "<tr><th>metric</th><th>last</th><th>min</th><th>max</th></tr>"
    return "<h2>Other metrics</h2><table>" + head + "".join(body) + "</table>"


def _clip(text, limit: int = SAMPLE_TEXT_LIMIT) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters)"


def _fact(value) -> str:
    if isinstance(value, float):
        return fmt_number(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def render_sample(row: dict) -> str:
    """One generation: facts (reward, advantage, task, other fields), the question (the user's last turn, with
    the full chat-templated prompt one click away), and the response — all escaped."""
    skip = ("step", "prompt", "question", "response")
    order = ["reward", "advantage", "task"] + [
        k for k in row if k not in skip + ("reward", "advantage", "task")
    ]
    facts = [f"<b>{escape(k)}</b> {escape(_fact(row[k]))}" for k in order if row.get(k) is not None]
    return (
        '<div class="sample"><div class="facts">'
        + " · ".join(facts)
        + "</div>"
        + _question_html(row)
        + f"<div>response</div><pre>{escape(_clip(row.get('response')))}</pre></div>"
    )


def _question_html(row: dict) -> str:
    question = row.get("question")
    if question is None:  # samples.jsonl of an older run: the prompt as it was logged
        return f"<div>prompt</div><pre>{escape(_clip(row.get('prompt')))}</pre>"
    full = ""
    if row.get("prompt") and str(row["prompt"]).strip() != str(question).strip():
        full = f"<details><summary>full prompt</summary><pre>{escape(_clip(row['prompt']))}</pre></details>"
    return f"<div>question</div><pre>{escape(_clip(question))}</pre>{full}"


def samples_section(samples: list[dict] | None) -> str:
    """Generations from the first, middle and last logged steps."""
    if not samples:
        return "<h2>Sample generations</h2>" + _missing("samples.jsonl")
    steps = sorted({r["step"] for r in samples})
    picked = {steps[0]: "first", steps[len(steps) // 2]: "middle", steps[-1]: "last"}
    parts = ["<h2>Sample generations</h2>"]
    for step in sorted(picked):
        rows = [r for r in samples if r["step"] == step]
        label = " / ".join(k for s, k in picked.items() if s == step)
        shown = rows[:SAMPLES_PER_STEP]
        parts.append(
            f"<h3>step {escape(_fact(step))} ({label} logged; {len(shown)} of {len(rows)} shown)</h3>"
        )
        parts += [render_sample(r) for r in shown]
    return "".join(parts)


def summary_section(run: RunData) -> str:
    """What the run is, how far it got, and any problems reading it."""
    rows = run.rows
    facts = [("status", _status(run))]
    wall = _wall_time(run)
    if wall:
        facts.append(("wall time", wall))
    if run.state.get("started_at"):
        facts.append(("started", str(run.state["started_at"]).replace("T", " ").replace("+00:00", " UTC")))
    facts.append(("steps logged", str(len(rows))))
    if rows:
        facts.append(("step range", f"{_fact(rows[0]['step'])} – {_fact(rows[-1]['step'])}"))
    facts.append(("output_dir", str(run.output_dir.resolve())))
    line = headline(run.args, run.info.get("plan"))
    outcome = outcome_lines(run.rows, run.state.get("wall_s"), run.interrupted, run.state.get("final_save_s"))
    table = (f'<p class="headline">{escape(line)}</p>' if line else "") + "".join(
        f'<p class="headline"><b>{escape(o)}</b></p>' for o in outcome) + (
        "<table>"
        + "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in facts)
        + "</table>"
    )
    notes = "".join(f'<div class="note">{escape(n)}</div>' for n in run.notes)
    if not rows:
        notes += (
            '<div class="note">metrics.jsonl has no readable rows yet, so there is nothing to plot.</div>'
        )
    return table + notes


def _wall_time(run: RunData) -> str | None:
    """From the start of train() (the tracker's clock; resumes continue it) to its end, or to the last row."""
    wall = run.state.get("wall_s")
    last_time = next((r["time"] for r in reversed(run.rows) if _is_step(r.get("time"))), None)
    if _is_step(wall) and not run.interrupted and (last_time is None or wall >= last_time):
        return f"{duration(wall)} (from the start of training to its end; loading before it not counted)"
    if last_time is not None:
        return f"{duration(last_time)} (from the start of training to the last logged step)"
    return None


def _status(run: RunData) -> str:
    planned = (run.info.get("plan") or {}).get("rollout_steps")  # the run plan's length (epoch mode too)
    if not isinstance(planned, int):  # a run folder from before args_info.json: max_steps mode only
        planned = (run.args or {}).get("max_steps")
    last = run.rows[-1]["step"] if run.rows else None
    if run.interrupted:
        return f"interrupted (last complete row at step {_fact(last)})"
    if isinstance(planned, int) and planned > 0 and last is not None:
        return "finished" if last >= planned else f"stopped at step {_fact(last)} of {planned}"
    return "unknown (the run's plan is not in its folder)"


def render_report(run: RunData) -> str:
    """The whole report page as one HTML string."""
    dropped = left_out(run.rows)  # flat or copies: no chart here, none in VisualDL, said once below
    names = [n for n in metric_names(run.rows) if n not in dropped]
    signals, used = signals_section(run.rows, names, dropped)
    title = f"ppokit report — {(run.args or {}).get('run_name') or run.output_dir.resolve().name}"
    body = [
        f"<h1>{escape(title)}</h1>",
        summary_section(run),
        reward_section(run.rows, names, run.info.get("plan")),
        signals,
        timing_section(run.rows, names, run.state.get("final_save_s")),
        eval_section(run.rows, names),
        other_metrics_section(run.rows, names, used),
        left_out_section(dropped),
        samples_section(run.samples),
        args_section(run.args, run.info),
        f'<p class="missing">generated by ppokit.tracking.report at {datetime.now():%Y-%m-%d %H:%M:%S}</p>',
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )


def build_report(output_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the HTML report of a run (default ``output_dir/report.html``) and return its path.

    Raises ReportError when ``output_dir`` has no metrics.jsonl.
    """
    run = load_run(output_dir)
    path = Path(out) if out is not None else Path(output_dir) / "report.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(run), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ppokit.tracking.report", description="Write a self-contained HTML report of a ppokit run."
    )
    parser.add_argument("output_dir", help="the run's output_dir (where metrics.jsonl is)")
    parser.add_argument("--out", help="where to write the report (default OUTPUT_DIR/report.html)")
    ns = parser.parse_args(argv)
    try:
        path = build_report(ns.output_dir, ns.out)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
