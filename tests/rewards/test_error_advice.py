"""Judge and server errors point the right way (issue 47, class 5): the advice follows what failed
(`endpoint_advice`, each reward source's own advice), a broken judge template and a bad judge_score_range are refused
at start, reward_server.py refuses judge options without a judge, and a request the server can never answer is a
4xx the client does not retry. Driven as a user does: run_ppo.py and reward_server.py as processes, real sockets."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ppokit.rewards import RewardServerError
from ppokit.rewards.client import RewardServerClient
from ppokit.rewards.errors import RewardError
from ppokit.rewards.judge import JudgeReward
from ppokit.rewards.judge.clients import HttpJudge, JudgeReply
from ppokit.rewards.judge.templates import load_template
from ppokit.testing import wait_until_serving

ROOT = Path(__file__).resolve().parents[2]
ENV = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
BROKEN = "Question: {{ question }}\nReference: {{ reference }}\nAnswer: {{ answer }\nScore it: Score: N\n"


def judge_config(tiny_model_dir, tmp_path, dead_url: str, **extra) -> str:
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"what is {i} + 1?", "label": str(i + 1)}) + "\n" for i in range(4)))
    config = dict(actor_model_name_or_path=tiny_model_dir, train_datasets=str(data), rl_algorithm="grpo",
                  global_batch_size=2, rollout_n=2, global_mini_batch_size=2, max_dec_len=4, max_prompt_len=32,
                  max_length=64, max_steps=1, output_dir=str(tmp_path / "out"), logging_dir=str(tmp_path / "vdl"),
                  save_strategy="no", disable_tqdm=True, judge_model=dead_url + "/v1", reward_max_retries=0,
                  reward_timeout=5)
    config.update(extra)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def run(script: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / script), *argv], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=300)


def error_of(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stderr[done.stderr.index("error: "):]


def test_a_refused_judge_endpoint_says_nothing_answers_not_set_judge_api_model(tiny_model_dir, tmp_path,
                                                                               closed_port_url):
    error = error_of(run("run_ppo.py", judge_config(tiny_model_dir, tmp_path, closed_port_url)))
    assert "nothing answers at http://127.0.0.1:" in error and "start the judge's server there, or correct " \
        "judge_model" in error, error
    assert "judge_api_model" not in error


def test_a_judge_failure_under_skip_group_names_the_judge_not_the_reward_server(tiny_model_dir, tmp_path,
                                                                               closed_port_url):
    config = judge_config(tiny_model_dir, tmp_path, closed_port_url, judge_api_model="m", reward_on_error="skip_group")
    error = error_of(run("run_ppo.py", config))
    assert "reward_on_error is skip_group and every one of the 2 prompt groups" in error
    assert "check the judge (http://127.0.0.1:" in error and "reward server" not in error, error


class SaysFine:
    name = "says-fine"

    def complete(self, conversations):
        return [JudgeReply(text="fine") for _ in conversations]


def test_a_failed_judge_call_under_raise_points_at_the_endpoint_not_the_template(closed_port_url):
    judge = JudgeReward(HttpJudge(closed_port_url + "/v1", api_model="m", max_retries=0, timeout=5),
                        load_template("score_10"))
    with pytest.raises(RewardError) as info:
        judge(["2+2?"], ["4"], label=["4"])
    text = str(info.value)
    assert "nothing answers at" in text and "Fix what the error names" in text, text
    assert "template" not in text.split("could not score")[1], text
    with pytest.raises(RewardError, match="Fix the template or judge_parser so that the judge answers as score"):
        JudgeReward(SaysFine(), load_template("score_10"))(["2+2?"], ["4"], label=["4"])


def test_a_jinja_syntax_error_is_refused_at_start_with_its_line(tiny_model_dir, tmp_path, closed_port_url):
    template = tmp_path / "judge.j2"
    template.write_text(BROKEN)
    config = judge_config(tiny_model_dir, tmp_path, closed_port_url, judge_api_model="m", judge_template=str(template))
    error = error_of(run("run_ppo.py", config))
    assert "line 3: unexpected '}' (Jinja syntax): 'Answer: {{ answer }'; fix that line" in error, error
    assert not (tmp_path / "out" / "metrics.jsonl").exists()  # refused before any rollout
    served = error_of(run("reward_server.py", "--judge", closed_port_url + "/v1", "--judge-api-model", "m",
                          "--judge-template", str(template), "--port", "0"))
    assert "line 3: unexpected '}' (Jinja syntax)" in served


def test_judge_score_range_on_the_command_line_and_refused_when_empty(tiny_model_dir, tmp_path, closed_port_url):
    config = judge_config(tiny_model_dir, tmp_path, closed_port_url)
    for form in ("0,100", "[0, 100]"):
        done = run("run_ppo.py", config, "--judge_score_range", form, "--print_config")
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout)["judge_score_range"] == [0.0, 100.0]
    for form in ("10,1", "[7, 7]"):
        error = error_of(run("run_ppo.py", config, "--judge_score_range", form, "--print_config"))
        low, high = json.loads(form if form.startswith("[") else f"[{form}]")
        assert f"the lowest score ({low}) must be below the highest ({high})" in error, error
    file = json.loads(Path(config).read_text())
    Path(config).write_text(json.dumps({**file, "judge_score_range": [7, 7]}))
    assert "judge_score_range=[7, 7] is not valid: the lowest score (7)" in error_of(run("run_ppo.py", config))
    served = error_of(run("reward_server.py", "--judge", closed_port_url + "/v1", "--judge-api-model", "m",
                          "--judge-score-range", "10", "1", "--port", "0"))
    assert "--judge-score-range" in served and "the lowest score (10" in served, served


def test_reward_server_refuses_judge_options_without_a_judge():
    error = error_of(run("reward_server.py", "--judge-template", "pairwise", "--port", "0"))
    assert "--judge-template applies only to an LLM judge, and no --judge MODEL is given" in error, error
    error = error_of(run("reward_server.py", "--task", "arithmetic", "--judge-max-new-tokens", "256",
                         "--judge-allow-remote", "--port", "0"))
    assert "--judge-allow-remote, --judge-max-new-tokens apply only to an LLM judge" in error, error


def test_an_unknown_task_on_v1_score_is_a_422_that_the_client_does_not_retry(closed_port_url):
    url = closed_port_url  # a free port, now bound by the server process
    proc = subprocess.Popen([sys.executable, str(ROOT / "reward_server.py"), "--port", url.rsplit(":", 1)[1],
                             "--log-level", "warning"], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        wait_until_serving(proc, url)
        item = {"prompt": "What is 5 + 2?", "response": "7", "label": "7"}
        raw = httpx.post(f"{url}/v1/score", json={"items": [item, {**item, "task": "nope"}]}, timeout=30)
        assert raw.status_code == 422 and "item 1 names task 'nope'" in raw.json()["error_msg"], raw.text
        client = RewardServerClient(url, protocol="native", max_retries=3, backoff=5.0)
        started = time.monotonic()
        with pytest.raises(RewardServerError) as info:
            client(["What is 5 + 2?"], ["7"], label=["7"], task=["nope"])
        assert info.value.status == 422 and info.value.attempts == 1 and time.monotonic() - started < 5
        assert "rejected the request itself" in str(info.value)
        assert client(["What is 5 + 2?"], ["7"], label=["7"], task=["arithmetic"]) == [1.0]
    finally:
        proc.terminate()
        proc.wait(timeout=20)
