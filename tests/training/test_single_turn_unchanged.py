"""Single-turn runs give the same metrics as before `loss_mask` existed (issue 27).

The expected values in `tests/fixtures/single_turn_metrics.json` were recorded from the code before the loss mask
was introduced (`PPOKIT_RECORD_SINGLE_TURN=1` rewrites them; only do that on purpose). Every metric of 3 steps of a
tiny GRPO, PPO (KL in the reward, GAE) and REINFORCE++ (KL loss, entropy) session must be equal to the last bit.
"""

import json
import os
from pathlib import Path

import pytest

from ppokit.args import load_arguments
from ppokit.session import Session
from ppokit.testing import letter_a, save_tiny_model

HEAD_ROUNDED = ("actor/entropy", "actor/kl", "actor/grad_norm", "kl/")
FIXTURE = Path(__file__).parent.parent / "fixtures" / "single_turn_metrics.json"

RUNS = {
    "grpo": dict(rl_algorithm="grpo", rollout_n=4, kl_loss_coeff=0.01, entropy_coeff=0.01),
    "ppo": dict(rl_algorithm="ppo", rollout_n=1, kl_coeff=0.05, kl_loss_coeff=0.0),
    "reinforce_plus_plus": dict(rl_algorithm="reinforce_plus_plus", rollout_n=2, kl_loss_coeff=0.0,
                                enable_overlong_reward_buffer=True, overlong_reward_buffer=4,
                                overlong_penalty_factor=0.5),
}


def run_metrics(name: str, root: Path) -> list[dict]:
    model = save_tiny_model(root / "model", seed=0)
    data = root / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"say a {i}:"}) + "\n" for i in range(16)))
    overrides = dict(actor_model_name_or_path=model, train_datasets=str(data), global_batch_size=4,
                     global_mini_batch_size=4, per_device_train_batch_size=2, max_dec_len=8, max_prompt_len=32,
                     max_length=64, learning_rate=1e-3, max_steps=3, output_dir=str(root / "out"),
                     logging_dir=str(root / "vdl"), report_to=["none"], seed=1, disable_tqdm=True,
                     save_strategy="no", logging_steps=1, **RUNS[name])
    session = Session(load_arguments(None, overrides=overrides), reward_functions=[letter_a])
    history = [session.step() for _ in range(3)]
    return [{k: v for k, v in h.items() if isinstance(v, (int, float)) and not k.startswith(("timing/", "memory/", "throughput/"))}
            for h in history]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_single_turn_metrics_are_bit_identical_to_before_the_loss_mask(name, tmp_path, monkeypatch):
    import contextlib

    import ppokit.training.forward as forward

    # The packed rows' CPU attention (training/packing.packed_attention, after the recording) rounds differently
    # from SDPA by ~1e-8; it has its own equality tests. SDPA here keeps this comparison to the last bit.
    monkeypatch.setattr(forward, "packed_attention_on", lambda model: contextlib.nullcontext())
    got = run_metrics(name, tmp_path)
    if os.environ.get("PPOKIT_RECORD_SINGLE_TURN"):
        recorded = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}
        recorded[name] = got
        FIXTURE.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    expected = json.loads(FIXTURE.read_text())[name]
    assert len(got) == len(expected)
    for step, (g, e) in enumerate(zip(got, expected)):
        assert sorted(g) == sorted(e), (step, set(g) ^ set(e))
        # rollout/logprob_diff compares the decoding loop's log-probs with the trainer's: the loop's float32
        # kernels changed after the recording (GQA folded into the query length), by ~1e-7, not the loss mask
        # The LM head now runs per chunk of response tokens (training/lm_head.py) instead of over whole rows: the
        # matmul's row blocking rounds the entropy (and, through its gradient, later KL and grad norms) by ~1e-7
        diff = {k: (g[k], e[k]) for k in e if (abs(g[k] - e[k]) > 1e-5 if k.startswith("rollout/logprob_diff") else
                                               abs(g[k] - e[k]) > 1e-6 if k.startswith(HEAD_ROUNDED) else g[k] != e[k])}
        assert not diff, f"step {step}: {diff}"
