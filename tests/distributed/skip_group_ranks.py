"""Run under torchrun with 2 processes: rank 0's reward source fails for one of its 3 groups; prints each rank's
batch size after the score phase as `rank R: S sequences, G groups, dropped D`."""

import sys
from types import SimpleNamespace

import torch
import torch.distributed as dist

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from dist_helpers import distinct_chars, say  # noqa: E402

from ppokit.rewards import NamedReward  # noqa: E402
from ppokit.training.batch import RolloutBatch  # noqa: E402
from ppokit.training.phases import score  # noqa: E402


def main():
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), 6  # 3 groups of 2 per rank
    failing = {2} if rank == 0 else set()  # rank 0 loses its second group (items 2 and 3)

    def server(prompts, responses, **fields):
        return [None if i in failing else float(len(set(r))) for i, r in enumerate(responses)]

    fns = [NamedReward("reward_server", server, allow_none=True, locate_errors=False),
           NamedReward("chars", distinct_chars)]
    mask = torch.ones(n, 3)
    batch = RolloutBatch(records=[{} for _ in range(n)], group_ids=torch.arange(n) // 2 + 10 * rank,
                         prompt_texts=["p"] * n, response_texts=["abc", "ab", "x", "xy", "qq", "qrs"],
                         input_ids=torch.zeros(n, 5, dtype=torch.long), attention_mask=torch.ones(n, 5, dtype=torch.long),
                         response_mask=mask, prompt_len=2, finish_reasons=["stop"] * n)
    state = SimpleNamespace(reward_fns=fns, skipped_groups=0, reward_normalizer=None)
    args = SimpleNamespace(rollout_n=2, reward_on_error="skip_group", enable_overlong_reward_buffer=False,
                           normalize_reward=False, clip_range_score=10.0)
    state.args = args
    out = score(state, batch)
    assert torch.isfinite(out.scores).all()
    dropped = int(out.stats.get("reward/groups_dropped_to_balance_ranks", 0))
    say(f"rank {rank}: {len(out)} sequences, {len(torch.unique(out.group_ids))} groups, dropped {dropped}, "
        f"groups {sorted(set(out.group_ids.tolist()))}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
