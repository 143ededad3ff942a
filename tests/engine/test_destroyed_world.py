"""A second Session in one process after something else destroyed torch.distributed's default group (an in-process
vLLM engine does when it is garbage-collected: its cleanup calls destroy_process_group behind DeepSpeed's back).
Run in a child process: destroying the group in the test process would reach every later test."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import torch.distributed as dist
    from ppokit.args import load_arguments
    from ppokit.session import Session
    from ppokit.testing import letter_a, save_tiny_model

    root = Path(sys.argv[1])
    model = save_tiny_model(root / "model", seed=0)
    data = root / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"say a {i}:"}) + "\\n" for i in range(8)))

    def session(name):
        args = dict(actor_model_name_or_path=model, train_datasets=str(data), global_batch_size=2, rollout_n=2,
                    global_mini_batch_size=2, per_device_train_batch_size=4, max_dec_len=4, max_prompt_len=32,
                    max_length=64, learning_rate=1e-3, max_steps=2, output_dir=str(root / name),
                    report_to=["none"], seed=1, disable_tqdm=True, save_strategy="no", rl_algorithm="grpo",
                    kl_loss_coeff=0.0)
        return Session(load_arguments(None, overrides=args), reward_functions=[letter_a])

    first = session("first")
    first.step()
    dist.destroy_process_group()  # what vLLM's cleanup does to the default group
    second = session("second")
    print("STEP", second.step()["reward/mean"] >= 0)
""")


def test_a_session_starts_after_the_default_group_was_destroyed(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "STEP True" in done.stdout
