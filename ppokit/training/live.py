"""Live keys reach the objects built from them: a notebook's `s.args.learning_rate = 0.0` (or kl_coeff,
target_kl, kl_loss_coeff from 0) between steps changes the next phase, never only the arguments.

`sync_live(learner, args)` runs once per walk of the phases, before the learner's first phase and on the learner's
thread (`Learner.apply_live`, `training.phases.walk`); it is cheap and does nothing when nothing changed. The
producer's live keys (temperature, top_p, ...) are read by its rollout when it starts.
Which keys are live, restart or derived is `ppokit.args.liveness`'s table.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("ppokit")


def sync_live(state, args) -> None:  # state: the Learner
    """Carry the live keys edited since the last phase into the optimizers, the KL controller and the models."""
    set_base_lr(state.policy.engine, args.learning_rate)
    if state.critic is not None:
        set_base_lr(state.critic.engine, args.learning_rate if args.critic_learning_rate is None
                    else args.critic_learning_rate)
    sync_kl_controller(state, args)
    ensure_reference(state, args)


def set_base_lr(engine, lr: float) -> None:
    """Make `lr` the schedule's base learning rate from now on: the LR schedule keeps its shape (warmup, decay)
    and scales to the new base, and the optimizer's param groups take the value for the next update."""
    scheduler = getattr(engine, "lr_scheduler", None)
    if scheduler is None or all(base == lr for base in scheduler.base_lrs):
        return
    scheduler.base_lrs = [lr] * len(scheduler.base_lrs)
    for group, fn in zip(scheduler.optimizer.param_groups, scheduler.lr_lambdas):
        group["lr"] = lr * fn(scheduler.last_epoch)


def follow_taken_steps(session) -> None:
    """Where hand-driven phases meet `train()`: the LR schedules follow the optimizer steps actually taken
    (`ppokit.args.run_plan.follow_taken`), so train()'s steps never run on a schedule that has already ended."""
    from ppokit.args.run_plan import follow_taken
    from ppokit.engine.schedule import retarget

    learner = session.learner
    scheduler = getattr(learner.policy.engine, "lr_scheduler", None)
    if scheduler is None or not hasattr(scheduler, "lr_lambdas"):
        return
    plan = follow_taken(learner.plan, scheduler.last_epoch, session.global_step)
    if plan is learner.plan:
        return
    learner.plan = session.producer.plan = plan  # one plan, read by both sides (between steps: no thread runs)
    retarget(scheduler, plan.actor_schedule.spec())
    critic = getattr(getattr(learner.critic, "engine", None), "lr_scheduler", None)
    if critic is not None and hasattr(critic, "lr_lambdas"):
        retarget(critic, plan.critic_schedule.spec())
    logger.info("the run plan follows the optimizer steps taken by hand: %s", plan.describe())


def sync_kl_controller(state, args) -> None:
    """kl_coeff (and, for the adaptive controller, target_kl / kl_horizon) assigned since the controller was
    built become its value and target; the controller's own adaptation continues from there."""
    applied = state.applied_kl
    wanted = {"kl_coeff": args.kl_coeff, "target_kl": args.target_kl, "kl_horizon": args.kl_horizon}
    if wanted == applied:
        return
    if wanted["kl_coeff"] != applied.get("kl_coeff"):
        state.kl_ctl.value = float(args.kl_coeff)
    for key, attr in (("target_kl", "target"), ("kl_horizon", "horizon")):
        if wanted[key] is not None and hasattr(state.kl_ctl, attr):
            setattr(state.kl_ctl, attr, float(wanted[key]))
    state.applied_kl = wanted


def ensure_reference(state, args) -> None:
    """A KL term turned on mid-run (kl_loss_coeff or kl_coeff from 0) needs the reference model: load it now."""
    policy = state.policy
    if not args.needs_reference or policy.reference is not None:
        return
    from ppokit.models import dtype_for, load_reference
    from ppokit.tracking.console import quiet_hf_progress

    param_dtype, _ = dtype_for(args.bf16, args.fp16, policy.device)
    lora = args.lora_rank > 0
    where = "the actor's base weights (LoRA adapters off)" if lora else (
        f"{policy.model_path}" if policy.model_path else "a copy of the actor as it is now (no model path to reload)")
    logger.warning("a KL term was turned on mid-run (kl_loss_coeff=%g, kl_coeff=%g): loading the reference "
                   "model now, from %s", args.kl_loss_coeff, args.kl_coeff, where)
    with quiet_hf_progress():
        policy.reference = load_reference(policy.engine.module, policy.model_path, dtype=param_dtype,
                                          device=policy.device, lora_used=lora)


FLAT_STEPS_TO_WARN = 2


def warn_flat_groups(state, args, batch) -> None:
    """Say once, naming the likely cause, when a group algorithm's first steps have no learning signal: every
    group's rewards equal (zero std, zero advantage, zero gradient). `groups/zero_std_frac` counts it each step."""
    from ppokit.algorithms import algorithm

    if not algorithm(args.rl_algorithm).needs_groups or batch.scores is None or state.flat_steps < 0:
        return
    from ppokit.algos.advantages import zero_std_groups
    from ppokit.training.metrics import over_ranks

    groups = len(batch.group_ids.unique())
    flat, _ = over_ranks("groups/zero_std_frac", len(zero_std_groups(batch.scores, batch.group_ids)) / max(groups, 1),
                         len(batch))
    if flat is None or flat < 1.0:
        state.flat_steps = -1  # a step with signal: the run is learning, never warn
        return
    state.flat_steps += 1
    greedy = args.temperature <= 0
    if state.flat_steps < (1 if greedy else FLAT_STEPS_TO_WARN):
        return
    cause = ("temperature is 0 (greedy decoding), so the responses to one prompt are all the same; sample with "
             "temperature > 0, e.g. 1.0" if greedy else
             "the reward is the same for every response to a prompt: check the reward function (a constant or "
             "failing reward), or make the task harder/easier")
    logger.warning("no learning signal in the first %d step(s): every group of %s has equal rewards "
                   "(groups/zero_std_frac 1.0, advantages 0) — %s", state.flat_steps, args.rl_algorithm, cause)
    state.flat_steps = -1  # said once
