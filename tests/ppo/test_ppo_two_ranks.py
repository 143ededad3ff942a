"""The PPO statistics that span data-parallel ranks (advantage whitening, reward normalisation) give
on two ranks exactly what one process gives on the whole batch."""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ppokit.algos import masked_whiten
from ppokit.training.normalize import RunningNormalizer

ADV = torch.tensor([[1.0, -2.0, 0.5, 0.0], [3.0, 0.0, 0.0, 0.0], [0.25, 0.75, -1.0, 2.0], [4.0, 1.0, 0.0, 0.0]])
MASK = torch.tensor([[1.0, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]])
SCORES = [torch.tensor([1.0, 2.0, 3.0]), torch.tensor([40.0])]  # ranks may hold different numbers of rewards


def worker(rank, store_path, out_dir):
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=2)
    try:
        rows = slice(0, 1) if rank == 0 else slice(1, 4)  # unequal shares of the batch
        white = masked_whiten(ADV[rows], MASK[rows], group=dist.group.WORLD)
        norm = RunningNormalizer()
        first = norm(SCORES[rank])
        second = norm(SCORES[rank])
        torch.save({"white": white, "first": first, "second": second, "state": norm.state_dict()},
                   f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_whitening_and_reward_normalisation_span_the_ranks(tmp_path):
    mp.spawn(worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    whole = masked_whiten(ADV, MASK)  # one process, the whole batch
    valid = ADV[MASK.bool()]
    torch.testing.assert_close(whole, (ADV - valid.mean()) / valid.std() * MASK, atol=1e-6, rtol=0)
    torch.testing.assert_close(torch.cat([r0["white"], r1["white"]]), whole, atol=1e-6, rtol=0)

    single = RunningNormalizer()
    first, second = single(torch.cat(SCORES)), single(torch.cat(SCORES))
    torch.testing.assert_close(torch.cat([r0["first"], r1["first"]]), first)
    torch.testing.assert_close(torch.cat([r0["second"], r1["second"]]), second)
    assert r0["state"] == r1["state"] and r0["state"]["count"] == single.count == 8
    assert abs(r0["state"]["mean"] - single.mean) < 1e-9 and abs(r0["state"]["m2"] - single.m2) < 1e-6
