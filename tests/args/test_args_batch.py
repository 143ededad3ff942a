"""The batch arithmetic in both modes, against numbers computed by hand (PADDLE_SCHEMA.md section 4)."""

from pathlib import Path

import pytest

from ppokit.args import ConfigError, batch_plan, load_arguments

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "paddle"


def plan_of(world_size=1, **overrides):
    return batch_plan(load_arguments(overrides=overrides), world_size)


def test_qwen_grpo_c7d44f2bf_on_4_gpus():
    args = load_arguments(FIXTURES / "qwen_grpo_argument_c7d44f2bf.yaml")
    # PaddleNLP's README run: TP2 x sharding 2 -> 2 data ranks: 64 sequences -> 32 per rank -> 4 micro-batches
    # of 8; accumulation 8 x 8 x 1 / 8 / 2 = 4; one optimizer step per rollout.
    p = batch_plan(args, world_size=2)
    assert (p.prompts_per_step, p.sequences_per_step, p.prompts_per_rank, p.sequences_per_rank) == (8, 64, 4, 32)
    assert (p.mini_batch_prompts, p.mini_batch_sequences_per_rank, p.micro_batch_size) == (8, 32, 8)
    assert (p.gradient_accumulation_steps, p.optimizer_steps_per_rollout, p.mode) == (4, 1, "global")
    # ppokit on the same 4 GPUs: all 4 are data-parallel -> 16 sequences per rank -> accumulation 2.
    p = batch_plan(args, world_size=4)
    assert (p.prompts_per_rank, p.sequences_per_rank, p.mini_batch_sequences_per_rank) == (2, 16, 16)
    assert (p.gradient_accumulation_steps, p.optimizer_steps_per_rollout) == (2, 1)


def test_qwen_ppo_i_on_8_gpus():
    i_config = {"rl_algorithm": "ppo", "global_batch_size": 256, "rollout_n": 1, "global_mini_batch_size": 64,
                "per_device_train_batch_size": 2}
    # PaddleNLP: 8 GPUs with TP2 -> 4 data ranks: accumulation 64 / 2 / 4 = 8, 256 / 64 = 4 steps per rollout.
    p = plan_of(4, **i_config)
    assert (p.gradient_accumulation_steps, p.optimizer_steps_per_rollout, p.prompts_per_rank) == (8, 4, 64)
    # ppokit: 8 data ranks: 64 / 8 = 8 sequences per rank per step -> 4 micro-batches of 2.
    p = plan_of(8, **i_config)
    assert (p.mini_batch_sequences_per_rank, p.gradient_accumulation_steps, p.optimizer_steps_per_rollout) == (8, 4, 4)
    assert (p.sequences_per_step, p.sequences_per_rank) == (256, 32)


def test_update_iters_multiplies_optimizer_steps_not_accumulation():
    # ppokit: 2 passes x (16 / 4) mini-batches = 8 steps of 4 x 4 = 16 sequences = 4 micro-batches of 4.
    # (PaddleNLP E5+ would instead make 16 / 4 = 4 steps with accumulation 4 x 4 x 2 / 4 = 8.)
    p = plan_of(rl_algorithm="grpo", global_batch_size=16, global_mini_batch_size=4, rollout_n=4,
                update_iters=2, per_device_train_batch_size=4)
    assert (p.optimizer_steps_per_rollout, p.gradient_accumulation_steps, p.update_iters) == (8, 4, 2)


def test_mini_batch_defaults_to_global_batch():
    p = plan_of(3, global_batch_size=6, rollout_n=1, per_device_train_batch_size=1)
    assert (p.mini_batch_prompts, p.mini_batch_sequences_per_rank, p.gradient_accumulation_steps) == (6, 2, 2)


def test_llama_grpo_3b97a283e_per_device():
    args = load_arguments(FIXTURES / "llama_grpo_argument_3b97a283e.json")
    # Schema example (TP8 -> 1 data rank): 32 prompts x 8 = 256 sequences, 32 micro-batches of 8, one step.
    p = batch_plan(args, 1)
    assert (p.prompts_per_step, p.sequences_per_step, p.micro_batch_size, p.gradient_accumulation_steps) == (32, 256, 8, 32)
    assert (p.mini_batch_sequences_per_rank, p.mini_batch_prompts, p.optimizer_steps_per_rollout) == (256, 32, 1)
    assert p.mode == "per_device"
    # tensor_parallel_degree 8: PaddleNLP counts per_device_* per data-parallel rank (world / TP), so 2 or 8 ranks
    # still hold one data-parallel rank and draw 32 prompts; ppokit splits them over all its (data-parallel) ranks.
    p = batch_plan(args, 2)
    assert (p.prompts_per_step, p.sequences_per_rank, p.mini_batch_prompts, p.optimizer_steps_per_rollout) == (32, 128, 32, 1)
    assert (p.data_parallel_size, p.gradient_accumulation_steps) == (1, 16)
    p = batch_plan(args, 8)
    assert (p.prompts_per_step, p.prompts_per_rank, p.mini_batch_sequences_per_rank) == (32, 4, 32)
    assert (p.gradient_accumulation_steps, p.optimizer_steps_per_rollout, p.data_parallel_size) == (4, 1, 1)
    p = batch_plan(args, 16)  # two TP-8 groups: two data-parallel ranks
    assert (p.prompts_per_step, p.data_parallel_size, p.mini_batch_prompts) == (64, 2, 64)
    args.tensor_parallel_degree = 1  # without TP every rank is a data-parallel rank: per-device sizes scale
    p = batch_plan(args, 2)
    assert (p.prompts_per_step, p.sequences_per_rank, p.mini_batch_prompts, p.optimizer_steps_per_rollout) == (64, 256, 64, 1)
    assert (p.data_parallel_size, p.gradient_accumulation_steps) == (2, 32)


def test_per_device_update_iters_and_smaller_mini_batches():
    # 32 prompts x 8 = 256 sequences per rank; mini-batch 8 x 8 = 64 sequences = 8 prompts; 2 x 32 / 8 = 8 steps.
    p = plan_of(rl_algorithm="grpo", rollout_n=8, per_device_prompt_batch_size=32, per_device_train_batch_size=8,
                gradient_accumulation_steps=8, update_iters=2)
    assert (p.mini_batch_prompts, p.gradient_accumulation_steps, p.optimizer_steps_per_rollout) == (8, 8, 8)


def test_dynamic_sampling_generation_batch():
    p = plan_of(rl_algorithm="dapo", rollout_n=4, global_batch_size=8, global_gen_batch_size=16,
                dynamic_sampling=True)
    assert (p.prompts_per_step, p.gen_prompts_per_step, p.sequences_per_step) == (8, 16, 32)
    p = plan_of(rl_algorithm="dapo", rollout_n=4, global_batch_size=8, global_gen_batch_size=16)
    assert p.gen_prompts_per_step == 8  # no dynamic sampling -> global_batch_size
    p = plan_of(2, rl_algorithm="dapo", rollout_n=4, per_device_prompt_batch_size=16, per_device_sample_batch_size=8,
                dynamic_sampling=True, per_device_train_batch_size=4, gradient_accumulation_steps=2)
    assert (p.prompts_per_step, p.gen_prompts_per_step, p.sequences_per_rank, p.optimizer_steps_per_rollout) == (16, 32, 32, 4)


def test_assigning_global_batch_size_switches_to_global_mode():
    args = load_arguments(overrides={"per_device_prompt_batch_size": 4})
    assert batch_plan(args).mode == "per_device" and batch_plan(args).prompts_per_step == 4
    args.global_batch_size = 2
    assert batch_plan(args).mode == "global" and batch_plan(args).prompts_per_step == 2


BAD = [
    ({"global_batch_size": 6}, 4, "global_batch_size=6 prompts cannot be split over 4 ranks; make it a multiple of 4"),
    ({"global_batch_size": 8, "global_mini_batch_size": 3}, 1,
     "global_mini_batch_size=3 must divide global_batch_size=8 so each rollout splits into whole mini-batches"),
    ({"global_batch_size": 8, "global_mini_batch_size": 16}, 1,
     "global_mini_batch_size=16 must divide global_batch_size=8 so each rollout splits into whole mini-batches"),
    ({"global_batch_size": 8, "global_mini_batch_size": 2, "rollout_n": 1}, 4,
     "a mini-batch of global_mini_batch_size x rollout_n = 2 x 1 = 2 sequences cannot be split over 4 ranks; "
     "make it a multiple of 4"),
    ({"global_batch_size": 8, "rollout_n": 2, "per_device_train_batch_size": 3}, 1,
     "global_mini_batch_size x rollout_n / world_size = 8 x 2 / 1 = 16 sequences per rank per optimizer step, "
     "which per_device_train_batch_size=3 must divide; choose a micro-batch that divides 16"),
    ({"global_batch_size": 8, "global_gen_batch_size": 12, "dynamic_sampling": True}, 8,
     "global_gen_batch_size=12 prompts cannot be split over 8 ranks; make it a multiple of 8"),
    ({"global_batch_size": 8, "global_gen_batch_size": 4, "dynamic_sampling": True}, 1,
     "global_gen_batch_size=4 is smaller than global_batch_size=8; dynamic sampling generates at least the "
     "prompts it keeps"),
    ({"per_device_prompt_batch_size": 6, "per_device_train_batch_size": 4}, 1,
     "each rank has per-device prompts x rollout_n = 6 x 1 = 6 sequences per step, which "
     "per_device_train_batch_size x gradient_accumulation_steps = 4 x 1 = 4 sequences per optimizer step must divide"),
    ({"per_device_prompt_batch_size": 4, "rollout_n": 4, "per_device_train_batch_size": 2}, 1,
     "an optimizer step sees per_device_train_batch_size x gradient_accumulation_steps x world_size = 2 x 1 x 1 "
     "= 2 sequences, which must be whole groups of rollout_n=4; set global_batch_size to use the global batch "
     "rules, or make that product a multiple of 4"),
    ({"per_device_prompt_batch_size": 4, "per_device_sample_batch_size": 8, "dynamic_sampling": True}, 1,
     "per_device_prompt_batch_size=4 is smaller than per_device_sample_batch_size=8; dynamic sampling "
     "generates at least the prompts it keeps"),
]


@pytest.mark.parametrize(("overrides", "world", "message"), BAD)
def test_divisibility_errors_explain_the_numbers(overrides, world, message):
    if world == 1:  # load_arguments runs the plan for WORLD_SIZE (1 here) and names the source
        with pytest.raises(ConfigError) as info:
            load_arguments(overrides=overrides)
        assert str(info.value) == f"overrides: Batch sizes do not divide: {message}."
    else:  # fine on one process, refused on `world` ranks
        args = load_arguments(overrides=overrides)
        with pytest.raises(ConfigError) as info:
            batch_plan(args, world)
        assert str(info.value) == f"Batch sizes do not divide: {message}."


def test_world_size_must_be_positive():
    with pytest.raises(ConfigError, match="world_size must be at least 1, got 0."):
        batch_plan(load_arguments(), 0)


def test_a_micro_batch_larger_than_a_rank_has_is_capped_with_a_note():
    args = load_arguments(overrides={"global_batch_size": 8, "rollout_n": 2, "per_device_train_batch_size": 32})
    plan = batch_plan(args, 1)
    assert (plan.micro_batch_size, plan.gradient_accumulation_steps) == (16, 1)  # 8 x 2 sequences on one rank
    assert plan.notes == ("per_device_train_batch_size=32 is more than the 16 sequences each of 1 ranks has per "
                          "optimizer step; micro-batches of 16 are used",)
    assert batch_plan(args, 4).micro_batch_size == 4 and batch_plan(args, 4).gradient_accumulation_steps == 1
    fits = load_arguments(overrides={"global_batch_size": 8, "rollout_n": 2, "per_device_train_batch_size": 8})
    assert batch_plan(fits, 1).notes == () and batch_plan(fits, 1).gradient_accumulation_steps == 2


SHIPPED = sorted(p for p in (Path(__file__).resolve().parents[2] / "config").rglob("*") if p.suffix in
                 (".json", ".yaml"))


@pytest.mark.parametrize("world", [1, 2, 4, 8])
@pytest.mark.parametrize("config", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_config_runs_unchanged_on_1_2_4_and_8_ranks(config, world):
    args = load_arguments(str(config))
    plan = batch_plan(args, world)
    assert plan.prompts_per_rank * world == plan.prompts_per_step  # whole groups on every rank
    assert plan.micro_batch_size * plan.gradient_accumulation_steps == plan.mini_batch_sequences_per_rank
    assert plan.micro_batch_size <= args.per_device_train_batch_size
