"""Phases called by hand, then `train()` (the pattern of notebook 01): the LR schedule follows the optimizer steps
actually taken, so train()'s steps never run on a schedule that has already ended, and the plan's text says so."""

import pytest
import torch
from session_helpers import distinct_chars, tiny_overrides

from ppokit.args import load_arguments
from ppokit.args.run_plan import follow_taken
from ppokit.session import Session


def test_follow_taken_grows_the_schedules_by_the_hand_steps(tiny_model_path, prompts_file, tmp_path):
    args = load_arguments(None, overrides=tiny_overrides(tiny_model_path, prompts_file, tmp_path, max_steps=4,
                                                         lr_scheduler_type="linear"))
    from ppokit.args import batch_plan, run_plan

    plan = run_plan(args, batch_plan(args, 1), None)
    per = plan.batch.optimizer_steps_per_rollout
    assert follow_taken(plan, 0, 0) is plan and follow_taken(plan, 2 * per, 2) is plan  # step() alone: unchanged
    grown = follow_taken(plan, 2 * per, 0)  # two rollout steps' updates by hand, global_step still 0
    assert grown.optimizer_steps == plan.optimizer_steps + 2 * per and grown.hand_steps == 2 * per
    assert grown.critic_schedule.total_steps == plan.critic_schedule.total_steps + 2 * per
    assert f"+ {2 * per} taken by hand" in grown.describe()
    assert follow_taken(grown, 3 * per, 1) is grown  # train()'s own steps add nothing


def test_hand_driven_phases_then_train_keep_a_learning_rate(tiny_model_path, prompts_file, tmp_path):
    s = Session(load_arguments(None, overrides=tiny_overrides(tiny_model_path, prompts_file, tmp_path, max_steps=4,
                                                              lr_scheduler_type="linear")),
                reward_functions=[distinct_chars])
    for _ in range(2):
        batch = s.rollout()
        s.score(batch)
        s.compute_advantages(batch)
        s.update(batch)
    before = {k: v.detach().clone() for k, v in s.model.state_dict().items()}
    history = s.train()
    steps = [h for h in history if "actor/lr" in h]
    assert [h["step"] for h in steps] == [1, 2, 3, 4]
    # actor/lr is the rate the step's update used: linear over 2 hand + 4 planned steps, 4/6, 3/6, 2/6, 1/6 (it
    # was 0 from step 3 on before the plan followed the steps taken: steps 3 and 4 trained with a rate of 0)
    lr = s.args.learning_rate
    assert [h["actor/lr"] for h in steps] == pytest.approx([lr * 4 / 6, lr * 3 / 6, lr * 2 / 6, lr * 1 / 6], rel=1e-12)
    assert s.state.updates_done == 6 and s.global_step == 4
    assert s.plan.hand_steps == 2 * s.plan.batch.optimizer_steps_per_rollout
    assert "taken by hand" in s.plan.describe()
    assert any(not torch.equal(before[k], v) for k, v in s.model.state_dict().items())
