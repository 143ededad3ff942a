"""The LLM judge as a reward source.

* `reward`: `JudgeReward(client, template)`, the RewardFn (verdicts, counts, skip/raise policy).
* `templates`: the built-in prompts and the verdict parsers; `clients`: in-process (HF) and HTTP judges;
  `vllm_judge`: the judge on its own vLLM engine.
* `build`: the judge from the `judge_*` keys (a config or `reward_server.py --judge`).
* `options`: reward_server.py's --judge-* options, generated from the keys' one declaration
  (`ppokit.args.judge.JudgeArguments`).
"""

from .reward import JudgeReward

__all__ = ["JudgeReward"]
