"""verl launch lines parse to the arguments verl means (batch units, micro-batches, TP, launch plan)."""

import json

import pytest
from verl_helpers import DRGRPO_PAIR, grpo_line, ppo_line

from ppokit.args import ConfigError, load_arguments
from ppokit.args.batch import batch_plan
from ppokit.args.cli import parse_cli
from ppokit.dialects.verl.table import TABLE
from ppokit.main_ppo import launch_plan, main, parse_main_ppo

MODEL, DATA = "tiny-model", "prepared/train.parquet"


def test_ppo_line_batch_units_tp_and_launch_plan():
    args, translation, _ = parse_main_ppo(ppo_line(MODEL, DATA))
    assert translation.world_size == 2
    plan = batch_plan(args, 2)
    assert (args.rl_algorithm, args.actor_model_name_or_path, args.critic_model_name_or_path) == ("ppo", MODEL, MODEL)
    assert plan.prompts_per_step == 128 and args.global_batch_size == 128
    assert plan.mini_batch_prompts == 32 and plan.mini_batch_sequences_per_rank * 2 == 32 * args.rollout_n
    assert args.per_device_train_batch_size * 2 == 4  # verl's deprecated micro-batch is global: 4 over 2 GPUs
    assert plan.gradient_accumulation_steps == 16 // 2
    assert args.rollout_tensor_parallel_degree == 2
    launch = launch_plan(translation, ppo_line(MODEL, DATA))
    assert (launch["world_size"], launch["nnodes"], launch["launched"]) == (2, 1, False)
    assert "--nproc_per_node 2" in launch["command"] and "-m ppokit.main_ppo" in launch["command"]
    # verl's documented defaults for what the line does not say
    assert (args.learning_rate, args.critic_learning_rate, args.lam, args.clip_ratio_c) == (1e-6, 1e-5, 1.0, 3.0)
    assert (args.max_prompt_len, args.max_dec_len, args.max_length) == (512, 512, 1024)
    assert (args.kl_coeff, args.kl_loss_coeff, args.num_train_epochs) == (0.0, 0.0, 30)


def test_mini_batch_is_prompts_times_n():
    args, _, _ = parse_main_ppo([*ppo_line(MODEL, DATA), "actor_rollout_ref.rollout.n=4",
                                 "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8"])
    plan = batch_plan(args, 2)
    assert plan.mini_batch_sequences_per_rank * 2 == 32 * 4
    assert args.per_device_train_batch_size == 8  # per-GPU wins over the deprecated global one
    assert plan.sequences_per_step == 128 * 4


def test_grpo_line_with_the_guide_misspelling(caplog):
    args, translation, _ = parse_main_ppo(grpo_line(MODEL, DATA))
    assert (args.rl_algorithm, args.rollout_n, args.kl_loss_coeff, args.kl_loss_type) == ("grpo", 8, 0.001, "k3")
    warning = [n for n in translation.notes if "actor_rollout.ref.rollout.n" in n]
    assert warning and "actor_rollout_ref.rollout.n" in warning[0]
    assert batch_plan(args, 8).mini_batch_sequences_per_rank * 8 == 256 * 8  # verl default mini-batch x n


def test_drgrpo_pair_sets_the_drgrpo_loss():
    args, _, _ = parse_main_ppo([*grpo_line(MODEL, DATA), *DRGRPO_PAIR, "data.max_response_length=4"])
    assert (args.loss_agg_mode, args.norm_adv_by_std_in_grpo, args.max_dec_len) == ("seq-mean-token-sum-norm", False, 4)
    import torch

    from ppokit.algos.advantages import grpo
    from ppokit.algos.policy_loss import POLICY_LOSSES
    from ppokit.algos.reduce import reduce_loss

    # one group of two responses: scores 1 and 0; 3 and 1 valid tokens; ratio 1 (first pass)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.float32)
    adv, _ = grpo(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), mask, norm_by_std=args.norm_adv_by_std_in_grpo)
    logp = torch.zeros(2, 4)
    per_token, _ = POLICY_LOSSES[args.policy_loss](logp, logp, adv, mask, args.clip_range_ratio,
                                                   args.clip_range_ratio, args.clip_ratio_c)
    loss = reduce_loss(per_token, mask, args.loss_agg_mode, norm_constant=args.max_dec_len)
    # Dr.GRPO: A = s - mean = +0.5 / -0.5 (no std); sum of -A over tokens = 3(-0.5) + 1(0.5) = -1;
    # divided by (sequences 2 x C = max_response_length 4) = -0.125
    assert loss.item() == pytest.approx(-0.125)
    plain, _, _ = parse_main_ppo(grpo_line(MODEL, DATA))  # GRPO without the pair: std-normalised, token-mean
    adv, _ = grpo(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), mask, norm_by_std=plain.norm_adv_by_std_in_grpo)
    per_token, _ = POLICY_LOSSES["vanilla"](logp, logp, adv, mask, 0.2, 0.2, None)
    assert reduce_loss(per_token, mask, plain.loss_agg_mode).item() == pytest.approx(-2 * 0.5 ** 0.5 / 4, rel=1e-5)


def test_typo_gets_the_closest_verl_key(capsys):
    with pytest.raises(ConfigError, match=r"unknown verl key 'actor_rollout_ref.rolout.n'; did you mean "
                                          r"actor_rollout_ref.rollout.n\?"):
        parse_main_ppo(["actor_rollout_ref.rolout.n=8"])
    assert main(["data.train_bach_size=8"]) == 2
    assert "did you mean data.train_batch_size?" in capsys.readouterr().err


def test_hydra_add_remove_and_values():
    args, translation, _ = parse_main_ppo([*grpo_line(MODEL, DATA), "~actor_rollout_ref.actor.use_kl_loss",
                                           "trainer.logger=['console','visualdl']", "trainer.total_training_steps=null",
                                           "+actor_rollout_ref.model.override_config.attn_implementation=eager"])
    assert args.kl_loss_coeff == 0.0  # ~ restores verl's default (use_kl_loss false)
    assert args.report_to == ["visualdl"] and args.max_steps == -1
    assert "no_effect" in translation.mapping["actor_rollout_ref.model.override_config.attn_implementation"]
    with pytest.raises(ConfigError, match="already exists"):
        parse_main_ppo(["+data.train_batch_size=8"])


def test_unsupported_values_are_refused_with_the_choices():
    with pytest.raises(ConfigError, match="adv_estimator='remax' is not implemented.*gae, grpo"):
        parse_main_ppo(["algorithm.adv_estimator=remax"])
    with pytest.raises(ConfigError, match="rollout.name='tgi'"):
        parse_main_ppo(["actor_rollout_ref.rollout.name=tgi"])
    args, translation, _ = parse_main_ppo(["actor_rollout_ref.rollout.name=sglang"])  # same sampling: vllm
    assert args.rollout_engine == "vllm" and any("no sglang engine" in n for n in translation.notes)


def test_every_issue_key_is_in_the_table():
    listed = """data.train_files data.val_files data.train_batch_size data.max_prompt_length data.max_response_length
    data.prompt_key data.shuffle actor_rollout_ref.model.path actor_rollout_ref.model.lora_rank
    actor_rollout_ref.model.lora_alpha actor_rollout_ref.model.target_modules
    actor_rollout_ref.model.enable_gradient_checkpointing actor_rollout_ref.actor.optim.lr
    actor_rollout_ref.actor.optim.lr_warmup_steps actor_rollout_ref.actor.optim.lr_warmup_steps_ratio
    actor_rollout_ref.actor.optim.weight_decay actor_rollout_ref.actor.grad_clip actor_rollout_ref.actor.ppo_mini_batch_size
    actor_rollout_ref.actor.ppo_micro_batch_size actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu
    actor_rollout_ref.actor.ppo_epochs actor_rollout_ref.actor.clip_ratio actor_rollout_ref.actor.clip_ratio_low
    actor_rollout_ref.actor.clip_ratio_high actor_rollout_ref.actor.clip_ratio_c actor_rollout_ref.actor.loss_agg_mode
    actor_rollout_ref.actor.entropy_coeff actor_rollout_ref.actor.use_kl_loss actor_rollout_ref.actor.kl_loss_coef
    actor_rollout_ref.actor.kl_loss_type actor_rollout_ref.actor.policy_loss.loss_mode
    actor_rollout_ref.actor.fsdp_config.param_offload actor_rollout_ref.rollout.name actor_rollout_ref.rollout.n
    actor_rollout_ref.rollout.temperature actor_rollout_ref.rollout.top_p actor_rollout_ref.rollout.top_k
    actor_rollout_ref.rollout.tensor_model_parallel_size actor_rollout_ref.rollout.gpu_memory_utilization
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu
    critic.model.path critic.optim.lr critic.ppo_mini_batch_size critic.ppo_micro_batch_size_per_gpu critic.ppo_epochs
    critic.cliprange_value algorithm.adv_estimator algorithm.norm_adv_by_std_in_grpo algorithm.use_kl_in_reward
    algorithm.kl_penalty algorithm.kl_ctrl.type algorithm.kl_ctrl.kl_coef algorithm.kl_ctrl.target_kl
    algorithm.kl_ctrl.horizon algorithm.gamma algorithm.lam reward_model.enable reward_model.model.path
    custom_reward_function.path custom_reward_function.name trainer.total_epochs trainer.total_training_steps
    trainer.n_gpus_per_node trainer.nnodes trainer.save_freq trainer.test_freq trainer.default_local_dir
    trainer.project_name trainer.experiment_name trainer.logger trainer.resume_mode""".split()
    assert [k for k in listed if k not in TABLE] == []
    assert all(entry.note for entry in TABLE.values() if entry.target is None)  # every no-effect key says why


def test_value_mappings():
    args, _, _ = parse_main_ppo([
        "actor_rollout_ref.actor.optim.lr_warmup_steps=10", "actor_rollout_ref.actor.optim.warmup_style=cosine",
        "actor_rollout_ref.actor.optim.min_lr_ratio=0.1", "actor_rollout_ref.actor.fsdp_config.param_offload=True",
        "actor_rollout_ref.ref.fsdp_config.param_offload=True", "actor_rollout_ref.rollout.top_k=-1",
        "trainer.save_freq=5", "trainer.test_freq=10", "trainer.project_name=p", "trainer.experiment_name=e",
        "trainer.default_local_dir=/tmp/ckpt", "trainer.total_training_steps=7", "algorithm.use_kl_in_reward=True",
        "algorithm.kl_ctrl.kl_coef=0.05", "algorithm.kl_penalty=low_var_kl", "data.train_files=[a.parquet,b.jsonl]",
        "actor_rollout_ref.actor.policy_loss.loss_mode=gspo", "actor_rollout_ref.rollout.name=hf"])
    assert (args.warmup_steps, args.lr_scheduler_type, args.min_learning_rate) == (10, "cosine", pytest.approx(1e-7))
    assert (args.sharding, args.offload_level, args.top_k) == ("stage3 offload", ["freeze_model"], 0)
    assert (args.save_strategy, args.save_steps, args.evaluation_strategy, args.eval_steps) == ("steps", 5, "steps", 10)
    assert (args.run_name, args.output_dir, args.max_steps) == ("p/e", "/tmp/ckpt", 7)
    assert (args.kl_coeff, args.kl_penalty, args.train_datasets) == (0.05, "k3", "a.parquet,b.jsonl")
    assert (args.policy_loss, args.rollout_engine) == ("gspo", "hf")


def test_run_ppo_mixes_a_file_dashed_options_and_key_value(tmp_path, capsys):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"rl_algorithm": "ppo", "rollout_n": 1, "global_batch_size": 4, "kl_loss_coeff": 0.0,
                               "learning_rate": 1e-5, "max_steps": 9}))
    with pytest.raises(SystemExit) as stop:
        parse_cli([str(cfg), "--max_steps", "3", "algorithm.adv_estimator=grpo", "actor_rollout.ref.rollout.n=4",
                   "actor_rollout_ref.actor.use_kl_loss=True", "~learning_rate", "seed=7", "--print_config"])
    assert stop.value.code == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["rl_algorithm"], out["rollout_n"], out["max_steps"], out["seed"]) == ("grpo", 4, 3, 7)
    assert out["kl_loss_coeff"] == 0.001  # use_kl_loss=True with verl's default coefficient
    assert out["learning_rate"] == 5e-5  # ~learning_rate removed the file's value: ppokit's default
    assert out["global_batch_size"] == 4  # only the verl keys given are translated under run_ppo.py
    assert any("actor_rollout_ref.rollout.n" in n for n in out["notes"])


def test_run_ppo_without_a_file_and_typos(capsys):
    with pytest.raises(SystemExit) as stop:
        parse_cli(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2", "data.train_batch_size=4",
                   "--print_config"])
    assert stop.value.code == 0 and json.loads(capsys.readouterr().out)["rl_algorithm"] == "grpo"
    for token, hint in (("max_step=3", "did you mean max_steps?"), ("algorithm.adv_estimater=grpo",
                                                                    "did you mean algorithm.adv_estimator?")):
        with pytest.raises(SystemExit):
            parse_cli([token])
        assert hint in capsys.readouterr().err


def test_print_config_is_run_ppo_json_plus_the_verl_block(tmp_path, capsys):
    assert main([*grpo_line(MODEL, DATA), "trainer.n_gpus_per_node=1", "--print_config"]) == 0
    out = json.loads(capsys.readouterr().out)
    verl = out.pop("verl")
    assert verl["keys"]["actor_rollout_ref.rollout.n"] == {"value": 8, "sets": {"rollout_n": 8},
                                                          "note": "responses per prompt"}
    assert verl["keys"]["algorithm.adv_estimator"]["sets"] == {"rl_algorithm": "grpo"}
    assert verl["launch"]["world_size"] == 1
    args, _, _ = parse_main_ppo([*grpo_line(MODEL, DATA), "trainer.n_gpus_per_node=1"])
    flat = tmp_path / "same.json"
    flat.write_text(json.dumps(args.to_config()))
    with pytest.raises(SystemExit):
        parse_cli([str(flat), "--print_config"])
    same = json.loads(capsys.readouterr().out)
    assert {k: v for k, v in same.items() if k != "notes"} == {k: v for k, v in out.items() if k != "notes"}
    assert load_arguments(flat).to_dict() == args.to_dict()


def test_explain_a_verl_key():
    from ppokit.args.cli import explain

    text = explain("actor_rollout_ref.actor.ppo_mini_batch_size")
    assert text.startswith("actor_rollout_ref.actor.ppo_mini_batch_size: verl key, verl default 256; sets "
                           "global_mini_batch_size")
    assert "\nglobal_mini_batch_size: " in text  # then the ppokit key itself
    assert "no effect in ppokit (ppokit has no Ray" in explain("ray_init.num_cpus")
    with pytest.raises(ConfigError, match="did you mean data.train_batch_size"):
        explain("data.train_bach_size")


def test_kl_in_reward_with_grpo_is_noted():
    _, translation, _ = parse_main_ppo([*grpo_line(MODEL, DATA), "algorithm.use_kl_in_reward=True"])
    assert any("use_kl_in_reward=True is ignored for adv_estimator=grpo" in n for n in translation.notes)
