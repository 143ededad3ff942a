"""Multi-turn rollouts with tool calls, over any `RolloutEngine` (hf, vLLM: only its `generate` is used).

Every row (prompt x sample) advances together, one model turn per round:
1. the engine continues each active row's context (prompt + response so far) with n=1, until EOS or the row's
   remaining budget (max_new_tokens counts the whole response, tool results included);
2. a turn holding tool calls (`ppokit.tools.parse`, in `tool_format`) is cut right after its calls — what the
   model wrote after them (often an invented tool answer) is dropped — and, unless it is the last allowed turn,
   the calls run (`ppokit.tools.execute`: per-call timeout, at most max_parallel_calls, errors as text);
3. their results, each cut to max_tool_response_length characters, are rendered as the chat template renders a
   tool turn (the assistant turn's end, the tool turn, the next assistant header) and appended with loss_mask 0;
4. a row ends at EOS without a call, at the budget ("length"), or after max_assistant_turns ("turns").
Token-in/token-out: the model's tokens are kept exactly as sampled (only cut, never decoded and re-encoded); only
the tool turns are tokenized. Rows that finished drop out of the next round.

`rollout` is the one entry point training and evaluation call: a single-turn rollout is this loop with one turn and
no tools (one engine call for all n samples of each prompt, so it samples exactly as the engine does), and every
row comes back with what scoring needs — its final answer, its turns, its extra reward fields and the tools' step
rewards — so that nothing after the rollout asks whether a row was single- or multi-turn.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from ppokit.rollout.base import RolloutEngine, RolloutOutput, SamplingParams, check_prompts
from ppokit.tools.execute import ToolRuntime, run_calls
from ppokit.tools.parse import call_end, parse_calls
from ppokit.tools.render import tool_turn_ids

_MARK = "\x00PPOKIT-MODEL-TURN\x00"


@dataclass
class AgentSpec:
    """How a multi-turn rollout runs (ppokit keys in brackets)."""

    tools: dict  # name -> ppokit.tools.Tool  [tools, tool_config_path]
    tool_format: str = "hermes"  # [tool_format]
    max_assistant_turns: int = 5  # [max_assistant_turns]
    max_tool_response_length: int = 256  # characters [max_tool_response_length]
    max_parallel_calls: int = 1  # [max_parallel_calls]
    tool_timeout: float = 10.0  # seconds [tool_timeout]
    tool_role: str | None = None  # role of the tool turn; None -> "tool" if the chat template knows tools, else "user"


@dataclass
class _Row:
    prompt_index: int
    prompt: list[int]
    multi: bool
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[dict] = field(default_factory=list)
    reason: str | None = None

    def add(self, ids: list[int], own: int, logprobs: list[float] | None, role: str, text: str) -> None:
        self.turns.append({"role": role, "text": text, "start": len(self.ids), "end": len(self.ids) + len(ids)})
        self.ids += ids
        self.mask += [own] * len(ids)
        self.logprobs += list(logprobs[: len(ids)]) if logprobs is not None else [0.0] * len(ids)


def truncate_result(text: str, limit: int) -> str:
    """A tool result cut to `limit` characters (verl's measure and marker)."""
    return text if len(text) <= limit else text[:limit] + "...(truncated)"


def tool_turn_text(tokenizer, results: list[str], spec: AgentSpec) -> str:
    """The text that follows a model turn cut after its calls: the turn's end, the tool turn(s) with `results`,
    and the next assistant header, exactly as the tokenizer's chat template renders them."""
    template = getattr(tokenizer, "chat_template", None) or ""
    role = spec.tool_role or ("tool" if "tool" in template else "user")
    if role == "tool":
        messages = [{"role": "tool", "content": r} for r in results]
    else:  # a template without a tool role: hermes' <tool_response> wrapping in one user turn
        messages = [{"role": role, "content": "\n".join(f"<tool_response>\n{r}\n</tool_response>" for r in results)}]
    if not template:
        from ppokit.data.render import render_plain

        return "\n" + render_plain(messages)
    convo = [{"role": "user", "content": "?"}, {"role": "assistant", "content": _MARK}] + messages
    full = tokenizer.apply_chat_template(convo, tokenize=False, add_generation_prompt=True)
    return full[full.index(_MARK) + len(_MARK):]


def _calls_cut(tokenizer, ids: list[int], fmt: str) -> int | None:
    """Number of leading tokens that hold the turn's tool calls (None: the turn makes no complete call).
    The smallest prefix whose text reaches call_end (binary search over prefix decodes)."""
    text = tokenizer.decode(ids, skip_special_tokens=False)
    end = call_end(text, fmt)
    if end is None:
        return None
    target = text[:end]
    lo, hi = 1, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if tokenizer.decode(ids[:mid], skip_special_tokens=False).startswith(target):
            hi = mid
        else:
            lo = mid + 1
    return lo


def rollout(engine: RolloutEngine, tokenizer, prompt_token_ids: list[list[int]], sampling: SamplingParams,
            spec: AgentSpec | None = None, multi_turn: list[bool] | None = None,
            tools_kwargs: list[dict] | None = None) -> RolloutOutput:
    """`sampling.n` responses per prompt with turns, final answers, score fields and rollout rewards filled in.

    spec None (no tools): one model turn per row, the engine's own n-sample generate. Otherwise the multi-turn
    loop of `agent_generate`; its rows add `conversation` to the fields reward functions see, and the tools' step
    rewards (verl's execute / calc_reward) are the reward term `tool_step`.
    """
    if spec is None:
        out = engine.generate(prompt_token_ids, sampling)
        turns = [[one_turn(ids, tokenizer)] for ids in out.response_ids]
        return replace(out, turns=turns, answers=final_answers(out.response_ids, turns, tokenizer),
                       score_fields=[{} for _ in turns])
    out = agent_generate(engine, tokenizer, prompt_token_ids, sampling, spec, multi_turn, tools_kwargs)
    return replace(out, answers=final_answers(out.response_ids, out.turns, tokenizer),
                   score_fields=[{"conversation": t} for t in out.turns],
                   rollout_rewards={"tool_step": tool_step_rewards(out.turns)}, stats=tool_metrics(out.turns))


def one_turn(ids: list[int], tokenizer) -> dict:
    """A single-turn response as its one segment (the same shape a multi-turn row's model turns have)."""
    return {"role": "assistant", "text": tokenizer.decode(ids, skip_special_tokens=False), "start": 0,
            "end": len(ids)}


def final_answer(ids: list[int], turns: list[dict], tokenizer) -> str:
    """The text of the last model turn of a response (special tokens dropped): what reward functions score."""
    last = next((t for t in reversed(turns) if t["role"] == "assistant"), None)
    return "" if last is None else tokenizer.decode(ids[last["start"]:last["end"]], skip_special_tokens=True)


def final_answers(response_ids: list[list[int]], turns: list[list[dict]], tokenizer) -> list[str]:
    return [final_answer(ids, t, tokenizer) for ids, t in zip(response_ids, turns)]


def tool_step_rewards(turns: list[list[dict]]) -> list[float]:
    """Per row: the sum of its calls' step rewards plus the tools' final calc_reward."""
    return [sum(c.get("reward", 0.0) for t in row for c in t.get("calls", [])) +
            (row[-1].get("tool_reward", 0.0) if row else 0.0) for row in turns]


def is_exchange(turns: list[list[dict]] | None, score_fields: list[dict] | None) -> bool:
    """Whether the views show a batch's rows as exchanges (marked model and tool turns, the final answer apart):
    rows of the tool loop, which carry their `conversation`."""
    return turns is not None and any("conversation" in f for f in score_fields or [])


def agent_generate(engine: RolloutEngine, tokenizer, prompt_token_ids: list[list[int]], sampling: SamplingParams,
                   spec: AgentSpec, multi_turn: list[bool] | None = None,
                   tools_kwargs: list[dict] | None = None) -> RolloutOutput:
    """`sampling.n` multi-turn responses per prompt, as a RolloutOutput with loss_mask and turns.

    multi_turn[i]: whether prompt i may call tools (False: one plain turn, as a single-turn rollout);
    tools_kwargs[i]: verl's per-row {tool: {"create_kwargs": {...}}}. Step rewards of the calls and verl's
    calc_reward are in each tool turn's "calls" and the row's last segment ("tool_reward").
    """
    check_prompts(prompt_token_ids)
    flags = multi_turn or [True] * len(prompt_token_ids)
    rows = [_Row(i, list(p), flags[i]) for i, p in enumerate(prompt_token_ids) for _ in range(sampling.n)]
    budget = sampling.max_new_tokens
    runtime = ToolRuntime(spec.tools, spec.tool_timeout, spec.max_parallel_calls)
    any_logprobs, interrupted = False, True
    try:
        for turn in range(spec.max_assistant_turns):
            active = [k for k, r in enumerate(rows) if r.reason is None]
            if not active:
                break
            room = max(budget - len(rows[k].ids) for k in active)
            seed = None if sampling.seed is None else sampling.seed + turn
            step = replace(sampling, n=1, max_new_tokens=room, seed=seed,
                           min_new_tokens=min(sampling.min_new_tokens, room) if turn == 0 else 0)
            out = engine.generate([rows[k].prompt + rows[k].ids for k in active], step)
            any_logprobs = any_logprobs or out.logprobs is not None
            calls = _model_turns(rows, active, out, tokenizer, spec, budget, last=turn == spec.max_assistant_turns - 1)
            if calls:
                kwargs = {k: (tools_kwargs[rows[k].prompt_index] if tools_kwargs else {}) for k in calls}
                _tool_turns(rows, run_calls(runtime, calls, kwargs), tokenizer, spec, budget)
        interrupted = False
    finally:
        final = runtime.close(interrupted)
    for k, r in enumerate(rows):
        r.reason = r.reason or "turns"
        if k in final and r.turns:
            r.turns[-1]["tool_reward"] = final[k]
    return RolloutOutput(prompt_index=[r.prompt_index for r in rows], response_ids=[r.ids for r in rows],
                         finish_reasons=[r.reason for r in rows],
                         logprobs=[r.logprobs for r in rows] if any_logprobs else None,
                         loss_mask=[r.mask for r in rows], turns=[r.turns for r in rows])


def _model_turns(rows, active, out: RolloutOutput, tokenizer, spec: AgentSpec, budget: int, last: bool) -> dict:
    """Append each active row's new model turn; return {row: its tool calls} for the rows whose calls run."""
    calls = {}
    for j, k in enumerate(active):
        r = rows[k]
        ids, reason = list(out.response_ids[j]), out.finish_reasons[j]
        room = budget - len(r.ids)
        if len(ids) > room:
            ids, reason = ids[:room], "length"
        cut = _calls_cut(tokenizer, ids, spec.tool_format) if r.multi else None
        if cut is not None:
            ids = ids[:cut]
        r.add(ids, 1, out.logprobs[j] if out.logprobs is not None else None, "assistant",
              tokenizer.decode(ids, skip_special_tokens=False))
        if cut is None:
            r.reason = reason
            continue
        parsed = parse_calls(r.turns[-1]["text"], spec.tool_format)
        r.turns[-1]["calls"] = [{"name": c.name, "arguments": c.arguments} for c in parsed]
        if last:
            r.reason = "turns"  # the calls of the last allowed turn are not run
        elif len(r.ids) >= budget:
            r.reason = "length"
        else:
            calls[k] = parsed
    return calls


def _tool_turns(rows, results: dict, tokenizer, spec: AgentSpec, budget: int) -> None:
    """Append the rendered results of each row's calls (loss_mask 0), cut at the budget."""
    for k, res in results.items():
        r = rows[k]
        r.turns[-1]["calls"] = [asdict(c) for c in res]
        results = [truncate_result(c.text, spec.max_tool_response_length) for c in res]
        ids = tool_turn_ids(tokenizer, results, lambda texts: tool_turn_text(tokenizer, texts, spec))  # results as text
        room = budget - len(r.ids)
        if len(ids) >= room:  # no room left for another model turn
            ids, r.reason = ids[:room], "length"
        r.add(ids, 0, None, "tool", tokenizer.decode(ids, skip_special_tokens=False))


def tool_metrics(turns: list[list[dict]]) -> dict[str, float]:
    """Per sample, over the rows of a multi-turn rollout: tools/calls_per_sample (calls the model wrote),
    tools/errors and tools/timeouts (calls that failed / timed out), turns/mean (model turns),
    tools/response_tokens_per_sample (tokens of tool turns)."""
    n = max(len(turns), 1)
    ran = [c for row in turns for t in row if t["role"] == "assistant" for c in t.get("calls", [])]
    return {
        "tools/calls_per_sample": len(ran) / n,
        "tools/errors": sum(bool(c.get("error")) for c in ran) / n,
        "tools/timeouts": sum(bool(c.get("timeout")) for c in ran) / n,
        "turns/mean": sum(t["role"] == "assistant" for row in turns for t in row) / n,
        "tools/response_tokens_per_sample": sum(t["end"] - t["start"] for row in turns for t in row
                                                if t["role"] == "tool") / n,
    }


def agent_spec(args, tokenizer) -> AgentSpec | None:
    """The multi-turn settings of a run (None when `multi_turn` is off), its tools loaded and checked now."""
    from ppokit.tools import load_tools
    from ppokit.tools.parse import detect_format

    if not args.multi_turn:
        return None
    return AgentSpec(tools=load_tools(args.tools, args.tool_config_path),
                     tool_format=detect_format(getattr(tokenizer, "chat_template", None), args.tool_format),
                     max_assistant_turns=args.max_assistant_turns,
                     max_tool_response_length=args.max_tool_response_length,
                     max_parallel_calls=args.max_parallel_calls, tool_timeout=args.tool_timeout)


def turns_text(turns: list[dict]) -> str:
    """A multi-turn response with its segments marked: "[model] ..." (trained on) and "[tool] ..." (loss_mask 0)."""
    return "\n".join(f"[{'model' if t['role'] == 'assistant' else t['role']}] {t['text']}" for t in turns)
