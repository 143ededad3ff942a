"""What Python shows a person: Session and RolloutBatch reprs, one-sentence assignment errors, plain tracebacks."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from session_helpers import distinct_chars, tiny_overrides

from ppokit.args import load_arguments
from ppokit.session import Session


@pytest.fixture(scope="module")
def session(tiny_model_path, tmp_path_factory):
    root = tmp_path_factory.mktemp("reprs")
    prompts = root / "train.jsonl"
    prompts.write_text("".join(f'{{"prompt": "say a {i}:"}}\n' for i in range(8)))
    args = load_arguments(None, overrides=tiny_overrides(tiny_model_path, str(prompts), root, max_steps=5))
    return Session(args, reward_functions=[distinct_chars])


def test_session_repr_names_model_algorithm_step_output_and_reward(session):
    assert repr(session) == (f"Session(model={session.args.actor_model_name_or_path!r}, algorithm='grpo', "
                             f"step=0/5, output_dir={session.args.output_dir!r}, no step yet)")
    metrics = session.step()
    assert repr(session).endswith(f"step=1/5, output_dir={session.args.output_dir!r}, "
                                  f"last reward/mean={metrics['reward/mean']:.3g})")


def test_rollout_batch_repr_is_a_summary_and_html_a_table(session):
    batch = session.rollout()
    text = repr(batch)
    assert "\n" not in text and "tensor" not in text and "_prompt_ids" not in text and len(text) < 300
    groups = session.plan.prompts_per_step
    assert text.startswith(f"RolloutBatch({len(batch)} sequences = {groups} prompts x {session.args.rollout_n}, ")
    assert text.endswith("not scored, no advantages yet)")
    session.score(batch)
    session.compute_advantages(batch)
    assert batch.scores is None  # a value: the calls made new ones
    batch = session.latest(batch)
    mean = float(batch.scores.mean())
    assert f"reward mean {mean:.3g}" in repr(batch) and repr(batch).endswith("advantages computed)")
    page = batch._repr_html_()
    assert page.startswith("<p><code>RolloutBatch(") and page.count("<tr>") == len(batch) + 1


def test_a_bad_assignment_is_one_sentence(session):
    with pytest.raises(ValueError) as info:
        session.args.temperature = -1.0
    assert str(info.value) == ("temperature=-1.0 is not valid: expected float (Input should be greater than or "
                               f"equal to 0); temperature is still {session.args.temperature!r}.")
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no pydantic report chained on
    with pytest.raises(ValueError, match=r"^there is no argument 'temprature'; did you mean temperature\?$"):
        session.args.temprature = 0.5
    session.args.temperature = 0.7
    assert session.args.temperature == 0.7


def test_a_single_process_run_leaves_tracebacks_without_a_rank_prefix():
    code = ("import sys\nfrom ppokit.engine import init_distributed\ninit_distributed()\n"
            "import torch.distributed as dist\nassert dist.is_initialized()\nraise KeyError('boom')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in __import__("os").environ.items()
                               if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")})
    assert done.returncode == 1 and "KeyError: 'boom'" in done.stderr
    assert not re.search(r"^\[rank0\]:", done.stderr, re.M), done.stderr
