"""Batch arithmetic: how many prompts, sequences, micro-batches and optimizer steps one rollout step has.

ppokit semantics. A rollout step draws ``prompts_per_step`` prompts (global) and samples ``rollout_n``
responses for each. The update then makes ``update_iters`` passes over these sequences; each pass walks
them in mini-batches of ``mini_batch_prompts x rollout_n`` sequences (global), one optimizer step per
mini-batch, each mini-batch being ``gradient_accumulation_steps`` micro-batches of
``per_device_train_batch_size`` sequences on every rank. Hence::

    optimizer_steps_per_rollout = update_iters * prompts_per_step / mini_batch_prompts
    gradient_accumulation_steps = mini_batch_sequences_per_rank / micro_batch_size

Two modes pick the numbers, as PaddleNLP's versions did:

* ``global`` (``global_batch_size`` given, PaddleNLP E5+): prompts_per_step = global_batch_size,
  mini_batch_prompts = global_mini_batch_size (<0 -> global_batch_size); accumulation is computed.
* ``per_device`` (otherwise, PaddleNLP E0-E4): prompts_per_step = per_device_prompt_batch_size x
  data_parallel_size; a mini-batch is per_device_train_batch_size x gradient_accumulation_steps (from
  the config) x data_parallel_size sequences. ``data_parallel_size`` is PaddleNLP's count of
  data-parallel ranks, world_size / tensor_parallel_degree / pipeline_parallel_degree (a TP-8 file on
  8 GPUs has one), so a file draws the same prompts per step as under PaddleNLP; ppokit then splits
  those sequences over all its world_size ranks, which all train data-parallel.

PaddleNLP E5+ differs when update_iters > 1: it repeats the micro-batch list update_iters times and
folds update_iters into the accumulation (global_mini x rollout_n x update_iters / micro / ranks), so it
makes global_batch_size / global_mini_batch_size optimizer steps per rollout whatever update_iters is.
ppokit makes update_iters times as many, each over one real mini-batch. With update_iters = 1 both agree.
All ranks are data-parallel here (vLLM tensor parallelism only shards rollouts); global sizes are
global in both programs, so in global mode world_size only sets the per-rank split.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from .errors import ConfigError


@dataclass(frozen=True)
class BatchPlan:
    """The batch sizes of one rollout step (see the module docstring for the semantics)."""

    prompts_per_step: int  # global prompts per rollout step (valid ones under dynamic sampling)
    sequences_per_step: int  # global sequences = prompts_per_step x rollout_n
    prompts_per_rank: int
    sequences_per_rank: int
    mini_batch_prompts: int  # global prompts per optimizer step
    mini_batch_sequences_per_rank: int
    micro_batch_size: int  # = per_device_train_batch_size, capped at mini_batch_sequences_per_rank
    gradient_accumulation_steps: int  # micro-steps per optimizer step, per rank
    update_iters: int
    optimizer_steps_per_rollout: int
    rollout_n: int
    world_size: int
    mode: Literal["global", "per_device"]
    gen_prompts_per_step: int  # global prompts generated per round (> prompts_per_step with dynamic sampling)
    data_parallel_size: int = 1  # PaddleNLP's data-parallel ranks (world / TP / PP): per_device_* count per one
    notes: tuple[str, ...] = ()  # adjustments made to fit this world size (said once when training starts)

    def to_dict(self) -> dict[str, Any]:
        """The plan as a plain dict."""
        return asdict(self)


def batch_mode(args: Any) -> Literal["global", "per_device"]:
    """'global' when global_batch_size was given (file, command line, overrides or assignment)."""
    return "global" if "global_batch_size" in args.model_fields_set else "per_device"


def batch_plan(args: Any, world_size: int = 1) -> BatchPlan:
    """Compute the batch plan of ``args`` on ``world_size`` data-parallel ranks; raises ConfigError
    naming the numbers when they do not divide as the arithmetic needs."""
    if world_size < 1:
        raise ConfigError(f"world_size must be at least 1, got {world_size}.")
    n = args.rollout_n
    micro = args.per_device_train_batch_size
    notes: tuple[str, ...] = ()
    if batch_mode(args) == "global":
        prompts, mini, gen = _global_sizes(args, world_size)
        mini_seq_rank = mini * n // world_size
        if micro > mini_seq_rank:  # more ranks leave each fewer sequences: one micro-batch of what it has
            notes = (f"per_device_train_batch_size={micro} is more than the {mini_seq_rank} sequences each of "
                     f"{world_size} ranks has per optimizer step; micro-batches of {mini_seq_rank} are used",)
            micro = mini_seq_rank
        accumulation = mini_seq_rank // micro
        _require(mini_seq_rank % micro == 0 and accumulation >= 1,
                 f"global_mini_batch_size x rollout_n / world_size = {mini} x {n} / {world_size} = "
                 f"{mini_seq_rank} sequences per rank per optimizer step, which per_device_train_batch_size="
                 f"{micro} must divide; choose a micro-batch that divides {mini_seq_rank}")
    else:
        prompts, mini, gen, mini_seq_rank = _per_device_sizes(args, world_size)
        accumulation = mini_seq_rank // micro
    steps = args.update_iters * prompts // mini
    return BatchPlan(
        prompts_per_step=prompts, sequences_per_step=prompts * n, prompts_per_rank=prompts // world_size,
        sequences_per_rank=prompts * n // world_size, mini_batch_prompts=mini,
        mini_batch_sequences_per_rank=mini_seq_rank, micro_batch_size=micro,
        gradient_accumulation_steps=accumulation, update_iters=args.update_iters,
        optimizer_steps_per_rollout=steps, rollout_n=n, world_size=world_size, mode=batch_mode(args),
        gen_prompts_per_step=gen, data_parallel_size=data_parallel_size(args, world_size), notes=notes)


def data_parallel_size(args: Any, world_size: int) -> int:
    """PaddleNLP's data-parallel ranks (its dataset_world_size): world_size / tensor_parallel_degree /
    pipeline_parallel_degree, at least 1 (a TP-8 file on one CPU process counts as one rank)."""
    model_parallel = max(args.tensor_parallel_degree, 1) * max(args.pipeline_parallel_degree, 1)
    return max(world_size // model_parallel, 1)


def _global_sizes(args: Any, world: int) -> tuple[int, int, int]:
    prompts, n = args.global_batch_size, args.rollout_n
    mini = args.global_mini_batch_size if args.global_mini_batch_size > 0 else prompts
    gen = args.global_gen_batch_size if args.dynamic_sampling and args.global_gen_batch_size > 0 else prompts
    _require(prompts % world == 0,
             f"global_batch_size={prompts} prompts cannot be split over {world} ranks; make it a multiple "
             f"of {world}")
    _require(gen % world == 0,
             f"global_gen_batch_size={gen} prompts cannot be split over {world} ranks; make it a multiple "
             f"of {world}")
    _require(gen >= prompts,
             f"global_gen_batch_size={gen} is smaller than global_batch_size={prompts}; dynamic sampling "
             "generates at least the prompts it keeps")
    _require(mini <= prompts and prompts % mini == 0,
             f"global_mini_batch_size={mini} must divide global_batch_size={prompts} so each rollout "
             "splits into whole mini-batches")
    _require(mini * n % world == 0,
             f"a mini-batch of global_mini_batch_size x rollout_n = {mini} x {n} = {mini * n} sequences "
             f"cannot be split over {world} ranks; make it a multiple of {world}")
    return prompts, mini, gen


def _per_device_sizes(args: Any, world: int) -> tuple[int, int, int, int]:
    n, micro, accumulation = args.rollout_n, args.per_device_train_batch_size, args.gradient_accumulation_steps
    dp = data_parallel_size(args, world)
    gen_rank = args.per_device_prompt_batch_size
    sampled = args.dynamic_sampling and "per_device_sample_batch_size" in args.model_fields_set
    prompts_rank = args.per_device_sample_batch_size if sampled else gen_rank
    _require(gen_rank >= prompts_rank,
             f"per_device_prompt_batch_size={gen_rank} is smaller than per_device_sample_batch_size="
             f"{prompts_rank}; dynamic sampling generates at least the prompts it keeps")
    ranks = "world_size" if dp == world else f"data_parallel_size (world {world} / TP x PP)"
    prompts, gen = prompts_rank * dp, gen_rank * dp
    mini_seqs = micro * accumulation * dp  # global sequences per optimizer step
    _require(prompts % world == 0 and gen % world == 0,
             f"per-device prompts x {ranks} = {prompts_rank} x {dp} = {prompts} prompts per step cannot be split "
             f"over {world} ranks; make it a multiple of {world}")
    _require(mini_seqs % world == 0,
             f"per_device_train_batch_size x gradient_accumulation_steps x {ranks} = {micro} x {accumulation} x {dp} "
             f"= {mini_seqs} sequences per optimizer step cannot be split over {world} ranks")
    seq_rank, mini_seq_rank = prompts * n // world, mini_seqs // world
    _require(seq_rank % mini_seq_rank == 0,
             f"each rank has per-device prompts x rollout_n = {prompts // world} x {n} = {seq_rank} sequences "
             f"per step, which per_device_train_batch_size x gradient_accumulation_steps = {micro} x "
             f"{accumulation} = {mini_seq_rank} sequences per optimizer step must divide" if dp == world else
             f"each rank has {seq_rank} sequences per step, which the {mini_seq_rank} sequences per rank per "
             "optimizer step must divide")
    _require(mini_seq_rank % micro == 0,
             f"the {mini_seq_rank} sequences per rank per optimizer step ({mini_seqs} over {world} ranks) are not "
             f"whole micro-batches of per_device_train_batch_size={micro}; choose a micro-batch that divides "
             f"{mini_seq_rank}")
    _require(mini_seqs % n == 0,
             f"an optimizer step sees per_device_train_batch_size x gradient_accumulation_steps x {ranks} "
             f"= {micro} x {accumulation} x {dp} = {mini_seqs} sequences, which must be whole "
             f"groups of rollout_n={n}; set global_batch_size to use the global batch rules, or make that "
             f"product a multiple of {n}")
    return prompts, mini_seqs // n, gen, mini_seq_rank


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(f"Batch sizes do not divide: {message}.")
