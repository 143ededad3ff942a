"""With the real built-in tasks: detection, the rule reward, and the server agreeing with in-process scoring."""

from __future__ import annotations

import pytest

from ppokit.rewards import NamedReward, compute_rewards, detect_task, make_rule_reward
from ppokit.rewards.client import RewardServerClient
from ppokit.rewards.scorers import build_scorer
from ppokit.rewards.server import create_app

tasks = pytest.importorskip("ppokit.tasks")

NAMES = ("knights_knaves", "arithmetic", "countdown")


def records_of(name: str, n: int, seed: int = 0) -> list[dict]:
    rows = tasks.get(name).generate(n, seed=seed)
    out = []
    for i, row in enumerate(rows):
        extra = {k: v for k, v in row.items() if k not in ("src", "tgt", "task")}
        out.append({"prompt": row["src"][-1], "label": row["tgt"][-1], "task": row["task"],
                    "source": f"{name}.jsonl:{i + 1}", "fields": extra})
    return out


def responses_for(name: str, records: list[dict]) -> list[str]:
    """Alternately the task's own solution and a wrong answer, so scores vary."""
    task = tasks.get(name)
    return [task.solution(r) if i % 2 == 0 else "<think>no idea</think><answer>7</answer>"
            for i, r in enumerate(records)]


@pytest.mark.parametrize("name", NAMES)
def test_detect_task_recognises_generated_data(name):
    for record in records_of(name, 30, seed=1):
        assert detect_task(record["prompt"], record["label"]) == name
        assert detect_task(f"<|im_start|>user\n{record['prompt']}<|im_end|>\n<|im_start|>assistant\n") == name


def test_rule_reward_gives_max_score_to_solutions():
    records = [r for name in NAMES for r in records_of(name, 4)]
    responses = [tasks.get(r["task"]).solution(r) for r in records]
    total, per_fn = compute_rewards([NamedReward("rule", make_rule_reward())], [r["prompt"] for r in records],
                                    responses, records)
    assert total.tolist() == [tasks.get(r["task"]).max_score for r in records]
    assert per_fn["rule"].tolist() == total.tolist()


@pytest.mark.parametrize("protocol, names", [("paddle", ("knights_knaves", "arithmetic")),
                                             ("native", NAMES)])
def test_server_scores_equal_in_process_scores(live_server, protocol, names):
    """PaddleNLP's request has no fields, so it matches in process where the label is enough (KK,
    arithmetic); the native protocol carries task and fields and matches for every task."""
    records = [r for name in names for r in records_of(name, 6, seed=3)]
    prompts = [r["prompt"] for r in records]
    responses = [x for name in names for x in responses_for(name, [r for r in records if r["task"] == name])]
    local, _ = compute_rewards([NamedReward("rule", make_rule_reward())], prompts, responses, records)
    with live_server(create_app(build_scorer())) as url:
        client = RewardServerClient(url, protocol=protocol, batch_size=5)
        remote, _ = compute_rewards([NamedReward("reward_server", client, locate_errors=False)],
                                    prompts, responses, records)
    assert remote.tolist() == local.tolist()
    assert len(set(local.tolist())) > 1


def test_build_from_real_arguments():
    args_mod = pytest.importorskip("ppokit.args")
    from ppokit.rewards import build_reward_functions

    args = args_mod.load_arguments(overrides={"use_rule_reward": True, "task": "knights_knaves"})
    fns = build_reward_functions(args)
    records = records_of("knights_knaves", 2)
    for r in records:
        r["task"] = None  # the `task` argument is the default
    responses = [tasks.get("knights_knaves").solution(r) for r in records]
    total, per_fn = compute_rewards(fns, [r["prompt"] for r in records], responses, records)
    assert total.tolist() == [3.0, 3.0] and list(per_fn) == ["rule"]
    server = build_reward_functions(args_mod.load_arguments(overrides={
        "use_rm_server": True, "reward_server": "http://127.0.0.1:8731", "reward_on_error": "skip_group",
        "reward_timeout": 5.0, "reward_max_retries": 1}))
    client = server[0].fn.__self__
    assert server[0].allow_none and client.max_retries == 1 and client.endpoint == "http://127.0.0.1:8731"
