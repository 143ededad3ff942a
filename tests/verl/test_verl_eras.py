"""The verl table against verl's own config trees (tests/fixtures/verl, written by scripts/snapshot_verl_configs.py):
every leaf of every snapshotted release resolves, no rule is dead, verl's example lines all read."""

import contextlib
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ppokit.args import ConfigError
from ppokit.dialects.verl.table import ERAS, MULTI_TURN_KEYS, RULES, TABLE, resolve
from ppokit.main_ppo import _print_config, parse_main_ppo

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "verl"
KINDS = ("mapped", "no_effect", "refused")


def _snapshot_script():
    spec = importlib.util.spec_from_file_location("snapshot_verl_configs", ROOT / "scripts" / "snapshot_verl_configs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SNAP = _snapshot_script()
LEAVES = SNAP.fixture_leaves(str(FIXTURES))


def test_committed_eras_module_is_the_fixtures():
    committed = (ROOT / "ppokit" / "dialects" / "verl" / "eras.py").read_text(encoding="utf-8")
    assert committed == SNAP.eras_module(str(FIXTURES)), "rerun: python scripts/snapshot_verl_configs.py --eras-only"
    assert set(ERAS) == set(LEAVES)


def test_every_leaf_of_every_release_resolves_with_a_reason():
    unresolved = {k: resolve(k) for k in LEAVES if resolve(k) is None or resolve(k).kind not in KINDS}
    assert not unresolved, f"leaves the table does not resolve: {sorted(unresolved)}"
    for key in LEAVES:
        found = resolve(key)
        assert found.kind == "mapped" or found.reason, key


def test_no_rule_is_dead_and_table_keys_are_of_some_era():
    used = {id(resolve(k).rule) for k in LEAVES}
    dead = [r.pattern for r in RULES if id(r) not in used]
    assert not dead
    outside = {k for k in TABLE if k not in LEAVES}  # ppokit-read + keys and keys verl's examples set
    assert outside == {"actor_rollout_ref.rollout.engine_kwargs.swap_space", "actor_rollout_ref.model.torch_dtype",
                       "actor_rollout_ref.rollout.sglang_rollout_mode",
                       *(f"reward_model.reward_kwargs.overlong_buffer_cfg.{k}" for k in ("enable", "len",
                                                                                        "penalty_factor"))}


def test_multi_turn_keys_are_one_block_mapped_onto_the_agent_loop(tmp_path):
    tree = {k for k in LEAVES if ".multi_turn." in k}
    assert tree <= set(MULTI_TURN_KEYS)
    for key in ("enable", "tool_config_path", "max_assistant_turns", "max_tool_response_length", "format",
                "max_parallel_calls"):
        assert resolve(f"actor_rollout_ref.rollout.multi_turn.{key}").kind == "mapped"
    tools = tmp_path / "tools.yaml"
    tools.write_text("tools: []\n")
    args, _, _ = parse_main_ppo(["actor_rollout_ref.rollout.multi_turn.enable=True", "actor_rollout_ref.rollout.n=2",
                                 f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
                                 "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
                                 "actor_rollout_ref.rollout.multi_turn.format=chatml"])
    assert (args.multi_turn, args.tool_config_path, args.max_assistant_turns, args.tool_format) == (
        True, str(tools), 3, "hermes")
    with pytest.raises(ConfigError, match="interactions"):
        parse_main_ppo(["actor_rollout_ref.rollout.multi_turn.interaction_config_path=x.yaml"])


def test_current_and_removed_keys_are_accepted_typos_are_not():
    _, translation, _ = parse_main_ppo(["actor_rollout_ref.model.use_shm=True",
                                        "actor_rollout_ref.actor.fsdp_config.grad_offload=True"])
    removed = translation.mapping["actor_rollout_ref.actor.fsdp_config.grad_offload"]["no_effect"]
    assert "DeepSpeed ZeRO" in removed and "removed in verl v0.3.0.post1" in removed
    assert any("grad_offload=True has no effect here" in n for n in translation.notes)
    with pytest.raises(ConfigError, match="unknown verl key 'actor_rollout_ref.actor.fsdp_config.param_ofload'; "
                                          "did you mean actor_rollout_ref.actor.fsdp_config.param_offload"):
        parse_main_ppo(["actor_rollout_ref.actor.fsdp_config.param_ofload=True"])
    with pytest.raises(ConfigError, match="did you mean actor_rollout_ref.model.use_shm"):
        parse_main_ppo(["actor_rollout_ref.model.use_shmm=True"])


@pytest.mark.parametrize("word", ["0", "no", "OFF", "False", "n", "false"])
def test_false_words_turn_the_kl_loss_off(word):
    args, _, _ = parse_main_ppo([f"actor_rollout_ref.actor.use_kl_loss={word}",
                                 "actor_rollout_ref.actor.kl_loss_coef=0.05"])
    assert args.kl_loss_coeff == 0.0


@pytest.mark.parametrize("word", ["1", "yes", "On", "TRUE"])
def test_true_words_turn_it_on(word):
    args, _, _ = parse_main_ppo([f"actor_rollout_ref.actor.use_kl_loss={word}",
                                 "actor_rollout_ref.actor.kl_loss_coef=0.05"])
    assert args.kl_loss_coeff == 0.05


@pytest.mark.parametrize("key", ["actor_rollout_ref.actor.use_kl_loss", "algorithm.use_kl_in_reward",
                                 "data.shuffle"])
def test_other_words_are_refused_naming_the_key(key):
    with pytest.raises(ConfigError, match=f"{key}='maybe' is not a boolean"):
        parse_main_ppo([f"{key}=maybe"])


def _launch_lines():
    for path in sorted(FIXTURES.glob("*/launch_lines.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        for line in data["lines"]:
            argv = list(line["tokens"])
            if line["config_name"] != "ppo_trainer":
                argv = ["--config-name", line["config_name"], *argv]
            yield data["version"], line["script"], argv


REFUSALS = (*(r.reason for r in RULES if r.refuse), *(e.refuse for e in TABLE.values() if e.refuse),
            "is not implemented in ppokit", "ppokit runs on CUDA", "is not a boolean",  # converters' refusals
            "Batch sizes do not divide", "needs rollout_n >= 2", "policy_loss='geo_mean' is not valid")  # checks'
"""What a line may stop with: the table's refusals, or ppokit's argument checks (verl lines for 24+ GPUs with
sequence parallelism, whose batches do not divide over ppokit's data-parallel ranks)."""


def test_every_example_line_of_every_release_reads_or_is_refused_with_a_sentence(monkeypatch):
    """In process (a few hundred lines): --print_config output, or a refusal the table (or a batch rule)
    words; never an unknown key, never a traceback. Model/data paths need not exist."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    counts = {"printed": 0, "refused": 0}
    for version, script, argv in _launch_lines():
        try:
            with contextlib.redirect_stdout(io.StringIO()) as out:
                args, translation, _ = parse_main_ppo(argv)
                _print_config(args, translation, argv)
            assert json.loads(out.getvalue())["verl"]["keys"], (version, script)
            counts["printed"] += 1
        except ConfigError as exc:
            assert any(r in str(exc) for r in REFUSALS), f"{version} {script}: {exc}"
            counts["refused"] += 1
    assert counts["printed"] > counts["refused"] > 0, counts  # 206 and 103 at the v0.2..HEAD snapshot


def test_one_example_line_through_the_real_command_line():
    version, script, argv = next(v for v in _launch_lines() if v[0] == "v0.2" and "gsm8k" in v[1])
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "ppokit.main_ppo", *argv, "--print_config"], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["verl"]["launch"]["world_size"] >= 1 and printed["actor_model_name_or_path"]


@pytest.mark.parametrize("yaml_file", sorted(FIXTURES.glob("*/*.yaml")), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_copy_of_verls_whole_config_of_any_release_reads(yaml_file, monkeypatch):
    """Users copy verl's composed YAML and edit it: relative and oc.select interpolations resolve, removed keys
    are accepted, the mandatory ``???`` of verl 0.6+ (rollout.name) asks for a value."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    given = ["--config-path", str(yaml_file.parent), "--config-name", yaml_file.name]
    if "???" in yaml_file.read_text(encoding="utf-8"):
        with pytest.raises(ConfigError, match=r"rollout.name=\?\?\?: a mandatory value"):
            parse_main_ppo(given)
        given.append("actor_rollout_ref.rollout.name=vllm")
    args, _, _ = parse_main_ppo(given)
    assert (args.global_batch_size, args.max_prompt_len, args.learning_rate) == (1024, 512, 1e-6)
    assert args.lr_scheduler_type == "constant_with_warmup" and args.kl_loss_coeff == 0.0
