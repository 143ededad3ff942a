"""One precision path on every device: with bf16 the engine's training forward computes in bf16, as the rollout,
the old log-probs and the reference do, so KL and the rollout/trainer log-prob difference are exactly 0 at step 0.

On CUDA, DeepSpeed's `engine.forward` switches an outer autocast OFF inside the engine unless its own
`torch_autocast` section is on (deepspeed/runtime/torch_autocast.py: `autocast_if_enabled`); it sees the outer
autocast through `torch.is_autocast_enabled()`, which reads only the CUDA flag. A CPU never takes that branch, so
these tests show DeepSpeed the CPU's autocast flag as a GPU shows it the CUDA flag (`cuda_autocast_semantics`).
bf16 is forced (PPOKIT_CPU_BF16=1) on a tiny model: this CPU may emulate bf16 (slow, but the model is tiny).
"""

import types

import pytest
import torch
from session_helpers import distinct_chars, tiny_overrides

from ppokit.args import load_arguments
from ppokit.session import Session


@pytest.fixture()
def cuda_autocast_semantics(monkeypatch):
    """DeepSpeed's autocast_if_enabled sees the CPU autocast flag where it would read the CUDA one on a GPU."""
    import deepspeed.runtime.torch_autocast as ds_autocast

    real = torch.is_autocast_enabled

    def on_the_accelerator(device_type=None):
        return real(device_type or "cpu")

    view = types.ModuleType("torch_as_on_cuda")
    view.__getattr__ = lambda name: getattr(torch, name)  # noqa: B023  (module-level __getattr__)
    view.is_autocast_enabled = on_the_accelerator
    monkeypatch.setattr(ds_autocast, "torch", view)
    return view


def linear_output_dtypes(model) -> tuple[list, object]:
    """(the dtypes of every nn.Linear's output while recording, the hook handles). An LM head passed through
    while the forward stops at the hidden states (training/lm_head.py: its forward replaced) computes nothing."""
    seen: list = []

    def record(mod, inp, out):
        if "forward" not in vars(mod):
            seen.append(out.dtype)

    handles = [m.register_forward_hook(record) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    return seen, handles


def bf16_session(tiny_model_path, prompts_file, tmp_path, monkeypatch, **extra):
    monkeypatch.setenv("PPOKIT_CPU_BF16", "1")  # as on a CPU with bf16 instructions
    args = load_arguments(None, overrides=tiny_overrides(tiny_model_path, prompts_file, tmp_path, bf16=True,
                                                         kl_loss_coeff=0.1, max_dec_len=4, **extra))
    return Session(args, reward_functions=[distinct_chars])


def recorded(model, call):
    """(call's result, the set of dtypes its nn.Linear layers in `model` output)."""
    seen, handles = linear_output_dtypes(model)
    try:
        out = call()
    finally:
        for h in handles:
            h.remove()
    assert seen, "no Linear layer ran"
    return out, set(seen)


def test_the_engines_training_forward_is_bf16_and_kl_is_zero_at_step_0(
        tiny_model_path, prompts_file, tmp_path, monkeypatch, cuda_autocast_semantics):
    s = bf16_session(tiny_model_path, prompts_file, tmp_path, monkeypatch)
    policy = s.state.policy
    assert policy.compute_dtype == torch.bfloat16
    batch = s.rollout()  # the decoding loop under the same autocast (rollout/decode.py calls the weights itself)
    s.score(batch)
    s.compute_advantages(batch)
    stats, update_dtypes = recorded(policy.engine.module, lambda: s.update(batch))
    assert update_dtypes == {torch.bfloat16}, f"Linear outputs in the training forward: {update_dtypes}"
    assert stats["actor/kl"] == 0.0 and stats["actor/kl_k1"] == 0.0 and stats["actor/kl_loss"] == 0.0
    # The rollout's decoding loop computes each token against its KV cache, the trainer whole rows: the same
    # dtype, other reduction orders (float32 gives ~1e-7 here), so this is bf16's rounding, not a float32 forward.
    assert 0.0 <= stats["rollout/logprob_diff"] < 2e-2


def test_trainer_old_logprobs_and_reference_are_the_same_bits(tiny_model_path, prompts_file, tmp_path, monkeypatch,
                                                              cuda_autocast_semantics):
    """The training forward (through the engine, with grad), old log-probs (`engine.module`, no grad) and the
    reference (a separate copy) at step 0, over the same micro-batch (its shape sets the packing): equal to the bit."""
    from ppokit.training.forward import batched_logprobs, policy_forward

    s = bf16_session(tiny_model_path, prompts_file, tmp_path, monkeypatch)
    p = s.state.policy
    batch = s.rollout().trimmed()
    s.state.policy.engine.train()
    trained, _ = policy_forward(p.engine, batch, 3, "detached", p.compute_dtype, p.device, batch.temperature)
    old = batched_logprobs(p.engine.module, batch, len(batch), 1024, p.compute_dtype, p.device, batch.temperature)
    ref = batched_logprobs(p.reference, batch, len(batch), 7, p.compute_dtype, p.device, batch.temperature)
    assert trained.requires_grad
    assert torch.equal(trained.detach() * batch.response_mask, old)
    assert torch.equal(old, ref)


def test_the_critics_training_forward_is_bf16(tiny_model_path, prompts_file, tmp_path, monkeypatch,
                                              cuda_autocast_semantics):
    s = bf16_session(tiny_model_path, prompts_file, tmp_path, monkeypatch, rl_algorithm="ppo")
    batch = s.rollout()
    s.score(batch)
    s.compute_advantages(batch)
    _, dtypes = recorded(s.state.critic.engine.module, lambda: s.update(batch))
    assert dtypes == {torch.bfloat16}, f"Linear outputs in the critic's forward: {dtypes}"


def test_an_engine_without_the_section_is_refused_not_run_in_float32(tiny_model_path, prompts_file, tmp_path,
                                                                     monkeypatch):
    from ppokit.training.forward import compute_context

    s = bf16_session(tiny_model_path, prompts_file, tmp_path, monkeypatch)
    engine = s.state.policy.engine
    monkeypatch.setattr(engine, "torch_autocast_enabled", lambda: False)
    with pytest.raises(RuntimeError, match="torch_autocast section"):
        compute_context(engine, torch.bfloat16, "cpu")
