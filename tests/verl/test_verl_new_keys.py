"""verl keys mapped since the table follows verl's own trees (newer names of old keys, DAPO's + keys), and the
forms verl's example lines use (built-in --config-name, + keys, stand-in values)."""

import pytest

from ppokit.args import ConfigError
from ppokit.args.cli import explain
from ppokit.main_ppo import parse_main_ppo

A = "actor_rollout_ref.actor."


@pytest.mark.parametrize(("tokens", "expected"), [
    ([A + "optim.warmup_style=cosine"], "cosine"),  # verl <= 0.5
    ([A + "optim.lr_scheduler_type=cosine"], "cosine"),  # verl 0.6+
    ([A + "optim.warmup_style=cosine", A + "optim.lr_scheduler_type=constant"], "cosine"),  # old name, new default
    ([], "constant_with_warmup"),
])
def test_lr_schedule_from_either_name(tokens, expected):
    args, _, _ = parse_main_ppo(tokens)
    assert args.lr_scheduler_type == expected


def test_critic_schedule_and_unknown_style():
    args, _, _ = parse_main_ppo(["critic.optim.lr_scheduler_type=cosine"])
    assert args.critic_lr_scheduler_type == "cosine"
    with pytest.raises(ConfigError, match="lr_scheduler_type/warmup_style='wsd': use constant or cosine"):
        parse_main_ppo([A + "optim.lr_scheduler_type=wsd"])


def test_grad_clip_betas_and_sample_cap():
    args, _, _ = parse_main_ppo([A + "optim.clip_grad=0.5", A + "optim.betas=[0.8,0.95]",
                                 "data.train_max_samples=100"])
    assert (args.max_grad_norm, args.adam_beta1, args.adam_beta2, args.train_data_size) == (0.5, 0.8, 0.95, 100)
    args, _, _ = parse_main_ppo([A + "grad_clip=0.3", "data.train_max_samples=-1"])
    assert args.max_grad_norm == 0.3 and args.train_data_size is None


def test_rollout_correction_maps_onto_rollout_is():
    args, _, _ = parse_main_ppo(["algorithm.rollout_correction.rollout_is=token",
                                 "algorithm.rollout_correction.rollout_is_threshold=3.0"])
    assert (args.rollout_is, args.rollout_is_cap) == ("token", 3.0)
    with pytest.raises(ConfigError, match="rollout_rs='token_k1': ppokit has no rollout rejection sampling"):
        parse_main_ppo(["algorithm.rollout_correction.rollout_rs=token_k1"])


def test_dapo_overlong_buffer_plus_keys():
    args, translation, _ = parse_main_ppo(["+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
                                           "+reward_model.reward_kwargs.overlong_buffer_cfg.len=128",
                                           "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=0.5",
                                           "+reward_model.reward_kwargs.max_resp_len=1024"])
    assert (args.enable_overlong_reward_buffer, args.overlong_reward_buffer, args.overlong_penalty_factor) == \
        (True, 128, 0.5)
    assert "no_effect" in translation.mapping["reward_model.reward_kwargs.max_resp_len"]


def test_builtin_config_names_need_no_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./config here: verl's own config is meant
    args, translation, _ = parse_main_ppo(["--config-path=config", "--config-name=ppo_megatron_trainer",
                                           A + "megatron.tensor_model_parallel_size=4", "data.train_batch_size=512"])
    assert args.global_batch_size == 512
    assert "Megatron" in translation.mapping[A + "megatron.tensor_model_parallel_size"]["no_effect"]
    with pytest.raises(ConfigError, match="no such verl config"):
        parse_main_ppo(["--config-path=config", "--config-name=my_recipe"])


def test_plus_keys_hydra_style():
    _, translation, _ = parse_main_ppo(["+actor_rollout_ref.model.enable_activation_offloading=True",
                                        "+trainer.val_before_train=False"])
    assert any("adds a key no verl release has (did you mean actor_rollout_ref.model.enable_activation_offload?)"
               in n for n in translation.notes)
    with pytest.raises(ConfigError, match="already exists"):  # a key every release has
        parse_main_ppo(["+data.train_batch_size=8"])


def test_other_engines_devices_and_counts():
    with pytest.raises(ConfigError, match="trainer.device='npu': ppokit runs on CUDA GPUs or the CPU"):
        parse_main_ppo(["trainer.device=npu"])
    with pytest.raises(ConfigError, match="trainer.nnodes='many' is not a whole number of nodes"):
        parse_main_ppo(["trainer.nnodes=many"])


def test_explain_names_the_releases_and_the_reason():
    assert "no effect in ppokit (ppokit trains with DeepSpeed" in explain("actor_rollout_ref.actor.fsdp_config.grad_offload")
    assert explain("actor_rollout_ref.actor.fsdp_config.grad_offload").endswith("in verl v0.2.")
    assert "removed in verl v0.3.0.post1" in explain("actor_rollout_ref.actor.fsdp_config.grad_offload")
    assert "sets multi_turn (tool calls over several turns" in explain("actor_rollout_ref.rollout.multi_turn.enable")


def test_a_yaml_file_is_held_to_the_same_refusals(tmp_path):
    (tmp_path / "recipe.yaml").write_text("defaults: [ppo_trainer, _self_]\nalgorithm:\n  use_pf_ppo: true\n",
                                          encoding="utf-8")
    with pytest.raises(ConfigError, match="algorithm.use_pf_ppo=True: ppokit has no PF-PPO"):
        parse_main_ppo(["--config-path", str(tmp_path), "--config-name", "recipe"])
    (tmp_path / "ok.yaml").write_text("actor_rollout_ref:\n  actor:\n    use_kl_loss: no\n    kl_loss_coef: 0.1\n"
                                      "    fsdp_config:\n      grad_offload: true\n", encoding="utf-8")
    args, _, _ = parse_main_ppo(["--config-path", str(tmp_path), "--config-name", "ok"])
    assert args.kl_loss_coeff == 0.0


def test_run_ppo_reads_verl_booleans_and_removed_keys_too(tmp_path, capsys):
    import json

    from ppokit.args.cli import parse_cli

    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"rl_algorithm": "grpo", "rollout_n": 4, "global_batch_size": 4, "kl_loss_coeff": 0.2}))
    with pytest.raises(SystemExit) as stop:
        parse_cli([str(cfg), "actor_rollout_ref.actor.use_kl_loss=0", "actor_rollout_ref.actor.fsdp_config.grad_offload=1",
                   "--print_config"])
    assert stop.value.code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kl_loss_coeff"] == 0.0
    assert any("grad_offload=1 has no effect here" in n and "removed in verl v0.3.0.post1" in n for n in out["notes"])
    with pytest.raises(SystemExit):
        parse_cli([str(cfg), "algorithm.use_kl_in_reward=maybe"])
    assert "algorithm.use_kl_in_reward='maybe' is not a boolean" in capsys.readouterr().err


def test_removing_a_key_outside_the_table_is_a_no_op_in_both_modes(capsys):
    from ppokit.args.cli import parse_cli

    args, _, _ = parse_main_ppo(["~actor_rollout_ref.actor.megatron.seed"])
    assert args.rollout_n == 1
    with pytest.raises(SystemExit) as stop:
        parse_cli(["~actor_rollout_ref.actor.megatron.seed", "--print_config"])
    assert stop.value.code == 0
