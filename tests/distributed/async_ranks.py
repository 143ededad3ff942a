"""Run under torchrun (1 or 2 processes) by test_async_two_ranks.py: 3 asynchronous steps (staleness_threshold 1)
with a scripted engine, recording what each step consumed (every rank's prompts, their groups, the rows' policy
versions) and its gathered metrics; rank 0 writes them and the final weights.

    python -m torch.distributed.run --nproc_per_node N async_ranks.py SPEC.json

SPEC.json: {"model", "data", "out_dir", "overrides"}; writes out_dir/result.pt.
"""

import json
import sys
from pathlib import Path

import torch
from dist_helpers import distinct_chars, update_overrides

from ppokit.args import load_arguments
from ppokit.models.weights import gathered
from ppokit.session import Session


class EchoScript:
    """A RolloutEngine whose rows depend only on the prompt's text and the sample's place in its group (so 1 and 2
    processes generate the same rows), with made-up sampler log-probs for `rollout_is` to use."""

    def __init__(self, tokenizer):
        self.tok = tokenizer

    def generate(self, prompt_token_ids, sampling):
        from ppokit.rollout.base import RolloutOutput

        index, rows, logprobs = [], [], []
        for i, ids in enumerate(prompt_token_ids):
            digits = "".join(c for c in self.tok.decode(ids) if c.isdigit())
            for j in range(sampling.n):
                text = f"{digits} " + "ab"[j % 2] * (1 + j) + "xyz"[: 1 + (j + len(digits)) % 3]
                ids_out = self.tok.encode(text, add_special_tokens=False)[: sampling.max_new_tokens - 1]
                index.append(i)
                rows.append(ids_out + [self.tok.eos_token_id])
                logprobs.append([-1.0 - 0.05 * t for t in range(len(rows[-1]))])
        return RolloutOutput(index, rows, ["stop"] * len(rows), logprobs=logprobs)

    def update_weights(self, model):
        pass


def consumed(session) -> dict:
    """The last consumed batch of every rank: prompt texts, group ids and version tags, rank 0's first."""
    batch = session.last_batch
    mine = {"prompts": list(batch.prompt_texts), "groups": batch.group_ids.tolist(),
            "versions": batch.policy_version.tolist()}
    if not torch.distributed.is_initialized():
        return {k: [v] for k, v in mine.items()}
    everyone = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(everyone, mine)
    return {k: [r[k] for r in everyone] for k in mine}


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    out_dir = Path(spec["out_dir"])
    args = load_arguments(None, overrides=update_overrides(spec["model"], spec["data"], str(out_dir / "run"),
                                                           **spec["overrides"]))
    session = Session(args, reward_functions=[distinct_chars])
    session.state.rollout_engine = EchoScript(session.tokenizer)
    with gathered(session.model):
        before = {k: v.detach().clone() for k, v in session.model.named_parameters()}
    steps = []
    for _ in range(spec.get("steps", 3)):
        metrics = session.step()
        steps.append({"metrics": metrics, **consumed(session)})
    with gathered(session.model):
        params = {k: v.detach().clone() for k, v in session.model.named_parameters()}
    result = {"world": session.state.dist.world_size, "steps": steps, "params": params, "before": before,
              "queue": session.pipeline.describe()}
    session.close()
    if session.state.dist.rank == 0:
        torch.save(result, out_dir / "result.pt")
    if torch.distributed.is_initialized():
        torch.distributed.barrier()


if __name__ == "__main__":
    main(sys.argv[1])
