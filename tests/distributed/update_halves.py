"""Run under torchrun by test_update_two_ranks.py: each rank updates on its half (its whole groups)
of a saved rollout batch, then writes its (gathered) parameters, the step's gathered metrics and the
weights its rollout engine generates with.

    python -m torch.distributed.run --nproc_per_node 2 update_halves.py SPEC.json

SPEC.json: {"model", "data", "batch", "out_dir", "sharding", "extra_step", "overrides", "engine"}; writes out_dir/rank<r>.pt.
"""

import dataclasses
import json
import sys
from pathlib import Path

import dist_helpers
import torch
from dist_helpers import distinct_chars, update_overrides

from ppokit.args import load_arguments
from ppokit.models.weights import gathered
from ppokit.session import Session
from ppokit.training.metrics import batch_metrics, gather_metrics


def my_groups(batch, rank: int, per_rank: int):
    """The rows of this rank's whole groups: groups [rank*per_rank, (rank+1)*per_rank) in batch order."""
    groups = torch.unique_consecutive(batch.group_ids)
    mine = groups[rank * per_rank : (rank + 1) * per_rank]
    return batch.select(torch.isin(batch.group_ids, mine).nonzero().squeeze(1))


def parameters(model) -> dict[str, torch.Tensor]:
    """Full parameters (ZeRO-3 gathered: a collective, every rank calls it)."""
    with gathered(model):
        return {k: v.detach().clone() for k, v in model.named_parameters()}


def rollout_weights(session) -> dict[str, torch.Tensor]:
    """The weights the rollout engine generates with (its own copy under ZeRO-3)."""
    model = session.state.rollout_engine.generation_model
    with gathered(model):
        return {k: v.detach().clone() for k, v in model.named_parameters()}


def reference_frozen(reference) -> bool:
    """The reference runs in inference mode: eval, no trainable and no ZeRO-partitioned parameters."""
    if reference is None:
        return False
    model = getattr(reference, "model", reference)
    params = list(model.parameters())
    return (not model.training and params and not any(p.requires_grad for p in params)
            and not any(hasattr(p, "ds_id") for p in params))


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    out_dir = Path(spec["out_dir"])
    args = load_arguments(None, overrides=update_overrides(spec["model"], spec["data"], str(out_dir / "run"),
                                                           sharding=spec["sharding"], **spec.get("overrides", {})))
    session = Session(args, reward_functions=[distinct_chars])
    rank, world = session.state.dist.rank, session.state.dist.world_size
    full = torch.load(spec["batch"], weights_only=False)
    half = my_groups(full, rank, session.plan.prompts_per_rank)
    stats = session.update(half)
    session.producer.pull()  # the new weights reach the rollout engine between batches, as rollout() does first
    local = {**stats, **batch_metrics(half)}
    result = {
        "world": world, "rank": rank, "rows": len(half), "plan": dataclasses.asdict(session.plan.batch),
        "params": parameters(session.model), "rollout_params": rollout_weights(session),
        "local_metrics": local, "metrics": gather_metrics(local, half),
        "reference_frozen": reference_frozen(session.state.policy.reference),
        "kl_beta": session.state.kl_ctl.value,
    }
    if session.state.critic is not None:
        result["critic_params"] = parameters(session.state.critic.model)
    if spec.get("engine"):  # the scripted engine of the 1-process rollout, for the extra step's rollout
        session.state.rollout_engine = getattr(dist_helpers, spec["engine"])(session.state.policy.tokenizer)
    if spec.get("extra_step"):
        result["step_metrics"] = session.step()  # rollout with the updated weights, score, update, log
    session.close()
    torch.save(result, out_dir / f"rank{rank}.pt")
    dist_helpers.say(f"rank {rank} of {world}: updated on {len(half)} sequences")
    torch.distributed.barrier()


if __name__ == "__main__":
    main(sys.argv[1])
