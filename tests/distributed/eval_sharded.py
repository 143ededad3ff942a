"""Run under torchrun (1 or 2 processes) by test_eval_two_ranks.py: `Session.evaluate()` on 6 eval prompts in
calls of 2; each rank generates its share of the calls. Rank 0 writes out_dir/eval_<world>.json with the metrics
and the per-response samples.

    python -m torch.distributed.run --nproc_per_node 2 eval_sharded.py MODEL DATA EVAL OUT_DIR
"""

import json
import sys
from pathlib import Path

from dist_helpers import distinct_chars, update_overrides

from ppokit.args import load_arguments
from ppokit.session import Session
from ppokit.training.evaluate import evaluate


def main(model: str, data: str, eval_data: str, out_dir: str) -> None:
    overrides = update_overrides(model, data, str(Path(out_dir) / "run"), eval_datasets=eval_data, eval_rollout_n=2,
                                 eval_temperature=1.0, per_device_eval_batch_size=2)
    s = Session(load_arguments(None, overrides=overrides), reward_functions=[distinct_chars])
    samples: list = []
    metrics = evaluate(s.producer, samples=samples)
    metrics.pop("timing/eval_s")
    if s.state.dist.rank == 0:
        world = s.state.plan.world_size
        Path(out_dir, f"eval_{world}.json").write_text(json.dumps({"metrics": metrics, "samples": samples}))


if __name__ == "__main__":
    main(*sys.argv[1:5])
