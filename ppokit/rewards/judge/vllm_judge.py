"""The judge on its own vLLM engine (`judge_backend: vllm`): `VllmJudge(model).complete(conversations)`.

Its own weights: the engine loads the judge's folder (a .gguf or an alias is converted first, as for every model)
and nothing ever syncs the trained model into it. Greedy (temperature 0, the default) repeats exactly; sampling is
seeded per call from (seed, call count), one generator per request, so a judge run repeats too. vLLM seeds torch's,
numpy's and Python's global generators when its engine starts, and its sampler draws from torch's at every step (on
the CPU build even for seeded requests). The judge's engine core runs in a process of its own (see
`_engine_in_own_process`); where it cannot (an engine already ran in this process) those generators are the
trainer's, so the start and every call run with them set back afterwards: the judge never moves the trainer's
random state. On a CPU the engine runs eagerly (torch.compile takes
minutes at every start there) and the trainer's torch threads and CPU affinity are restored after vLLM changed them.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Sequence

from ppokit.rewards.judge.clients import TOP_TOKENS, JudgeReply


class VllmJudge:
    """A judge model on its own vLLM engine (`vllm.LLM.chat`): vLLM batches every conversation of a call.
    `llm_kwargs` replace single `vllm.LLM` arguments (e.g. kv_cache_memory_bytes on a CPU)."""

    def __init__(self, model_path: str, max_new_tokens: int = 256, temperature: float = 0.0, seed: int = 0,
                 gpu_memory_utilization: float = 0.2, **llm_kwargs):
        try:
            import vllm
        except ImportError as exc:
            raise ValueError("judge_backend is vllm but vLLM is not installed; install vllm, or use judge_backend: hf "
                             "(the judge in this process through transformers)") from exc
        from vllm.platforms import current_platform

        from ppokit.models.generators import global_generators_kept
        from ppokit.models.loading import resolve_model_path
        from ppokit.rollout.vllm_engine import trainer_threads_kept

        self.name = str(model_path)
        with trainer_threads_kept(), global_generators_kept(), _engine_in_own_process():
            kwargs = dict(model=resolve_model_path(model_path), seed=seed,
                          gpu_memory_utilization=gpu_memory_utilization)
            if current_platform.is_cpu():
                kwargs["enforce_eager"] = True
            self.llm = vllm.LLM(**{**kwargs, **llm_kwargs})
        self.seed, self.calls, self.temperature = seed, 0, temperature
        self.params = dict(temperature=temperature, max_tokens=max_new_tokens, logprobs=TOP_TOKENS)

    def complete(self, conversations: Sequence[list[dict]]) -> list[JudgeReply]:
        from vllm import SamplingParams

        from ppokit.models.generators import global_generators_kept
        from ppokit.rollout.vllm_engine import trainer_threads_kept

        self.calls += 1
        seed = (self.seed * 1_000_003 + self.calls) % 2**31 if self.temperature > 0 else None
        with trainer_threads_kept(), global_generators_kept():
            outputs = self.llm.chat(list(conversations), SamplingParams(**self.params, seed=seed), use_tqdm=False)
        replies = []
        for o in outputs:
            first = o.outputs[0].logprobs[0] if o.outputs[0].logprobs else {}
            probs: dict[str, float] = {}
            for lp in first.values():  # tokens that decode alike (" yes", "yes") add up, as the hf judge does
                word = lp.decoded_token or ""
                probs[word] = probs.get(word, 0.0) + math.exp(lp.logprob)
            replies.append(JudgeReply(text=o.outputs[0].text, first_token_probs=probs or None,
                                      tokens=len(o.prompt_token_ids or []) + len(o.outputs[0].token_ids)))
        return replies


@contextlib.contextmanager
def _engine_in_own_process():
    """vLLM's engine core in a process of its own (VLLM_ENABLE_V1_MULTIPROCESSING=1) for the engine built in the
    block, whatever the vLLM rollout engine set for its own (0): the judge's torch.distributed world, generators and
    threads then stay out of the trainer's (an in-process judge engine sets up a process group of its own, which the
    trainer's DeepSpeed groups do not survive). A vLLM that already ran an engine in this process has cached its
    environment and keeps the judge in this process too; the generators and threads are set back either way."""
    key = "VLLM_ENABLE_V1_MULTIPROCESSING"
    before = os.environ.get(key)
    os.environ[key] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


