"""Shared by the multi-process tests and the scripts they start under torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# Variables a single-process Session in the pytest process leaves behind; a child launcher sets its own.
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR",
               "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def distinct_chars(prompts, responses, **fields):
    """Number of distinct characters: varies between samples, so advantages are never all zero."""
    return [float(len(set(r))) for r in responses]


def say(line: str) -> None:
    """Print a whole line in one write: torchrun runs ranks unbuffered (`python -u`), where print() writes the text
    and its newline separately, so two ranks' lines could interleave on the shared pipe ("rank 0: ...rank 1: ...")."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def update_overrides(model_path: str, data_path: str, out_dir: str, **extra) -> dict:
    """A GRPO step of 4 prompts x 4 responses in 2 mini-batches of micro-batches of 2 (global sizes,
    valid for 1 and 2 ranks). lr 1 with adam_epsilon 1 makes the first AdamW step ~ lr x gradient,
    so a wrong gradient shows up in the weights instead of being flattened to lr x sign(gradient)."""
    base = dict(
        actor_model_name_or_path=model_path, train_datasets=data_path, rl_algorithm="grpo",
        global_batch_size=4, rollout_n=4, global_mini_batch_size=2, per_device_train_batch_size=2,
        max_dec_len=8, max_prompt_len=32, max_length=64, learning_rate=1.0, adam_epsilon=1.0,
        kl_loss_coeff=0.05, max_steps=2, output_dir=out_dir, logging_dir=str(Path(out_dir) / "vdl"),
        seed=1, disable_tqdm=True, save_strategy="no", logging_steps=1,
    )
    base.update(extra)
    return base


def clean_env(**extra) -> dict:
    """This process's environment without launcher variables, with the repo importable."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra)
    return env


def torchrun(script: Path, *args: str, nproc: int = 2, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run `script args` under `python -m torch.distributed.run --standalone --nproc_per_node nproc`."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", str(script),
           *args]
    return subprocess.run(cmd, env=clean_env(), cwd=REPO, capture_output=True, text=True, timeout=timeout)


def tail(done: subprocess.CompletedProcess, n: int = 4000) -> str:
    return f"exit {done.returncode}\n--- stdout\n{done.stdout[-n:]}\n--- stderr\n{done.stderr[-n:]}"


class ToolScript:
    """A RolloutEngine that calls multiply(row + 2, 7) in its first turn and answers from the tool's result after.

    Outputs depend only on the row's place in the call and on its context, so every process that builds the same
    batch gets the same tokens; answers differ between the rows of a group, so GRPO has advantages to train on.
    """

    def __init__(self, tokenizer):
        self.tok = tokenizer

    def generate(self, prompt_token_ids, sampling):
        from ppokit.rollout.base import RolloutOutput

        rows = []
        for i, ctx in enumerate(prompt_token_ids):
            text = self.tok.decode(ctx)
            if "<tool_response>" in text:
                result = int(text.rsplit("<tool_response>", 1)[1].split("</tool_response>")[0].strip())
                answer = f"{result}" + "!?"[: 1 + result % 2] * (1 + result % 3)
            else:
                call = {"name": "multiply", "arguments": {"a": i + 2, "b": 7}}
                answer = f"ok <tool_call>{json.dumps(call)}</tool_call>"
            rows.append(self.tok.encode(answer, add_special_tokens=False)[: sampling.max_new_tokens]
                        + [self.tok.eos_token_id])
        return RolloutOutput(list(range(len(rows))), rows, ["stop"] * len(rows))

    def update_weights(self, model):
        pass


TOOL_OVERRIDES = dict(multi_turn=True, tools="multiply", max_dec_len=160, max_prompt_len=32, max_length=256)
