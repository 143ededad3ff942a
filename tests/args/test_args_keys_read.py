"""Every config key does what its description says, or says plainly that it has no effect (issue 15 #7).

The walk fails when a field is neither read outside ppokit/args, nor read by the batch plan / post-init rules
inside it (their results are what the trainer reads), nor listed as accepted-without-effect."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ppokit.args import Arguments, explain, load_arguments
from ppokit.args.translate import IGNORED, NO_EFFECT

PACKAGE = Path(__file__).resolve().parents[2] / "ppokit"
# Read inside ppokit/args, where they shape values the trainer reads (file -> the attribute access there).
READ_BY_ARGS = {name: "batch.py" for name in (
    "global_batch_size", "global_mini_batch_size", "global_gen_batch_size", "per_device_prompt_batch_size",
    "per_device_sample_batch_size", "per_device_train_batch_size", "gradient_accumulation_steps", "update_iters")}
READ_BY_ARGS["max_src_len"] = "rules.py"  # replaced by max_prompt_len, with a note when it differs
READ_BY_ARGS["do_train"] = "rules.py"  # run_ppo.py trains either way; false gets a note saying so
READ_BY_ARGS.update({name: "run_plan.py" for name in (  # the run plan sizes the run and both LR schedules
    "max_steps", "num_train_epochs", "warmup_ratio", "warmup_steps", "min_learning_rate", "decay_steps",
    "critic_lr_scheduler_type", "critic_warmup_ratio", "critic_min_learning_rate", "critic_decay_steps",
    # the cadences: RunPlan.due answers "is evaluation / saving / logging due now" (cadence_of)
    "evaluation_strategy", "eval_steps", "save_strategy", "save_steps", "logging_strategy", "logging_steps")})
# critic_<key> is read as option(args, "<key>", critic=True) (ppokit/training/engine_setup.py).
CRITIC_PREFIX = "critic_"


def source_outside_args() -> str:
    # the verl dialect writes keys back as verl values (``args.kl_coeff`` in an inverse): not a reader either
    files = [p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] not in ("args", "dialects")]
    return "\n".join(p.read_text() for p in files) + (PACKAGE.parent / "run_ppo.py").read_text()


def is_read(name: str, source: str) -> bool:
    """args.<name>, getattr(args, "<name>") / _attr(args, "<name>"), or a critic_ key read through its base key."""
    if re.search(rf"args\.{name}\b|(?:getattr|_attr|option)\(\s*args,\s*[\"']{name}[\"']", source):
        return True
    if name.startswith(CRITIC_PREFIX):  # engine_setup.option(args, "<key>", critic) reads critic_<key>
        return bool(re.search(rf"option\(args, [\"']{name[len(CRITIC_PREFIX):]}[\"']", source))
    return False


def test_every_field_is_read_or_declared_without_effect():
    source = source_outside_args()
    unaccounted = []
    for name in Arguments.model_fields:
        if name in IGNORED or is_read(name, source):
            continue
        base = name[len(CRITIC_PREFIX):] if name.startswith(CRITIC_PREFIX) else name  # option(args, "<key>", critic)
        if name in READ_BY_ARGS and re.search(rf"args\.{name}\b|[\"']{name}[\"']|option\(args, [\"']{base}[\"']",
                                              (PACKAGE / "args" / READ_BY_ARGS[name]).read_text()):
            continue
        unaccounted.append(name)
    assert not unaccounted, f"keys nothing reads and not declared without effect: {unaccounted}"


@pytest.mark.parametrize("name", sorted(IGNORED))
def test_no_effect_keys_say_so_in_explain(name):
    assert f"ppokit: {NO_EFFECT}, because {IGNORED[name]}." in explain(name)


def test_no_effect_key_set_by_the_user_gets_a_print_config_note():
    args = load_arguments(overrides={"balance_batch": True, "early_stopping": True})
    assert any(n.startswith(f"balance_batch=True: {NO_EFFECT}, because") for n in args.notes)
    assert any(n.startswith(f"early_stopping=True: {NO_EFFECT}, because ppokit trains to max_steps") for n in args.notes)


# ---------------------------------------------------------------- the keys now implemented


def test_chat_template_key(tmp_path):
    from ppokit.data import choose_chat_template, render_prompt
    from ppokit.testing import tiny_tokenizer

    record = {"messages": [{"role": "user", "content": "hi"}], "source": "x.jsonl:1"}
    tok = tiny_tokenizer()
    assert choose_chat_template(tok, "none", given=False) == "the tokenizer's own chat template"
    assert render_prompt(record, tok).startswith("<|im_start|>user\nhi")
    assert choose_chat_template(tok, "none", given=True) == "no chat template (chat_template: none)"
    assert render_prompt(record, tok) == "User: hi\nAssistant:"
    (tmp_path / "chat_template.json").write_text(json.dumps({"chat_template": "Q: {{ messages[0]['content'] }} A:"}))
    assert choose_chat_template(tok, str(tmp_path), given=True).startswith("the chat template from")
    assert render_prompt(record, tok) == "Q: hi A:"


def test_dropout_probabilities_reach_the_attention_modules():
    from transformers import AutoModelForCausalLM

    from ppokit.models.loading import set_dropout
    from ppokit.testing import tiny_model_config, tiny_tokenizer

    model = AutoModelForCausalLM.from_config(tiny_model_config(tiny_tokenizer()))
    notes = set_dropout(model, hidden=0.1, attention=0.5)
    rates = {m.attention_dropout for m in model.modules() if hasattr(m, "attention_dropout")}
    assert rates == {0.5} and model.config.attention_dropout == 0.5
    assert notes == ["hidden_dropout_prob=0.1 has no effect on LlamaForCausalLM: it has no such dropout"]
    ids = torch.arange(8).unsqueeze(0)
    model.train()
    assert not torch.equal(model(ids).logits, model(ids).logits)  # attention dropout is active in training
    set_dropout(model, hidden=0.0, attention=0.0)
    assert torch.equal(model(ids).logits, model(ids).logits)


def test_recompute_use_reentrant_set_explicitly_is_applied():
    from transformers import AutoModelForCausalLM

    from ppokit.models.loading import enable_recompute
    from ppokit.testing import tiny_model_config, tiny_tokenizer
    from ppokit.training.model_setup import configure_model

    def reentrant(model):
        return {m._gradient_checkpointing_func.keywords["use_reentrant"] for m in model.modules()
                if getattr(m, "_gradient_checkpointing_func", None) is not None}

    model = AutoModelForCausalLM.from_config(tiny_model_config(tiny_tokenizer()))
    enable_recompute(model)
    configure_model(load_arguments(overrides={"recompute": True}), model, recompute=True)
    assert reentrant(model) == {False}  # not set: ppokit's non-reentrant default
    configure_model(load_arguments(overrides={"recompute": True, "recompute_use_reentrant": True}), model, True)
    assert reentrant(model) == {True}


def lr_schedule_spec(args, total: int) -> dict:
    from ppokit.args.run_plan import lr_schedule

    per_rollout = total // args.max_steps if args.max_steps > 0 else 1
    return lr_schedule(args, total, per_rollout).spec()


def test_decay_steps_reaches_the_actor_schedule():
    args = load_arguments(overrides={"max_steps": 10, "decay_steps": 5, "min_learning_rate": 1e-6,
                                     "lr_scheduler_type": "cosine"})
    assert lr_schedule_spec(args, 20)["decay_steps"] == 10  # 5 of 10 rollout steps = 10 of 20 optimizer steps
    assert lr_schedule_spec(load_arguments(overrides={"max_steps": 10}), 20)["decay_steps"] == 20


def test_warmup_ratio_rounds_up_as_paddlenlp_does():
    assert lr_schedule_spec(load_arguments(overrides={"warmup_ratio": 0.03}), 30)["warmup_steps"] == 1  # 0.9 -> 1
    assert lr_schedule_spec(load_arguments(overrides={"warmup_ratio": 0.1}), 25)["warmup_steps"] == 3  # 2.5 -> 3
    assert lr_schedule_spec(load_arguments(overrides={"warmup_ratio": 0.1, "warmup_steps": 7}), 25)["warmup_steps"] == 7
    assert lr_schedule_spec(load_arguments(), 25)["warmup_steps"] == 0


def test_logging_strategy():
    from ppokit.args.run_plan import cadence_of

    def log_due(args, step, new_epoch):  # the run plan's rule the train loop asks (RunPlan.due)
        return cadence_of(args, "log").due(step, new_epoch)

    def args(strategy):
        return SimpleNamespace(logging_strategy=strategy, logging_steps=2)

    assert [log_due(args("steps"), s, False) for s in (1, 2, 3, 4)] == [False, True, False, True]
    assert [log_due(args("no"), s, True) for s in (1, 2)] == [False, False]
    assert [log_due(args("epoch"), 3, new) for new in (False, True)] == [False, True]


def test_eos_token_becomes_a_stop_token():
    from transformers import AutoModelForCausalLM

    from ppokit.args import ConfigError
    from ppokit.rollout.hf_engine import eos_token_ids
    from ppokit.testing import tiny_model_config, tiny_tokenizer
    from ppokit.training.model_setup import add_stop_token

    tok = tiny_tokenizer()
    model = AutoModelForCausalLM.from_config(tiny_model_config(tok))
    add_stop_token(model, tok, "\n")
    newline = tok.encode("\n", add_special_tokens=False)[0]
    assert newline in eos_token_ids(model, tok) and tok.eos_token_id in eos_token_ids(model, tok)
    with pytest.raises(ConfigError, match="must be exactly one token"):
        add_stop_token(model, tok, "two tokens")
