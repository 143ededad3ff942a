"""Every validation path, with its message (a sentence naming the source and key)."""

import json

import pytest

from ppokit.args import ConfigError, check_lengths, load_arguments


def write(tmp_path, data, name="cfg.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def error_of(*args, **kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        load_arguments(*args, **kwargs)
    return str(info.value)


def test_unknown_key_suggests_the_closest(tmp_path):
    path = write(tmp_path, {"kl_loss_coef": 0.1})
    assert error_of(path) == f"{path}: unknown key 'kl_loss_coef'; did you mean kl_loss_coeff?"


def test_unknown_key_without_a_close_match(tmp_path):
    path = write(tmp_path, {"zzzz": 1})
    assert error_of(path) == f"{path}: unknown key 'zzzz'; `python -m ppokit.args list` shows every valid key."


def test_every_unknown_key_is_listed(tmp_path):
    path = write(tmp_path, {"kl_loss_coef": 0.1, "rolout_n": 4})
    assert error_of(path).splitlines() == [f"{path}: unknown key 'kl_loss_coef'; did you mean kl_loss_coeff?",
                                           f"{path}: unknown key 'rolout_n'; did you mean rollout_n?"]


def test_verl_key_names_are_not_silently_accepted():
    assert "did you mean kl_loss_coeff?" in error_of(overrides={"kl_loss_coef": 0.1})


def test_wrong_type_names_key_value_and_type(tmp_path):
    path = write(tmp_path, {"max_steps": "many"})
    assert error_of(path) == (f"{path}: max_steps='many' is not valid: expected int (Input should be a valid "
                              "integer, unable to parse string as an integer).")


def test_wrong_choice_lists_the_choices(tmp_path):
    path = write(tmp_path, "rl_algorithm: trpo\n", "cfg.yaml")
    assert error_of(path) == (
        f"{path}: rl_algorithm='trpo' is not valid: expected one of 'ppo', 'grpo', 'reinforce_plus_plus', "
        "'rloo', 'drgrpo', 'dapo', 'reinforce_plus_plus_baseline', 'vapo' (Input should be 'ppo', 'grpo', "
        "'reinforce_plus_plus', 'rloo', 'drgrpo', 'dapo', 'reinforce_plus_plus_baseline' or 'vapo').")


def test_wrong_list_item_names_the_item():
    assert error_of(overrides={"reward_weights": [1.0, "x"]}) == (
        "overrides: reward_weights=[1.0, 'x'] is not valid: expected list of float or null (Input should be a "
        "valid number, unable to parse string as a number (at item 1)).")


def test_out_of_range_value():
    assert error_of(overrides={"top_p": 1.5}) == (
        "overrides: top_p=1.5 is not valid: expected float (Input should be less than or equal to 1).")


def test_null_for_a_required_type(tmp_path):
    path = write(tmp_path, '{"learning_rate": null}')
    assert error_of(path) == (f"{path}: learning_rate is null but must be float; remove the key to use the "
                              "default 5e-05.")


def test_wrong_type_from_the_command_line_names_the_command_line(tmp_path):
    path = write(tmp_path, {"max_steps": 3})
    assert error_of(path, argv=["--seed", "x"]).startswith("command line: seed='x' is not valid: expected int")


@pytest.mark.parametrize("algorithm", ["grpo", "drgrpo", "dapo", "rloo", "reinforce_plus_plus_baseline"])
def test_group_algorithms_need_two_responses(tmp_path, algorithm):
    path = write(tmp_path, {"rl_algorithm": algorithm, "rollout_n": 1, "global_batch_size": 8})
    assert error_of(path) == (f"{path}: rl_algorithm={algorithm} compares the responses to one prompt, so it "
                              "needs rollout_n >= 2 (got 1); set rollout_n to e.g. 8.")


def test_ppo_and_reinforce_accept_one_response():
    for algorithm in ("ppo", "reinforce_plus_plus"):
        assert load_arguments(overrides={"rl_algorithm": algorithm}).rollout_n == 1


@pytest.mark.parametrize("value", [1.0, 0.5, -2.0])
def test_dual_clip_constant_must_exceed_one(value):
    assert error_of(overrides={"clip_ratio_c": value}) == (
        f"arguments: clip_ratio_c={value} must be greater than 1 (dual clip bounds the loss at c x |A|); use "
        "e.g. 3.0, or null to turn dual clip off.")


def test_dual_clip_constant_accepted():
    assert load_arguments(overrides={"clip_ratio_c": 3}).clip_ratio_c == 3.0


def test_reward_server_required(tmp_path):
    path = write(tmp_path, {"use_rm_server": True})
    assert error_of(path) == (f"{path}: use_rm_server is true but reward_server is not set; give the server's "
                              "URL, e.g. reward_server=http://127.0.0.1:8731.")


def test_precision_conflicts(tmp_path):
    path = write(tmp_path, {"bf16": True, "fp16": True})
    assert error_of(path) == f"{path}: bf16 and fp16 are both true; choose one precision."
    path = write(tmp_path, {"fp16_opt_level": "O2", "device": "cuda"})
    assert error_of(path) == (f"{path}: fp16_opt_level=O2 needs bf16 or fp16 true (PaddleNLP refuses it too); "
                              "set one, or use O1.")


def test_o2_without_half_precision_runs_fp32_on_cpu(tmp_path):
    path = write(tmp_path, {"fp16_opt_level": "O2", "bf16": False, "device": "cpu"})
    args = load_arguments(path)
    assert args.fp16_opt_level == "O1" and not args.bf16 and not args.fp16
    assert any(n.startswith("fp16_opt_level=O2 with bf16 and fp16 false: training runs in float32") for n in args.notes)


@pytest.mark.parametrize("value", ["stage4", "offload", "stage1 stage2"])
def test_sharding_values(value):
    assert error_of(overrides={"sharding": value}) == (
        f"arguments: sharding='{value}' is not understood; use '', stage1, stage2 or stage3, optionally "
        "followed by 'offload'.")


def test_sharding_with_offload_accepted():
    assert load_arguments(overrides={"sharding": "stage3 offload"}).sharding == "stage3 offload"


def test_batch_errors_name_the_file(tmp_path):
    path = write(tmp_path, {"global_batch_size": 8, "global_mini_batch_size": 3})
    assert error_of(path).startswith(f"{path}: Batch sizes do not divide: global_mini_batch_size=3")


def test_several_consistency_errors_are_listed(tmp_path):
    path = write(tmp_path, {"bf16": True, "fp16": True, "clip_ratio_c": 1})
    assert len(error_of(path).splitlines()) == 2


def test_check_lengths():
    args = load_arguments(overrides={"max_prompt_len": 300, "max_dec_len": 300, "max_length": 512})
    with pytest.raises(ConfigError) as info:
        check_lengths(args, 2048)
    assert str(info.value) == ("max_prompt_len + max_dec_len = 300 + 300 = 600 exceeds max_length=512; raise "
                               "max_length to at least 600 or shorten the prompt or response limit.")
    args.max_length = 600
    check_lengths(args, 600)
    check_lengths(args, None)
    with pytest.raises(ConfigError) as info:
        check_lengths(args, 512)
    assert str(info.value) == ("max_length=600 exceeds the model's 512 positions (max_position_embeddings); "
                               "set max_length <= 512.")


def test_file_problems(tmp_path):
    bad_json = write(tmp_path, '{"seed": 1,\n "x": }')
    assert error_of(bad_json) == f"{bad_json}:2:7: invalid JSON: Expecting value."
    bad_yaml = write(tmp_path, "seed: [1\n", "bad.yaml")
    assert error_of(bad_yaml).startswith(f"{bad_yaml}:2:1: invalid YAML: ")
    top_list = write(tmp_path, "[1, 2]")
    assert error_of(top_list) == f"{top_list}: the top level must be a mapping of key: value, not list."
    wrong_suffix = write(tmp_path, "{}", "cfg.toml")
    assert error_of(wrong_suffix) == f"{wrong_suffix}: expected a .json, .yaml or .yml argument file."
    missing = tmp_path / "missing.json"
    assert error_of(missing) == f"{missing}: cannot read the argument file (No such file or directory)."
