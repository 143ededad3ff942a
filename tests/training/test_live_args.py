"""What `s.args` promises (issue 24): a change between steps takes effect at the next call, or is refused with a
sentence — never accepted and ignored."""

import json
import logging

import pytest
import torch
from session_helpers import distinct_chars, tiny_overrides

from ppokit.args import Arguments, explain, load_arguments
from ppokit.args.liveness import LIVE, liveness
from ppokit.errors import PpokitError
from ppokit.session import Session


def weights(s):
    return torch.cat([p.detach().flatten().clone() for p in s.model.parameters()])


@pytest.fixture()
def session(tiny_model_path, prompts_file, tmp_path):
    s = Session(load_arguments(overrides=tiny_overrides(tiny_model_path, prompts_file, tmp_path, max_steps=20,
                                                        lr_scheduler_type="constant")),
                reward_functions=[distinct_chars])
    yield s
    s.close()


def test_learning_rate_zero_after_a_step_stops_the_weights(session):
    first = session.step()
    assert first["actor/lr"] == pytest.approx(1e-3)
    session.args.learning_rate = 0.0
    before = weights(session)
    metrics = session.step()
    assert metrics["actor/lr"] == 0.0
    assert torch.equal(weights(session), before)  # every weight stays where it was
    session.args.learning_rate = 1e-3
    session.step()
    assert not torch.equal(weights(session), before)


def test_temperature_change_reaches_the_next_rollout(session):
    session.args.temperature = 0.0
    batch = session.rollout()
    for g in batch.group_ids.unique():  # greedy: the responses to one prompt are identical
        rows = batch.response_texts[int((batch.group_ids == g).nonzero()[0])]
        assert all(batch.response_texts[i] == rows for i in (batch.group_ids == g).nonzero().flatten().tolist())
    session.args.temperature = 1.0
    assert session.rollout().temperature == 1.0


def test_clip_range_change_reaches_the_next_update(tiny_model_path, prompts_file, tmp_path):
    over = tiny_overrides(tiny_model_path, prompts_file, tmp_path, global_mini_batch_size=1, per_device_train_batch_size=4,
                          learning_rate=3e-2)  # 4 optimizer steps per rollout: later mini-batches are off-policy
    s = Session(load_arguments(overrides=over), reward_functions=[distinct_chars])
    s.args.clip_range_ratio = 10.0
    assert s.step()["actor/clipfrac"] == 0.0
    s.args.clip_range_ratio = 1e-6
    assert s.step()["actor/clipfrac"] > 0.0  # the very next update clips at the new range
    s.close()


def test_kl_loss_from_zero_loads_the_reference_and_trains_with_it(session, caplog):
    session.step()
    assert session.state.policy.reference is None
    with caplog.at_level(logging.WARNING, logger="ppokit"):
        session.args.kl_loss_coeff = 0.1
        metrics = session.step()
    assert session.state.policy.reference is not None
    assert "loading the reference model now" in caplog.text
    assert "actor/kl_loss" in metrics and metrics["actor/kl"] >= 0.0


def test_kl_coeff_change_moves_the_controllers_beta(tiny_model_path, prompts_file, tmp_path):
    over = tiny_overrides(tiny_model_path, prompts_file, tmp_path, rl_algorithm="reinforce_plus_plus", kl_coeff=0.05)
    s = Session(load_arguments(overrides=over), reward_functions=[distinct_chars])
    assert s.step()["kl/beta"] == pytest.approx(0.05)
    s.args.kl_coeff = 0.5
    metrics = s.step()
    assert metrics["kl/beta"] == pytest.approx(0.5)
    assert metrics["kl/reward_penalty_mean"] == pytest.approx(-0.5 * metrics["kl/seq_kl_mean"], rel=1e-5)
    s.close()


@pytest.mark.parametrize("key,value,phrase", [
    ("global_batch_size", 3, "batch plan"), ("sharding", "stage3", "DeepSpeed"),
    ("actor_model_name_or_path", "other/model", "models are loaded"), ("rollout_n", 1, "batch plan"),
    ("max_steps", 40, "Session.resume(output_dir, max_steps=...)"), ("max_src_len", 10, "max_prompt_len"),
    ("balance_batch", True, "would change nothing"),
])
def test_keys_fixed_at_build_are_refused_with_a_sentence(session, key, value, phrase):
    old = getattr(session.args, key)
    with pytest.raises(PpokitError, match=None) as err:
        setattr(session.args, key, value)
    assert phrase in str(err.value) and key in str(err.value)
    assert getattr(session.args, key) == old


def test_live_assignment_follows_the_files_cross_key_rules(session):
    with pytest.raises(PpokitError, match="max_dec_len=500 is refused: max_prompt_len \\+ max_dec_len"):
        session.args.max_dec_len = 500
    assert session.args.max_dec_len == 8
    with pytest.raises(PpokitError, match="clip_ratio_c=0.5 is refused"):
        session.args.clip_ratio_c = 0.5
    with pytest.raises(PpokitError, match="learning_rate=inf is not a finite number"):
        session.args.learning_rate = float("inf")
    session.args.max_dec_len = 4  # within the budget: taken
    assert session.rollout().response_mask.sum(1).max() <= 4


def test_arguments_outside_a_session_stay_freely_assignable():
    args = load_arguments()
    args.global_batch_size = 3  # no Session yet: nothing was built from it
    assert args.global_batch_size == 3


def test_every_key_says_what_assigning_it_does():
    for key in Arguments.model_fields:
        line = [x for x in explain(key).splitlines() if x.startswith("  in a running Session: ")]
        assert line and line[0].split(": ", 1)[1].split(":")[0] in ("live", "restart", "derived", "no effect"), key
    assert set(LIVE) <= set(Arguments.model_fields)
    assert liveness("temperature") == "live" and liveness("sharding") == "restart"


def test_grpo_at_temperature_zero_warns_once(tiny_model_path, prompts_file, tmp_path, caplog):
    over = tiny_overrides(tiny_model_path, prompts_file, tmp_path, temperature=0.0)
    s = Session(load_arguments(overrides=over), reward_functions=[distinct_chars])
    with caplog.at_level(logging.WARNING, logger="ppokit"):
        for _ in range(3):
            assert s.step()["groups/zero_std_frac"] == 1.0
    warnings = [r.message for r in caplog.records if "no learning signal" in r.message]
    assert len(warnings) == 1 and "temperature is 0" in warnings[0]
    s.close()


def test_constant_reward_warns_once_after_the_first_steps(tiny_model_path, prompts_file, tmp_path, caplog):
    s = Session(load_arguments(overrides=tiny_overrides(tiny_model_path, prompts_file, tmp_path)),
                reward_functions=[lambda prompts, responses, **_: [1.0] * len(responses)])
    with caplog.at_level(logging.WARNING, logger="ppokit"):
        for _ in range(3):
            s.step()
    warnings = [r.getMessage() for r in caplog.records if "no learning signal" in r.getMessage()]
    assert len(warnings) == 1 and "the reward is the same" in warnings[0] and "first 2 step" in warnings[0]
    s.close()


def test_global_gen_batch_size_sets_the_prompts_each_dynamic_sampling_round_draws(tiny_model_path, tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"say a {i}:"}) + "\n" for i in range(24)))
    over = tiny_overrides(tiny_model_path, str(data), tmp_path, global_batch_size=2, global_mini_batch_size=2,
                          global_gen_batch_size=6, dynamic_sampling=True, max_gen_batches=10)
    s = Session(load_arguments(overrides=over), reward_functions=[distinct_chars])
    metrics = s.step()
    rounds = int(metrics["groups/gen_rounds"])
    drawn = s.state.loader.batches_drawn * s.state.loader.batch_size
    assert s.state.loader.batch_size == 6 and drawn == rounds * 6  # each round drew global_gen_batch_size prompts
    s.close()


def test_grpo_with_a_critic_path_says_it_is_not_used():
    args = load_arguments(overrides={"rl_algorithm": "grpo", "rollout_n": 4, "global_batch_size": 2,
                                     "critic_model_name_or_path": "some/critic"})
    assert any(n.startswith("critic_model_name_or_path is not used: rl_algorithm=grpo has no critic") for n in args.notes)


def test_every_restart_key_is_refused_in_a_running_session(session):
    from ppokit.args.liveness import liveness

    restart = [k for k in Arguments.model_fields if liveness(k) == "restart"]
    assert len(restart) > 50
    for key in restart:
        old = getattr(session.args, key)
        with pytest.raises(PpokitError, match=f"{key}=.* cannot change in a running Session"):
            setattr(session.args, key, "anything")
        assert getattr(session.args, key) == old, key
