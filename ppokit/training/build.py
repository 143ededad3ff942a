"""Build a Session's two sides (`training.sides`: Producer, Learner) from resolved arguments: one function per
part, wired in `build_sides`."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from ppokit.algos import algorithm
from ppokit.algos.kl import make_kl_controller
from ppokit.args import (
    ConfigError,
    batch_plan,
    check_hub_datasets,
    check_lengths,
    run_plan,
)
from ppokit.data import PromptLoader, choose_chat_template
from ppokit.rollout import RolloutEngine
from ppokit.tracking.console import quiet_hf_progress, set_quiet, stage
from ppokit.training.engine_setup import choose_device, seed_everything, train_engine, zero_options
from ppokit.training.heap import keep_freed_memory
from ppokit.training.model_setup import add_stop_token, configure_model
from ppokit.training.normalize import RunningNormalizer
from ppokit.training.run_paths import check_run_paths
from ppokit.training.sides import Learner, Producer, WeightHandoff
from ppokit.training.threads import ThreadPolicy

logger = logging.getLogger("ppokit")


@dataclass
class Policy:
    """The actor side: tokenizer, trainable model (inside a DeepSpeed engine), reference, precision."""

    tokenizer: object
    engine: object  # deepspeed engine; engine.module is the (peft-wrapped) causal LM
    reference: object | None  # callable model (or adapter-disabled view) for reference log-probs
    compute_dtype: torch.dtype | None
    device: torch.device
    model_path: str | None


@dataclass
class Actor:
    """The actor as loaded, before its optimizer exists: what the data and the rollout engine need first."""

    model: object
    tokenizer: object
    path: str | None
    device: torch.device
    param_dtype: torch.dtype
    compute_dtype: torch.dtype | None
    lora_used: bool


def load_actor(args, dist, plan, model=None, tokenizer=None) -> Actor:
    """Tokenizer (with the run's chat template) and the trainable model, on its device or, where a vLLM engine will
    start on that GPU, on the meta device until then (`staging_device`, `place_actor`); no optimizer yet."""
    from ppokit.models import (
        LoraSpec,
        attention_implementation,
        dtype_for,
        load_causal_lm,
        load_tokenizer,
        resolve_model_path,
    )

    device = choose_device(args, dist)
    keep_freed_memory(device)  # a CPU run's freed memory stays in glibc's heap for the next micro-batch (heap.py)
    param_dtype, compute_dtype = dtype_for(args.bf16, args.fp16, device)
    lora = LoraSpec(rank=args.lora_rank, alpha=args.lora_alpha, dropout=args.lora_dropout) if args.lora_rank > 0 else None
    path = None
    if model is None:
        with stage(f"loading {args.actor_model_name_or_path}"), quiet_hf_progress():
            path = resolve_model_path(args.actor_model_name_or_path)
            tokenizer = tokenizer or load_tokenizer(path)
            from ppokit.training.engine_setup import zero3_config  # ZeRO-3: loaded partitioned

            model = load_causal_lm(path, dtype=param_dtype, device=staging_device(args, device, plan),
                                   gradient_checkpointing=args.recompute,
                                   attn_implementation=attention_implementation(args.use_flash_attention, compute_dtype),
                                   lora=lora, zero3_config=zero3_config(args, plan, device))
    elif lora is not None:
        from ppokit.models import apply_lora

        model = apply_lora(model, lora)
    if tokenizer is None:
        raise ValueError("Session(model=...) needs tokenizer=... too")
    configure_model(args, model, args.recompute)
    add_stop_token(model, tokenizer, args.eos_token)
    logger.info("prompts are rendered with %s", choose_chat_template(
        tokenizer, args.chat_template, "chat_template" in args.model_fields_set, args.actor_model_name_or_path))
    check_lengths(args, getattr(model.config, "max_position_embeddings", None))
    return Actor(model=model, tokenizer=tokenizer, path=path, device=device, param_dtype=param_dtype,
                 compute_dtype=compute_dtype, lora_used=lora is not None)


def staging_device(args, device, plan) -> torch.device:
    """Where the actor is loaded before the rollout engine exists: the meta device (no storage, models/staging.py; the
    CPU with LoRA) when a vLLM engine is about to start on this GPU (it sizes itself from the free memory and refuses
    to start above ~0.6 of an 80 GB card with a 7B float32 actor already there; docs/scaling.md, start-up order),
    else `device`. ZeRO-3 actors load partitioned (a shard
    per GPU), in place."""
    from ppokit.rollout.vllm_engine import vllm_available
    from ppokit.training.engine_setup import zero_options

    wants_vllm = args.rollout_engine == "vllm" or (args.rollout_engine is None and args.use_fusemt)
    if device.type != "cuda" or not wants_vllm or not vllm_available() or zero_options(args)["zero_stage"] == 3:
        return device
    return torch.device("cpu") if args.lora_rank > 0 else torch.device("meta")  # meta: no host RAM (models/staging)


def place_actor(actor: Actor) -> None:
    """The actor on its training device (after the rollout engine started; a no-op where it was loaded there): a
    meta-staged actor reads its weights straight onto the device."""
    from ppokit.models.staging import materialize

    materialize(actor.model, actor.device)
    actor.model.to(actor.device)


def build_policy(args, actor: Actor, run) -> Policy:
    """The reference (only when a KL term is used) and the actor in a DeepSpeed engine with the run's schedule."""
    from ppokit.models import load_reference

    reference = None
    if args.needs_reference:
        with stage("loading the reference model"), quiet_hf_progress():
            reference = load_reference(actor.model, actor.path, dtype=actor.param_dtype, device=actor.device,
                                       lora_used=actor.lora_used)
    with stage(f"building the DeepSpeed engine (ZeRO stage {zero_options(args)['zero_stage']}, {actor.device.type})"):
        engine = train_engine(actor.model, args, run, actor.device)
    return Policy(tokenizer=actor.tokenizer, engine=engine, reference=reference, compute_dtype=actor.compute_dtype,
                  device=actor.device, model_path=actor.path)


def load_records(args, spec, task_config) -> list[dict]:
    """Records from a dataset spec (comma list of paths) or a task-config JSON; [] when neither is set."""
    from ppokit.data import ensure_prepared, load_datasets, load_task_config

    if task_config:
        return load_task_config(task_config, prompt_key=args.prompt_key, response_key=args.response_key)
    if not spec:
        return []
    for path in str(spec).split(","):
        ensure_prepared(path.strip())
    return load_datasets(spec, prompt_key=args.prompt_key, response_key=args.response_key)


def build_data_split(args, tokenizer, spec, task_config):
    """(encoded records, raw count, dropped count) for one split."""
    from ppokit.data import encode_prompts

    raw = load_records(args, spec, task_config)
    if not raw:
        return [], 0, 0
    kept = encode(raw, tokenizer, args.max_prompt_len, encode_prompts)
    return kept, len(raw), len(raw) - len(kept)


def build_data(args, tokenizer, plan):
    """Train (and eval) records, rendered and encoded once, and the seeded prompt loader."""
    raw = load_records(args, args.train_datasets, args.train_task_config)
    if not raw:
        raise ConfigError("no training data: set train_datasets (a .jsonl/.json/.parquet path) or train_task_config")
    if args.train_data_size:
        raw = raw[: args.train_data_size]
    from ppokit.data import encode_prompts

    train = encode(raw, tokenizer, args.max_prompt_len, encode_prompts)
    evals, _, _ = build_data_split(args, tokenizer, args.eval_datasets, args.eval_task_config)
    train_prompts = {r["_prompt_text"] for r in train}
    overlap = sum(r["_prompt_text"] in train_prompts for r in evals)
    if overlap:
        # Eval prompts never come from the training set: an overlapping prompt would inflate eval metrics.
        logger.warning("removed %d eval prompts that also appear in the training data", overlap)
        evals = [r for r in evals if r["_prompt_text"] not in train_prompts]
    if not evals and args.eval_split_ratio:
        train, evals = split_off_eval(train, args.eval_split_ratio, args.seed)
    # each draw is one generation round: global_gen_batch_size prompts under dynamic sampling
    loader = PromptLoader(train, batch_size=plan.gen_prompts_per_step, seed=args.seed,
                          shuffle=args.dataloader_shuffle, drop_last=args.dataloader_drop_last)
    return train, evals, loader


def split_off_eval(train: list[dict], ratio: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, eval): a seeded `ratio` of the distinct training prompts becomes the eval set (`eval_split_ratio`).

    Every copy of a held-out prompt leaves the training set, and the eval set keeps one copy of each.
    """
    import random

    prompts = sorted({r["_prompt_text"] for r in train})
    random.Random(seed).shuffle(prompts)
    held = set(prompts[: max(1, round(ratio * len(prompts)))])
    if len(held) >= len(prompts):
        raise ConfigError(f"eval_split_ratio={ratio} would leave no training prompts ({len(prompts)} distinct); "
                         "lower it or set eval_datasets")
    evals, seen = [], set()
    for r in train:
        if r["_prompt_text"] in held and r["_prompt_text"] not in seen:
            seen.add(r["_prompt_text"])
            evals.append(r)
    return [r for r in train if r["_prompt_text"] not in held], evals


def encode(records, tokenizer, max_prompt_len, encode_prompts):
    """Attach `_prompt_text` and `_prompt_ids` to each record (dropping over-long prompts, counted)."""
    from ppokit.data import render_prompt

    kept, ids, dropped = encode_prompts(records, tokenizer, max_prompt_len)
    for record, tokens in zip(kept, ids):
        record["_prompt_text"] = render_prompt(record, tokenizer)
        record["_prompt_ids"] = tokens
    return kept  # encode_prompts already reported how many were dropped


def quiet_other_ranks(rank: int) -> None:
    """On ranks other than 0, show only ppokit's warnings and errors (rank 0 prints the info lines)."""
    set_quiet(rank != 0)
    if rank != 0:
        logging.getLogger("ppokit").setLevel(logging.WARNING)


def build_sides(args, model=None, tokenizer=None, reward_functions=None) -> tuple[Producer, Learner]:
    """(producer, learner), built in dependency order: the data before the run plan, the run plan before the
    optimizers (their schedules), the rollout engine before the optimizers and the reference (vLLM sizes its
    memory from what is free when it starts)."""
    from ppokit.args.cli import _ensure_log_handler
    from ppokit.engine import init_distributed
    from ppokit.rewards import build_reward_functions

    _ensure_log_handler()  # a Session outside run_ppo.py (a notebook, a script) says its notes as "ppokit: ..." too
    check_hub_datasets(args)  # before minutes of model loading
    check_run_paths(args, actor_given=model is not None)  # every path written or read, one sentence each
    threads = ThreadPolicy(asynchronous=args.staleness_threshold > 0)  # counts other processes' CPU use from here on
    # log_level: debug shows DeepSpeed's config and start-up output; passive (the default) means info
    logger.setLevel("INFO" if args.log_level == "passive" else args.log_level.upper())
    with stage("starting the process group (DeepSpeed)"):
        dist = init_distributed()
    quiet_other_ranks(dist.rank)  # only rank 0 prints ppokit's info lines
    geometry = batch_plan(args, dist.world_size)
    for note in geometry.notes:  # e.g. the micro-batch capped at what a rank has
        logger.info(note)
    seed_everything(args.seed)
    actor = load_actor(args, dist, geometry, model=model, tokenizer=tokenizer)
    with stage("reading the prompts"):
        train, evals, loader = build_data(args, actor.tokenizer, geometry)
    plan = run_plan(args, geometry, len(loader))
    logger.info("run plan: %s", plan.describe())
    fns = reward_functions if reward_functions is not None else build_reward_functions(args, train)
    if reward_functions is not None and not isinstance(fns, list):
        fns = [fns]
    fns = [normalize_reward_fn(f) for f in fns]
    rollout_engine = build_rollout_engine(args, actor, dist)  # vLLM first, on a GPU the actor does not use yet
    place_actor(actor)
    policy = build_policy(args, actor, plan)
    threads = threads if policy.device.type == "cpu" else None
    handoff = WeightHandoff()
    producer = Producer(args=args, dist=dist, plan=plan, tokenizer=policy.tokenizer, rollout_engine=rollout_engine,
                        reward_fns=fns, loader=loader, train_records=train, eval_records=evals, threads=threads,
                        decoding_threads=threads.decoding if threads is not None else None,
                        eval_spec=(args.eval_datasets, args.eval_task_config),
                        reward_normalizer=RunningNormalizer() if args.normalize_reward else None, handoff=handoff)
    if args.multi_turn:  # tools are loaded (and their files checked) before any model work
        from ppokit.rollout.agent_loop import agent_spec

        producer.agent = agent_spec(args, policy.tokenizer)
    logprob_bs = args.per_device_logprob_batch_size if args.per_device_logprob_batch_size > 0 else \
        geometry.micro_batch_size
    learner = Learner(args=args, dist=dist, plan=plan, policy=policy, logprob_batch_size=logprob_bs, handoff=handoff,
                      kl_ctl=make_kl_controller(args.kl_ctrl_type, args.kl_coeff, args.target_kl, args.kl_horizon),
                      applied_kl={"kl_coeff": args.kl_coeff, "target_kl": args.target_kl, "kl_horizon": args.kl_horizon},
                      threads=threads)
    if algorithm(args.rl_algorithm).needs_critic:
        from ppokit.training.critic import build_critic

        with stage("loading the critic"), quiet_hf_progress():
            learner.critic = build_critic(args, dist, plan, policy)
    if args.ptx_coeff > 0:
        from ppokit.training.ptx import build_ptx_loss

        ptx_records, _, _ = build_data_split(args, policy.tokenizer, args.ptx_datasets, args.ptx_task_config)
        learner.ptx_loss = build_ptx_loss(args, policy, geometry, ptx_records)
    return producer, learner


def build_rollout_engine(args, actor: Actor, dist) -> RolloutEngine:
    """The rollout engine over the actor's model (the same module the DeepSpeed engine will wrap)."""
    from ppokit.rollout import make_rollout_engine

    return make_rollout_engine(
        args.rollout_engine, args.use_fusemt, actor.model, actor.tokenizer, model_path=actor.path,
        batch_size=args.per_device_rollout_batch_size if args.per_device_rollout_batch_size > 0 else None,
        compute_dtype=actor.compute_dtype, args=args, rank=dist.rank, world_size=dist.world_size,
        return_logprobs=True,  # rollout/logprob_diff and rollout_is compare them with the trainer's
    )


def normalize_reward_fn(fn):
    """Accept a plain callable as a reward function (named after itself) as well as a NamedReward."""
    from ppokit.rewards import NamedReward

    if isinstance(fn, NamedReward):
        return fn
    return NamedReward(name=getattr(fn, "__name__", "custom"), fn=fn)
