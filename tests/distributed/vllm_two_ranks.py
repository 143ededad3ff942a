"""Run under torchrun by test_vllm_two_ranks.py: 2 GRPO steps on 2 ranks whose rollouts go through the
(fake) vLLM engine with rollout_tensor_parallel_degree 2, so the real torch.distributed TP group, the
Session's wiring and the weight sync after each update are exercised. Writes out_dir/rank<r>.json.

    python -m torch.distributed.run --nproc_per_node 2 vllm_two_ranks.py MODEL DATA OUT_DIR
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rollout"))

import fake_vllm  # noqa: E402
from dist_helpers import distinct_chars, update_overrides  # noqa: E402

fake_vllm.register(fake_vllm.make_module())

from ppokit.args import load_arguments  # noqa: E402
from ppokit.session import Session  # noqa: E402


def main(model: str, data: str, out_dir: str) -> None:
    overrides = update_overrides(model, data, str(Path(out_dir) / "run"), rollout_engine="vllm",
                                 rollout_tensor_parallel_degree=2, rollout_max_num_seqs=16, rollout_n=2,
                                 global_mini_batch_size=4, kl_loss_coeff=0.0)
    session = Session(load_arguments(None, overrides=overrides), reward_functions=[distinct_chars])
    steps = []
    for _ in range(2):
        metrics = session.step()
        steps.append({"logprob_diff": metrics.get("rollout/logprob_diff")})
    llm = fake_vllm.LLM.instances[0]
    rank = session.state.dist.rank
    report = {
        "engine": type(session.state.rollout_engine).__name__,
        "kwargs": {k: v for k, v in llm.kwargs.items() if k != "model"},
        "requests": llm.requests,
        "events": [e for e, _ in llm.events],
        "steps": steps,
        "problems": llm.problems,
    }
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:4])
