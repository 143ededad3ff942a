"""Run under torchrun by test_dynamic_sampling_two_ranks.py: DAPO dynamic sampling on 2 ranks whose
prompts need different numbers of generation rounds; every rank must still draw from the prompt
loader equally often. Writes out_dir/rank<r>.json with the draw counters after each rollout.

    python -m torch.distributed.run --nproc_per_node 2 dynamic_sampling.py MODEL DATA OUT_DIR
"""

import json
import re
import sys
from pathlib import Path

from dist_helpers import distinct_chars, update_overrides

from ppokit.args import load_arguments
from ppokit.session import Session


def odd_prompts_flat(prompts, responses, **fields):
    """The same reward for every response to an odd-numbered prompt (a group dynamic sampling drops)."""
    varied = distinct_chars(prompts, responses)
    return [1.0 if int(re.search(r"say a (\d+)", p).group(1)) % 2 else v for p, v in zip(prompts, varied)]


def main(model: str, data: str, out_dir: str) -> None:
    overrides = update_overrides(model, data, str(Path(out_dir) / "run"), dynamic_sampling=True, max_gen_batches=20,
                                 rollout_n=2, global_mini_batch_size=4, kl_loss_coeff=0.0)
    session = Session(load_arguments(None, overrides=overrides), reward_functions=[odd_prompts_flat])
    seen = []
    for _ in range(3):
        batch = session.produce()  # rollout, score, dynamic sampling
        seen.append({"rollouts_drawn": session.state.rollouts_drawn, "loader": session.state.loader.state_dict(),
                     "groups": len(set(batch.group_ids.tolist())), "rounds": batch.stats["groups/gen_rounds"]})
    Path(out_dir, f"rank{session.state.dist.rank}.json").write_text(json.dumps(seen, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:4])
