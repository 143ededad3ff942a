"""Run under torchrun by test_zero3_gathers_two_ranks.py: a ZeRO-3 actor (plain and LoRA) over 2 ranks goes through
every path that reads or writes its full weights outside the engine, while each `deepspeed.zero.GatheredParameters`
records how many elements it gathers at once.

    python -m torch.distributed.run --nproc_per_node 2 zero3_gathers.py MODEL OUT_DIR

Writes OUT_DIR/rank<r>.json: {path: largest gathered elements}, the model's total and its largest module's elements.
"""

import json
import sys
from pathlib import Path

import deepspeed
import torch

from ppokit.engine import build_engine, deepspeed_config, init_distributed
from ppokit.models import LoraSpec, load_causal_lm
from ppokit.models.folders import load_weights, save_adapter, save_hf
from ppokit.models.weights import load_hf_state, plain_copy

REAL = deepspeed.zero.GatheredParameters
LARGEST: dict[str, int] = {}
CURRENT = ["start"]


def recording(params, *args, **kwargs):
    params = list(params) if isinstance(params, (list, tuple)) else [params]
    size = sum(int(getattr(p, "ds_numel", p.numel())) for p in params)
    LARGEST[CURRENT[0]] = max(LARGEST.get(CURRENT[0], 0), size)
    return REAL(params, *args, **kwargs)


def zero3() -> dict:
    return deepspeed_config(zero_stage=3, offload_optimizer=False, micro_batch_size=1, grad_accum=1, world_size=2,
                            lr=1e-3, device="cpu")


def run(path: str, name: str, body) -> None:  # one path, then every rank waits for the others
    CURRENT[0] = name
    body()
    torch.distributed.barrier()


def main(model_path: str, out: Path) -> None:
    dist = init_distributed()
    engine = build_engine(load_causal_lm(model_path, zero3_config=zero3()), zero3())
    lora = build_engine(load_causal_lm(model_path, zero3_config=zero3(), lora=LoraSpec(rank=2)), zero3())
    reference = load_causal_lm(model_path)  # ordinary: the sizes to compare with
    sizes = {n: sum(p.numel() for p in m.parameters(recurse=False)) for n, m in reference.named_modules()}
    deepspeed.zero.GatheredParameters = recording
    copy = plain_copy(reference, torch.float32)  # the hf engine's copy, refreshed from the ZeRO-3 actor
    run(model_path, "hf copy refresh", lambda: load_hf_state(copy, engine.module))
    run(model_path, "save_hf", lambda: save_hf(engine.module, None, out / "full"))
    run(model_path, "load_weights", lambda: load_weights(engine.module, out / "full"))
    run(model_path, "save_adapter", lambda: save_adapter(lora.module, out / "adapter"))
    run(model_path, "load_weights (adapter)", lambda: load_weights(lora.module, out / "adapter"))
    deepspeed.zero.GatheredParameters = REAL
    same = all(torch.equal(p, q) for p, q in zip(copy.state_dict().values(), reference.state_dict().values()))
    (out / f"rank{dist.rank}.json").write_text(json.dumps({
        "largest": LARGEST, "total": sum(p.numel() for p in reference.parameters()),
        "largest_module": max(sizes.values()), "copy_equals_weights": same,
        "adapters": sum(int(p.ds_numel) for n, p in lora.module.named_parameters() if "lora_" in n)}))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
