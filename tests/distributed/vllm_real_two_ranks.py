"""Run under torchrun by test_vllm_real_two_ranks.py: each of 2 ranks builds the real vLLM engine
(`external_launcher`, rollout tensor-parallel degree TP: 1 = two data-parallel engines, 2 = one TP group of
two engines), generates its own prompts, takes an optimizer step, syncs the weights and generates again. Writes OUT_DIR/rank<r>.json (or, when vLLM
refuses the layout, the refusal).

    python -m torch.distributed.run --nproc_per_node 2 vllm_real_two_ranks.py MODEL OUT_DIR TP
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rollout"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from vllm_real import SMALL, trainer_logprobs  # noqa: E402

from ppokit.args import load_arguments  # noqa: E402
from ppokit.models import load_causal_lm, load_tokenizer  # noqa: E402
from ppokit.rollout import SamplingParams, make_rollout_engine  # noqa: E402


def mean_diff(model, prompt, out) -> float:
    diffs = [(torch.tensor(lp) - trainer_logprobs(model, prompt, ids, 1.0)).abs().mean()
             for ids, lp in zip(out.response_ids, out.logprobs)]
    return float(torch.stack(diffs).mean())


def main(model_dir: str, out_dir: str, tp: str) -> None:
    dist.init_process_group("gloo")  # as the trainer does before vLLM (DeepSpeed's group)
    rank, world = dist.get_rank(), dist.get_world_size()
    args = load_arguments(None, overrides=dict(max_prompt_len=32, max_dec_len=16, max_length=48, seed=0,
                                               rollout_tensor_parallel_degree=int(tp)))
    tok = load_tokenizer(model_dir)
    model = load_causal_lm(model_dir)
    report: dict = {"rank": rank}
    try:
        engine = make_rollout_engine("vllm", True, model, tok, model_path=model_dir, args=args,
                                     compute_dtype=torch.bfloat16, rank=rank, world_size=world, **SMALL)
    except Exception as exc:  # noqa: BLE001 - the test checks the sentence
        report["refused"] = f"{type(exc).__name__}: {exc}"
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(report))
        return
    prompt = tok(f"rank {rank} counts:").input_ids
    sampling = SamplingParams(n=2, temperature=1.0, max_new_tokens=8)
    out = engine.generate([prompt], sampling)
    report.update(responses=out.response_ids, diff_before=mean_diff(model, prompt, out))
    # Data-parallel engines (TP 1) get different models; the members of a TP group hold one model split
    # between them, so they train the same one: gradients averaged, as data-parallel training does.
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3 * (rank + 1 if int(tp) == 1 else 1))
    ids = torch.tensor([prompt + out.response_ids[0]])
    model(ids, labels=ids).loss.backward()
    if int(tp) > 1:
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
    optimizer.step()
    engine.update_weights(model)
    again = engine.generate([prompt], sampling)
    report.update(diff_after=mean_diff(model, prompt, again), tp=engine.group.size)
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(report))
    dist.barrier()


if __name__ == "__main__":
    main(*sys.argv[1:4])
