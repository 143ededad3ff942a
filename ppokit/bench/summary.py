"""Turning per-step timings into the bench's numbers: medians, maxima, throughput, FLOP share."""

from __future__ import annotations

import statistics

PHASES = ("rollout", "reference", "old_logprobs", "reward", "update", "rest", "step")


def summarize(steps: list[dict], warmup: int, flop_peaks: dict[str, float]) -> dict:
    """Median/max per phase over the steps after `warmup`, throughput and the update's FLOP share.

    steps: one dict per step with `<phase>_s` seconds, `generated_tokens`, `trained_tokens`,
    `update_flop` and `reward`. flop_peaks: {"bf16": FLOP/s, "fp32": FLOP/s} measured in the process.
    """
    timed = steps[warmup:] or steps
    out: dict = {"steps_timed": len(timed), "warmup": min(warmup, len(steps))}
    for phase in PHASES:
        values = [s[f"{phase}_s"] for s in timed if s.get(f"{phase}_s") is not None]
        if values:
            out[phase] = {"median_s": statistics.median(values), "max_s": max(values)}
    rollout = sum(s["rollout_s"] for s in timed)
    update = sum(s["update_s"] for s in timed)
    out["generated_tokens_per_s"] = sum(s["generated_tokens"] for s in timed) / max(rollout, 1e-9)
    out["trained_tokens_per_s"] = sum(s["trained_tokens"] for s in timed) / max(update, 1e-9)
    achieved = sum(s["update_flop"] for s in timed) / max(update, 1e-9)
    out["update_flop_per_s"] = achieved
    for name, peak in flop_peaks.items():
        out[f"update_share_of_{name}_peak"] = achieved / peak if peak else None
    out["matmul_peak_flop_per_s"] = dict(flop_peaks)
    out["learning"] = learning_curve(steps)
    return out


def learning_curve(steps: list[dict], target: float = 0.9, window: int = 5) -> dict:
    """First-10 / last-10 mean reward and the step (and seconds since the first step began) at which the
    `window`-step mean reward first reaches `target`; None when it never does."""
    rewards = [s["reward"] for s in steps]
    out = {
        "first10_reward": statistics.mean(rewards[:10]) if rewards else None,
        "last10_reward": statistics.mean(rewards[-10:]) if rewards else None,
        "step_to_target": None,
        "seconds_to_target": None,
        "target": target,
    }
    elapsed = 0.0
    for i, s in enumerate(steps):
        elapsed += s["step_s"]
        if i + 1 >= window and statistics.mean(rewards[i + 1 - window : i + 1]) >= target:
            out["step_to_target"], out["seconds_to_target"] = i + 1, elapsed
            break
    return out


def update_flop(non_embedding_params: int, head_params: int, computed_tokens: int, response_tokens: int) -> float:
    """Forward + backward FLOP of one update ≈ 6 · params · tokens: the transformer body sees every token
    the trainer computes (unpadded; ppokit's packed rows carry a shared prompt once), the LM head only the
    response positions. Attention's quadratic term is left out (≈1 % at these lengths). So the share of
    the matmul peak measures how well the hardware is used, not how much work was skipped."""
    return 6.0 * (non_embedding_params * computed_tokens + head_params * response_tokens)


def format_table(results: dict[str, dict]) -> str:
    """A plain-text table: one column per trainer, plus ratios (TRL / ppokit) when both ran."""
    names = list(results)
    rows = [["", *names], ["compute dtype", *(str(results[n].get("compute_dtype")) for n in names)],
            ["threads", *(str(results[n].get("threads")) for n in names)]]
    for phase in PHASES:
        cells = []
        for n in names:
            p = results[n]["summary"].get(phase)
            cells.append(f"{p['median_s']:.2f} / {p['max_s']:.2f}" if p else "-")
        rows.append([f"{phase} s (median / max)", *cells])
    for key, label, fmt in (
        ("generated_tokens_per_s", "generated tokens/s", "{:.0f}"),
        ("trained_tokens_per_s", "trained tokens/s", "{:.0f}"),
        ("update_share_of_bf16_peak", "update FLOP/s / bf16 peak", "{:.0%}"),
        ("update_share_of_fp32_peak", "update FLOP/s / fp32 peak", "{:.0%}"),
    ):
        rows.append([label, *(_fmt(results[n]["summary"].get(key), fmt) for n in names)])
    for name in ("bf16", "fp32"):
        rows.append([f"{name} matmul peak GFLOP/s", *(f"{results[n]['flop_peaks'][name] / 1e9:.1f}" for n in names)])
    rows.append(["peak RSS GB", *(f"{results[n]['peak_rss_bytes'] / 1e9:.2f}" for n in names)])
    rows.append(["reward first10 -> last10", *(_curve(results[n]["summary"]["learning"]) for n in names)])
    rows.append(["5-step mean >= 0.9 at", *(_target(results[n]["summary"]["learning"]) for n in names)])
    if len(names) == 2:
        a, b = (results[n]["summary"] for n in names)
        rows.append([f"{names[1]} / {names[0]} (median s)", "", ""])
        for phase in PHASES:
            if phase in a and phase in b and min(a[phase]["median_s"], b[phase]["median_s"]) >= 0.01:
                rows.append([f"  {phase}", "", f"{b[phase]['median_s'] / a[phase]['median_s']:.2f}x"])
            elif phase in a and phase in b:
                rows.append([f"  {phase}", "", "- (under 10 ms)"])
    width = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, width)).rstrip() for r in rows)


def one_device_bound(sync: dict) -> float | None:
    """The step time asynchronous training can reach on the device(s) the synchronous run shares, from that run's
    medians: the rollout's waiting (the reward phase: a remote reward, a sandbox; its compute is negligible) can hide
    behind the update, its compute cannot: compute + max(update, waiting) = step - min(update, waiting)."""
    if not all(k in sync for k in ("step", "update", "reward")):
        return None
    return sync["step"]["median_s"] - min(sync["update"]["median_s"], sync["reward"]["median_s"])


def async_bound_line(sync: dict, asynchronous: dict) -> str:
    """One line: the asynchronous step against the synchronous one and against the one-device bound."""
    bound = one_device_bound(sync)
    if bound is None or "step" not in asynchronous:
        return "async: no step timings to compare"
    step_sync, step_async = sync["step"]["median_s"], asynchronous["step"]["median_s"]
    return (f"async step {step_async:.2f} s = {step_async / step_sync:.2f}x sync ({step_sync:.2f} s); one-device "
            f"bound {bound:.2f} s ({bound / step_sync:.2f}x sync), async / bound {step_async / bound:.2f}")


def _fmt(value, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _curve(learning: dict) -> str:
    if learning["first10_reward"] is None:
        return "-"
    return f"{learning['first10_reward']:.2f} -> {learning['last10_reward']:.2f}"


def _target(learning: dict) -> str:
    if learning["step_to_target"] is None:
        return "not reached"
    return f"step {learning['step_to_target']}, {learning['seconds_to_target']:.0f} s"


def param_counts(model) -> tuple[int, int]:
    """(parameters outside the embeddings / LM head, LM-head parameters V·d)."""
    head = model.get_output_embeddings().weight
    skip = {id(head), id(model.get_input_embeddings().weight)}
    body = sum(p.numel() for p in model.parameters() if id(p) not in skip)
    return body, head.numel()


def finish_row(row: dict) -> dict:
    """Add `rest_s`: the step's time outside the named phases."""
    named = ("rollout_s", "reference_s", "old_logprobs_s", "reward_s", "update_s")
    row["rest_s"] = max(row["step_s"] - sum(row[k] for k in named), 0.0)
    return row
