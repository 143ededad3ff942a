"""One run plan (issue 23): epoch-mode runs train for their whole length, every schedule follows PaddleNLP's
formulas (computed here independently, by hand), and every shipped and fixture config logs the LR it should."""

import json
import math
from pathlib import Path

import pytest

from ppokit.args import batch_plan, load_arguments, run_plan
from ppokit.session import Session
from ppokit.testing import letter_a

ROOT = Path(__file__).resolve().parents[2]
CONFIG_FILES = sorted([*ROOT.glob("tests/fixtures/paddle*/*.json"), *ROOT.glob("tests/fixtures/paddle*/*.yaml"),
                       *ROOT.glob("config/**/*.json"), *ROOT.glob("config/**/*.yaml")])
LR_END = 1e-7  # PaddleNLP's polynomial schedule ends at get_scheduler's default lr_end


def paddle_lr(k, *, kind, total, warmup, lr, min_lr=None, decay=None):
    """The learning rate PaddleNLP's schedulers give optimizer step k (0-based; the (k+1)-th update uses it),
    written out from PaddleNLP's formulas (get_scheduler and the RL scheduler), independently of ppokit."""
    if min_lr is not None and kind in ("linear", "cosine"):  # LinearAnnealing/CosineAnnealingWithWarmupDecay
        decay = decay or total
        if warmup > 0 and k <= warmup:
            return lr * k / warmup
        if k > decay:
            return min_lr
        ratio = min(1.0, (k - warmup) / (decay - warmup))
        coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0) if kind == "cosine" else 1.0 - ratio
        return min_lr + coeff * (lr - min_lr)
    if kind == "constant":
        return lr
    if k < warmup:
        return lr * k / warmup
    progress = (k - warmup) / max(1, total - warmup)
    if kind == "constant_with_warmup":
        return lr
    if kind == "linear":
        return lr * max(0.0, 1.0 - progress)
    if kind == "cosine":
        return lr * max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    if kind == "polynomial":
        return LR_END if k > total else (lr - LR_END) * (1 - progress) + LR_END
    raise AssertionError(kind)


def test_hand_computed_schedules():
    # linear, T=10, w=2, lr=1: steps 0..3 -> 0, .5, 1, 7/8
    assert [paddle_lr(k, kind="linear", total=10, warmup=2, lr=1.0) for k in range(4)] == [0, 0.5, 1.0, 0.875]
    assert paddle_lr(6, kind="cosine", total=10, warmup=2, lr=1.0) == pytest.approx(0.5)  # half way down
    assert paddle_lr(5, kind="cosine", total=10, warmup=0, lr=2.0, min_lr=1.0) == pytest.approx(1.5)


@pytest.mark.parametrize("epochs,rows,prompts,drop_last,steps", [(1, 30, 1, False, 30), (2, 10, 4, False, 6),
                                                                 (2, 10, 4, True, 4), (0.5, 10, 4, False, 2)])
def test_epoch_mode_rollout_steps(epochs, rows, prompts, drop_last, steps):
    args = load_arguments(overrides=dict(max_steps=-1, num_train_epochs=epochs, global_batch_size=prompts,
                                         rollout_n=2, dataloader_drop_last=drop_last, lr_scheduler_type="cosine",
                                         warmup_ratio=0.03))
    batches = rows // prompts if drop_last else -(-rows // prompts)
    plan = run_plan(args, batch_plan(args, 1), batches)
    assert plan.rollout_steps == steps and plan.mode == "epochs"
    assert plan.actor_schedule.total_steps == steps  # one optimizer step per rollout step here
    assert plan.actor_schedule.warmup_steps == math.ceil(0.03 * steps)
    assert plan.prompts_per_step == prompts  # the batch plan reads through
    assert f"{steps} rollout steps = {epochs:g} epoch" in plan.describe()


def test_plan_counts_optimizer_steps_and_decay_in_rollout_steps():
    args = load_arguments(overrides=dict(max_steps=10, global_batch_size=4, global_mini_batch_size=2, rollout_n=2,
                                         update_iters=2, lr_scheduler_type="linear", min_learning_rate=1e-6,
                                         decay_steps=5, warmup_steps=3, critic_warmup_ratio=0.5, rl_algorithm="ppo"))
    plan = run_plan(args, batch_plan(args, 1), None)
    assert plan.optimizer_steps_per_rollout == 4 and plan.optimizer_steps == 40
    assert plan.actor_schedule.decay_steps == 20  # 5 rollout steps x 4 optimizer steps
    assert plan.actor_schedule.warmup_steps == 3 == plan.critic_schedule.warmup_steps  # warmup_steps wins
    assert "40 optimizer steps (4 per rollout step)" in repr(plan)
    assert "; 2 passes over mini-batches of 2 prompts" in repr(plan) and "critic: lr " in repr(plan)


def test_the_plan_reads_as_text_and_grpo_shows_no_critic():
    args = load_arguments(ROOT / "config" / "grpo_argument.json")
    lines = run_plan(args, batch_plan(args, 1), None).lines()
    assert lines[0] == "30 rollout steps (max_steps); 30 optimizer steps (1 per rollout step); lr 2e-05, warmup 0, " \
                       "linear to 0"  # what the README quotes
    assert "; 1 pass over mini-batches of 8 prompts" in lines[1]
    assert not any(line.startswith("critic") for line in lines)  # GRPO trains no critic
    assert lines[-1] == "evaluate every 10 steps; save every 10 steps and the final model after the last step; log " \
                        "every step"
    args.max_steps = 4  # what train() does: evaluate and save at the end, not "every 10 steps" that never come
    lines = run_plan(args, batch_plan(args, 1), None).lines()
    assert lines[-1] == "evaluate after the last step (every 10 steps: none within 4); save the final model after " \
                        "the last step (every 10 steps: none within 4); log every step"
    args.max_steps = 25
    assert run_plan(args, batch_plan(args, 1), None).lines()[-1].startswith(
        "evaluate every 10 steps and after the last step; save every 10 steps and the final model after")


def test_the_arguments_repr_is_short_and_starts_with_what_differs_from_the_defaults():
    args = load_arguments(ROOT / "config" / "grpo_argument.json", overrides={"temperature": 0.7})
    text = repr(args)
    assert text.startswith("Arguments(") and len(text) < 1500 and str(args) == text
    assert text.splitlines()[1].strip().startswith("actor_model_name_or_path='smollm2-135m-instruct', rl_algorithm=")
    assert "temperature=0.7" in text and "top_p=" not in text  # a default is counted, not shown
    assert text.rstrip(")").endswith("keys at their defaults: args.to_dict() has them all")


def tiny_overrides(path: Path, model_dir: str, data: str, tmp_path: Path) -> dict:
    """The file's schedule and mode kept; the model, data, lengths and batch sizes made tiny (2 optimizer steps
    per rollout step in both batch modes)."""
    raw = load_arguments(path)
    over = dict(actor_model_name_or_path=model_dir, reward_model_name_or_path=None, critic_model_name_or_path=None,
                train_datasets=data, train_task_config=None, eval_datasets=None, eval_task_config=None,
                ptx_datasets=None, ptx_coeff=0.0, use_rm_server=False, max_length=64, max_prompt_len=32, max_dec_len=4, min_dec_len=0,
                output_dir=str(tmp_path / "out"), logging_dir=str(tmp_path / "vdl"), do_eval=False,
                evaluation_strategy="no", save_strategy="no", bf16=False, fp16=False, fp16_opt_level="O1",
                sharding="", offload_level="", tensor_parallel_degree=1, pipeline_parallel_degree=1,
                rollout_tensor_parallel_degree=1, per_device_train_batch_size=2, rollout_n=2, critic_warmup_steps=0,
                use_fusemt=False, rollout_engine="hf", disable_tqdm=True, dynamic_sampling=False, logging_steps=1,
                lora_rank=0, recompute=False, critic_recompute=False, use_flash_attention=False, device="cpu")
    if raw.model_fields_set & {"global_batch_size"}:
        over.update(global_batch_size=4, global_mini_batch_size=2)
    else:
        over.update(per_device_prompt_batch_size=2, gradient_accumulation_steps=1)
    return over


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_config_logs_paddlenlp_learning_rates(path, tiny_model_path, tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"say a {i}:"}) + "\n" for i in range(8)))
    args = load_arguments(path, overrides=tiny_overrides(path, tiny_model_path, str(data), tmp_path))
    per_step = 4 if args.global_batch_size and "global_batch_size" in args.model_fields_set else 2
    optimizer_per_rollout = 2 * args.update_iters
    if args.max_steps > 0:
        rollout_steps = args.max_steps
    else:  # epoch mode: 8 prompts in batches of per_step
        batches = 8 // per_step if args.dataloader_drop_last else -(-8 // per_step)
        rollout_steps = math.ceil(args.num_train_epochs * batches)
    s = Session(args, reward_functions=[letter_a])
    assert s.plan.rollout_steps == rollout_steps
    assert s.plan.mode == ("max_steps" if args.max_steps > 0 else "epochs")
    total = rollout_steps * optimizer_per_rollout
    for step in range(1, min(3, rollout_steps) + 1):
        metrics = s.step()
        for side, prefix in (("actor", ""), ("critic", "critic_")):
            if f"{side}/lr" not in metrics:
                continue
            def own(key, prefix=prefix):  # PaddleNLP copies the critic_* keys that are set over the actor's
                value = getattr(args, prefix + key, None) if prefix else None
                return getattr(args, key) if value is None else value

            warmup = args.warmup_steps if args.warmup_steps > 0 else math.ceil(own("warmup_ratio") * total)
            decay = own("decay_steps")
            # the rate of the rollout step's first optimizer step (the one it was trained with), not the next one's
            expected = paddle_lr((step - 1) * optimizer_per_rollout, kind=own("lr_scheduler_type"), total=total,
                                 warmup=warmup, lr=own("learning_rate"), min_lr=own("min_learning_rate"),
                                 decay=None if decay is None else decay * optimizer_per_rollout)
            assert metrics[f"{side}/lr"] == pytest.approx(expected, rel=1e-6, abs=1e-15), (side, step)
    s.close()


def test_2024_epoch_file_trains_with_a_nonzero_learning_rate(tiny_model_path, tmp_path):
    """The reported bug: ppo_config.json (epoch mode, cosine, warmup 0.03) logged lr 1e-5, 0, 1e-5, 0, ..."""
    path = ROOT / "tests/fixtures/paddle/ppo_config_d4de12c76.json"
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"say a {i}:"}) + "\n" for i in range(16)))
    over = tiny_overrides(path, tiny_model_path, str(data), tmp_path)
    over.pop("max_length"), over.pop("max_prompt_len"), over.pop("max_dec_len")  # the file's era: max_length only
    args = load_arguments(path, overrides={**over, "max_length": 64})
    assert (args.max_prompt_len, args.max_dec_len) == (32, 32)  # max_length was the whole budget in its era
    s = Session(args.model_copy(update={"max_dec_len": 4}), reward_functions=[letter_a])
    assert s.plan.rollout_steps == 8  # 1 epoch x 16 prompts / 2 per step
    lrs = [s.step()["actor/lr"] for _ in range(4)]  # each the rate its step's first optimizer step used
    assert lrs[0] == 0.0  # warmup (1 optimizer step) starts from 0, as PaddleNLP's; the step's second one has 1e-5
    assert all(lr > 0 for lr in lrs[1:]) and lrs[1:] == sorted(lrs[1:], reverse=True)  # cosine going down
    s.close()


def test_rollout_engine_is_built_before_the_reference_and_the_optimizer(tiny_model_path, prompts_file, tmp_path,
                                                                      monkeypatch):
    """vLLM sizes its memory from what is free when it starts (issue 30 #3): it comes before the reference model
    and the optimizer state; the run plan (data read) comes before the optimizer's schedule (issue 23)."""
    import ppokit.models
    import ppokit.training.build as build

    calls = []

    def spy(name, fn):
        def wrapped(*a, **k):
            calls.append(name)
            return fn(*a, **k)
        return wrapped

    monkeypatch.setattr(build, "build_rollout_engine", spy("rollout_engine", build.build_rollout_engine))
    monkeypatch.setattr(build, "run_plan", spy("run_plan", build.run_plan))
    monkeypatch.setattr(build, "train_engine", spy("train_engine", build.train_engine))
    monkeypatch.setattr(ppokit.models, "load_reference", spy("reference", ppokit.models.load_reference))
    from session_helpers import tiny_overrides

    s = Session(load_arguments(overrides=tiny_overrides(tiny_model_path, prompts_file, tmp_path, kl_loss_coeff=0.1)),
                reward_functions=[letter_a])
    assert calls == ["run_plan", "rollout_engine", "reference", "train_engine"]
    s.close()
