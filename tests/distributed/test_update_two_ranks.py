"""One update split over 2 processes (torchrun, gloo, CPU) equals the 1-process update of the whole batch.

The rollout batch (4 prompts x 4 responses) comes from a 1-process Session in this process and is
saved; each rank of a 2-process run takes its 2 whole groups and calls `session.update`. The
reference is the 1-process update of the same sequences, ordered so that its 2 mini-batches hold
the same sequences as the ranks' mini-batches together (rank 0's first group + rank 1's first ...).
"""

import json

import dist_helpers
import pytest
import torch
from dist_helpers import HERE, distinct_chars, tail, torchrun, update_overrides

from ppokit.args import load_arguments
from ppokit.session import Session
from ppokit.training.metrics import batch_metrics

WORLD = 2


def interleaved(batch, world: int, groups_per_mini: int):
    """The batch reordered so that 1-process mini-batch k = the union of every rank's mini-batch k."""
    groups = torch.unique_consecutive(batch.group_ids).tolist()
    per_rank = len(groups) // world
    ranks = [groups[r * per_rank : (r + 1) * per_rank] for r in range(world)]
    order = [g for k in range(0, per_rank, groups_per_mini) for mine in ranks for g in mine[k : k + groups_per_mini]]
    rows = [i for g in order for i in (batch.group_ids == g).nonzero().squeeze(1).tolist()]
    return batch.select(rows)


def snapshot(model) -> dict:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def one_process_update(tmp, model_path, engine=None, **overrides) -> dict:
    """A 1-process rollout (saved for the ranks) and the update of its interleaved sequences.

    engine: the name of a scripted RolloutEngine in dist_helpers to roll out with (the ranks use it too)."""
    tmp.mkdir(parents=True, exist_ok=True)
    data = tmp / "train.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"say a {i}:"}) for i in range(16)) + "\n")
    args = load_arguments(None, overrides=update_overrides(model_path, str(data), str(tmp / "out"), **overrides))
    session = Session(args, reward_functions=[distinct_chars])
    if engine:
        session.state.rollout_engine = getattr(dist_helpers, engine)(session.state.policy.tokenizer)
    batch = session.rollout()
    session.score(batch)
    batch = session.latest(batch)
    session.compute_advantages(batch)
    batch = session.latest(batch)
    assert batch.old_logprobs is not None and batch.ref_logprobs is not None  # 2 optimizer steps, KL term
    torch.save(batch, tmp / "batch.pt")
    ordered = interleaved(batch, WORLD, groups_per_mini=session.plan.mini_batch_prompts // WORLD)
    critic = session.state.critic
    out = dict(batch=str(tmp / "batch.pt"), data=str(data), overrides=overrides, engine=engine, metrics=batch_metrics(batch),
               before=snapshot(session.model), critic_before=snapshot(critic.model) if critic else None)
    session.update(ordered)
    out.update(after=snapshot(session.model), critic_after=snapshot(critic.model) if critic else None,
               kl_beta=session.state.kl_ctl.value)
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_model_dir):
    """GRPO with a KL loss: the 1-process update (see `one_process_update`)."""
    return one_process_update(tmp_path_factory.mktemp("reference"), tiny_model_dir)


def run_two_ranks(reference, tiny_model_dir, tmp_path, sharding, extra_step=False):
    spec = dict(model=tiny_model_dir, data=reference["data"], batch=reference["batch"], out_dir=str(tmp_path),
                sharding=sharding, extra_step=extra_step, overrides=reference["overrides"], engine=reference["engine"])
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = torchrun(HERE / "update_halves.py", str(tmp_path / "spec.json"), nproc=WORLD)
    assert done.returncode == 0, tail(done)
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def check_same_update(reference, ranks, label):
    before, after, full_metrics = reference["before"], reference["after"], reference["metrics"]
    moved = max_diff(after, before)
    worst = max_diff(ranks[0]["params"], after)
    print(f"{label}: max |2-process - 1-process| = {worst:.3g} (the update itself moves weights by up to {moved:.3g})")
    assert moved > 1e-2  # the comparison means something
    assert worst < 1e-5
    assert max_diff(ranks[1]["params"], ranks[0]["params"]) == 0.0  # both ranks hold the same weights
    for r in ranks:
        assert r["world"] == WORLD and r["rows"] == 8 and r["plan"]["prompts_per_rank"] == 2
        assert r["reference_frozen"]  # inference mode, not trained, not partitioned
        assert max_diff(r["rollout_params"], r["params"]) == 0.0  # the rollout engine has the new weights
    # Gathered metrics: batch statistics over both ranks' sequences, identical on every rank.
    assert ranks[0]["metrics"] == ranks[1]["metrics"]
    for key in ("reward/mean", "reward/std", "reward/max", "reward/min", "response_length/mean",
                "groups/zero_std_frac"):
        assert ranks[0]["metrics"][key] == pytest.approx(full_metrics[key], abs=1e-6), key
    local = [r["local_metrics"]["reward/mean"] for r in ranks]
    assert ranks[0]["metrics"]["reward/mean"] == pytest.approx(sum(local) / 2, abs=1e-6)


def test_zero2_two_ranks_update_equals_one_process(reference, tiny_model_dir, tmp_path):
    ranks = run_two_ranks(reference, tiny_model_dir, tmp_path, "stage2")
    check_same_update(reference, ranks, "ZeRO-2")


@pytest.mark.slow
def test_zero3_two_ranks_update_equals_one_process_and_steps(reference, tiny_model_dir, tmp_path):
    ranks = run_two_ranks(reference, tiny_model_dir, tmp_path, "stage3", extra_step=True)
    check_same_update(reference, ranks, "ZeRO-3")
    # A full step after it: rollout from the gathered copy, partitioned forwards, logged once.
    assert ranks[0]["step_metrics"] == ranks[1]["step_metrics"]
    rows = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in rows] == [1]


@pytest.mark.slow
def test_ppo_zero2_two_ranks_actor_and_critic_updates_equal_one_process(tiny_model_dir, tmp_path):
    ppo = one_process_update(tmp_path / "one", tiny_model_dir, rl_algorithm="ppo", kl_loss_coeff=0.0, kl_coeff=0.05,
                             kl_ctrl_type="adaptive", target_kl=0.001)
    ranks = run_two_ranks(ppo, tiny_model_dir, tmp_path / "two", "stage2")
    check_same_update(ppo, ranks, "PPO actor, ZeRO-2")
    moved = max_diff(ppo["critic_after"], ppo["critic_before"])
    worst = max_diff(ranks[0]["critic_params"], ppo["critic_after"])
    print(f"PPO critic, ZeRO-2: max |2-process - 1-process| = {worst:.3g} (the update moves it by up to {moved:.3g})")
    assert moved > 1e-2 and worst < 1e-5
    assert max_diff(ranks[1]["critic_params"], ranks[0]["critic_params"]) == 0.0
    # The adaptive KL controller moved beta by the whole batch's KL and size, identically on both ranks.
    assert ppo["kl_beta"] != 0.05
    assert ranks[0]["kl_beta"] == ranks[1]["kl_beta"] == pytest.approx(ppo["kl_beta"], rel=1e-9)
