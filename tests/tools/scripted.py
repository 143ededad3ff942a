"""A scripted RolloutEngine: each prompt's turns are fixed texts, so masks and tool handling can be checked exactly."""

from ppokit.rollout.base import RolloutOutput


class ScriptedEngine:
    """Answers a context that starts with prompt i with scripts[i][turn] (turn = how often prompt i was seen).

    A script text ending in "<EOS>" ends with the EOS token; the engine cuts at max_new_tokens ("length").
    """

    def __init__(self, tokenizer, prompts: list[list[int]], scripts: list[list[str]], logprob: float | None = None):
        self.tok, self.prompts, self.scripts, self.logprob = tokenizer, prompts, scripts, logprob
        self.seen = [0] * len(prompts)
        self.contexts: list[list[int]] = []  # every context it was asked to continue

    def generate(self, prompt_token_ids, sampling):
        rows, reasons = [], []
        for ctx in prompt_token_ids:
            self.contexts.append(list(ctx))
            i = next(k for k, p in enumerate(self.prompts) if ctx[: len(p)] == p)
            text = self.scripts[i][min(self.seen[i], len(self.scripts[i]) - 1)]
            self.seen[i] += 1
            eos = text.endswith("<EOS>")
            ids = self.tok.encode(text.removesuffix("<EOS>"), add_special_tokens=False)
            ids += [self.tok.eos_token_id] if eos else []
            reason = "stop" if eos else "length"
            if len(ids) > sampling.max_new_tokens:
                ids, reason = ids[: sampling.max_new_tokens], "length"
            rows.append(ids)
            reasons.append(reason)
        logprobs = [[self.logprob] * len(r) for r in rows] if self.logprob is not None else None
        return RolloutOutput(list(range(len(rows))), rows, reasons, logprobs)

    def update_weights(self, model):
        pass
