"""Partial rollouts in the asynchronous trainer (issue 37 item 4): with the threaded producer, rows still being
generated when the update's weights arrive finish on the old weights (partial_rollout: finish, the default:
the threaded schedule's batches to the bit, counted as async/rows_finished_on_old) or switch to the new ones
between two tokens (switch; at token `partial_rollout_token`, so the run repeats to the bit), each token
recording the policy version that sampled it. The engine-level proofs (which weights sample the tokens after the
switch) are tests/rollout/test_weight_switch.py."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from ppokit.args import ConfigError, load_arguments
from ppokit.session import Session
from ppokit.testing import save_tiny_model

REWARD = "def varied(prompts, responses, **kw):\n    return [float(sum(map(ord, r)) % 5) for r in responses]\n"


def tiny_args(root: Path, **overrides) -> dict:
    model = root.parent / "model"
    if not model.exists():
        save_tiny_model(model, seed=0)
    data, reward = root.parent / "train.jsonl", root.parent / "reward.py"
    data.write_text("".join(json.dumps({"prompt": f"say a {i}:"}) + "\n" for i in range(16)))
    reward.write_text(REWARD)
    args = dict(actor_model_name_or_path=str(model), train_datasets=str(data), reward_functions=f"{reward}:varied",
                global_batch_size=4, rollout_n=2, global_mini_batch_size=4, per_device_train_batch_size=4,
                max_dec_len=6, max_prompt_len=32, max_length=64, learning_rate=1e-3, max_steps=6,
                output_dir=str(root / "out"), logging_dir=str(root / "vdl"), report_to=["none"], seed=1,
                disable_tqdm=True, save_strategy="no", rl_algorithm="grpo", kl_loss_coeff=0.0,
                staleness_threshold=1, rollout_is="token", async_producer="thread")
    args.update(overrides)
    return args


def numbers(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.startswith(("timing/", "memory/", "throughput/"))}


def check_versions(batch, switch_at: int | None) -> None:
    """Per row: versions never go down over its tokens, are its policy version or the next; with a scheduled switch,
    the tokens before `switch_at` are the row's own version and those from it the next."""
    pv, tv, mask = batch.policy_version[:, None], batch.token_version, batch.loss_mask > 0
    assert tv.shape == batch.loss_mask.shape
    assert (tv[:, 1:] >= tv[:, :-1]).all()
    assert ((tv == pv) | (tv == pv + 1))[mask].all()
    if switch_at is not None:
        assert (tv[:, :switch_at] == pv)[mask[:, :switch_at]].all()
        assert (tv[:, switch_at:] == pv + 1)[mask[:, switch_at:]].all()


def test_the_default_finishes_rows_on_the_old_weights_and_counts_them(tmp_path):
    s = Session(load_arguments(None, overrides=tiny_args(tmp_path / "f")))
    assert s.args.partial_rollout == "finish"
    metrics = [s.step() for _ in range(2)]
    assert "async/rows_finished_on_old" not in metrics[0]  # batch 0 is made before any update: nothing overlaps
    assert 0 <= metrics[1]["async/rows_finished_on_old"] <= len(s.last_batch)
    assert s.last_batch.token_version is None and "async/tokens_from_newer" not in metrics[1]
    s.close()


def test_a_scheduled_switch_records_token_versions_repeats_to_the_bit_and_survives_a_resume(tmp_path):
    """Batches 1.. are generated beside an update: their tokens from index 2 on come from the next version. A
    checkpoint's queue keeps the token versions, and the resumed run continues exactly (it generates the next
    batch, switch included, on its own: the same tokens, versions and metrics)."""
    a = Session(load_arguments(None, overrides=tiny_args(tmp_path / "a", partial_rollout="switch",
                                                          partial_rollout_token=2)))
    first = a.step()
    assert first["async/tokens_from_newer"] == 0.0  # batch 0: made inline, before any update
    assert (a.last_batch.token_version == 0).all()
    second = a.step()
    assert second["async/tokens_from_newer"] > 0
    check_versions(a.last_batch, 2)  # batch 1: version 0 until token 2, version 1 after
    assert second["async/rows_finished_on_old"] == 0.0  # scheduled: every row still running switches
    assert "partial rollouts switch at token 2" in repr(a)
    path = a.save()
    queued = a.pipeline.queue[0]
    assert queued.token_version is not None
    saved = torch.load(path / "state_rollout_queue_0.pt", weights_only=False)["queue"][0]
    assert torch.equal(saved.token_version, queued.token_version)
    rest = [numbers(a.step()) for _ in range(2)]
    check_versions(a.last_batch, 2)
    shutil.copytree(path, tmp_path / "b" / "out" / path.name)
    b = Session.resume(str(tmp_path / "b" / "out"))
    assert torch.equal(b.pipeline.queue[0].token_version, queued.token_version)
    again = [numbers(b.step()) for _ in range(2)]
    assert again == rest and all(m["async/tokens_from_newer"] > 0 for m in again)
    wa, wb = dict(a.model.named_parameters()), dict(b.model.named_parameters())
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    a.close()
    b.close()


def test_switch_needs_a_producer_beside_the_update_and_verl_booleans_are_accepted(tmp_path):
    with pytest.raises(ConfigError, match="async_producer: thread"):
        load_arguments(None, overrides=tiny_args(tmp_path / "i", partial_rollout="switch", async_producer="inline"))
    with pytest.raises(ConfigError, match="single-turn, no dynamic_sampling"):
        load_arguments(None, overrides=tiny_args(tmp_path / "d", partial_rollout="switch", dynamic_sampling=True))
    assert load_arguments(None, overrides=tiny_args(tmp_path / "v", partial_rollout=True)).partial_rollout == "switch"
    assert load_arguments(None, overrides=tiny_args(tmp_path / "v", partial_rollout="false")).partial_rollout == \
        "finish"


def test_an_engine_without_a_decoding_loop_refuses_switch_with_a_sentence():
    from ppokit.errors import PpokitError
    from ppokit.training.pipeline import RolloutPipeline, threaded_engine

    class VllmLike:  # holds its own weights, takes no WeightSwitch
        def generate(self, prompts, sampling): ...

        def update_weights(self, model): ...

    with pytest.raises(PpokitError, match="partial_rollout: switch needs the hf engine"):
        threaded_engine(VllmLike(), None, RolloutPipeline(1, threaded=True, partial_rollout="switch"))
    engine = threaded_engine(VllmLike(), None, RolloutPipeline(1, threaded=True))  # finish: as before
    assert engine.pipeline.switch is None
