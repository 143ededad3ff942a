"""Every path a training run will write or read, as `ppokit.paths.PathUse`s, checked before the models load
(`check_run_paths`, called first by `build_state`): output_dir (checkpoints, the final model, metrics.jsonl and
samples.jsonl), logging_dir, the datasets and task configs, reward-function and tool files, the chat and judge
templates, the models and the checkpoint to resume."""

from __future__ import annotations

import os

from ppokit.paths import (
    READ_ANY,
    READ_DIR,
    READ_FILE,
    WRITE_DIR,
    WRITE_FILE,
    PathUse,
    check_paths,
    joined_path,
)

RUN_FILES = ("metrics.jsonl", "samples.jsonl")  # what the tracker appends to in output_dir
TEMPLATE_SUFFIXES = (".j2", ".jinja", ".txt", ".md")  # a judge_template ending so is a file (judge_templates.py)


def check_run_paths(args, actor_given: bool = False) -> None:
    """PathError (one sentence per path) when a path of the run cannot be used as it will be. `actor_given`: the
    Session was handed its model, so actor_model_name_or_path is not read."""
    uses = [*written_paths(args), *dataset_paths(args), *file_paths(args), *model_paths(args)]
    check_paths(use for use in uses if not (actor_given and use.key == "actor_model_name_or_path"))


def written_paths(args) -> list[PathUse]:
    from ppokit.tracking.backends import resolve_report_to

    out = str(args.output_dir)
    uses = [PathUse("output_dir", out, WRITE_DIR)]
    uses += [PathUse(f"output_dir ({name})", os.path.join(out, name), WRITE_FILE) for name in RUN_FILES
             if os.path.lexists(os.path.join(out, name))]
    try:
        writers = resolve_report_to(args.report_to)
    except ValueError:
        writers = []  # an unknown writer is the tracker's sentence
    if args.logging_dir and {"visualdl", "tensorboard"} & set(writers):
        uses.append(PathUse("logging_dir", str(args.logging_dir), WRITE_DIR))
    resume = args.resume_from_checkpoint
    if isinstance(resume, str) and resume.strip().lower() not in ("", "auto", "true", "false", "none"):
        inside = os.path.join(str(args.output_dir), resume)  # a checkpoint's name inside output_dir, as resume reads it
        if not os.path.isdir(resume) and os.path.isdir(inside):
            resume = inside
        uses.append(PathUse("resume_from_checkpoint", resume, READ_DIR))
    return uses


def dataset_paths(args) -> list[PathUse]:
    """Each file of the dataset keys; a missing file of a layout ppokit generates (ppo-kk/…, arithmetic/…) is
    generated when read, and a hub dataset name is refused by `check_hub_datasets`."""
    from ppokit.args.history import PADDLE_HUB_DATASETS
    from ppokit.data.errors import DataError
    from ppokit.data.prepare import match_layout
    from ppokit.data.specs import split_spec

    uses = []
    for key in ("train_datasets", "eval_datasets", "ptx_datasets"):
        spec = getattr(args, key, None)
        if not spec or (key == "ptx_datasets" and not args.ptx_coeff > 0) or os.path.exists(str(spec).strip()):
            continue  # a value that is itself a path is read whole
        items = [item.strip() for item in (spec if isinstance(spec, (list, tuple)) else str(spec).split(","))]
        for i, item in enumerate(items):
            try:
                path = split_spec(item)[0][0] if item else None
            except DataError:
                continue  # a spelling ppokit does not read: the loader's sentence
            if not path or os.path.exists(path) or match_layout(path) or \
                    path.split("/")[0].split(":")[0] in PADDLE_HUB_DATASETS:
                continue
            uses.append(PathUse(key, path, READ_ANY, whole=joined_path(items, i, ","), sep=",",
                                sep_means="between dataset files"))
    for key in ("train_task_config", "eval_task_config", "ptx_task_config"):
        if getattr(args, key, None) and not (key == "ptx_task_config" and not args.ptx_coeff > 0):
            uses.append(PathUse(key, str(getattr(args, key)), READ_FILE))
    return uses


def file_paths(args) -> list[PathUse]:
    """Reward-function and tool files (the part before ':'), the tool config, the chat and judge templates."""
    uses = []
    spec = args.reward_functions
    items = [item.strip() for item in (spec if isinstance(spec, (list, tuple)) else str(spec or "").split(","))]
    for i, item in enumerate(items):
        whole = joined_path(items, i, ",", to_path=lambda text: text.rpartition(":")[0])
        if ":" in item or whole:  # a piece without ':' is reported only as a cut path, else the loader says
            uses.append(PathUse("reward_functions", item.rpartition(":")[0] or item, READ_FILE, whole=whole, sep=",",
                                sep_means="between reward functions"))
    if args.multi_turn:
        for item in (i.strip() for i in str(args.tools or "").split(";") if i.strip()):
            if ":" in item:
                path = item.rpartition(":")[0]
                # 'a.py:add,b.py:mul' (reward_functions' comma): the cut path is not the user's mistake, the comma is
                comma = (f"{item!r} names more than one file; separate tool files with ';' (the comma separates "
                         f"functions of one file)") if "," in path and ":" in path else ""
                uses.append(PathUse("tools", path, READ_FILE, missing=comma))
        if args.tool_config_path:
            uses.append(PathUse("tool_config_path", str(args.tool_config_path), READ_FILE))
    chat = str(args.chat_template or "")
    if chat and chat.lower() != "none" and chat != str(args.actor_model_name_or_path):
        uses.append(PathUse("chat_template", chat, READ_ANY))
    template = str(args.judge_template or "")
    if args.judge_model and "\n" not in template and template.endswith(TEMPLATE_SUFFIXES):
        uses.append(PathUse("judge_template", template, READ_FILE))
    return uses


def model_paths(args) -> list[PathUse]:
    """The models the run loads: each a local folder or .gguf file, unless an alias (ppokit never downloads)."""
    from ppokit.algos import algorithm
    from ppokit.models.loading import ALIASES, missing_model_message

    keys = ["actor_model_name_or_path"]
    if args.reward_model_name_or_path and not (args.use_rule_reward or args.use_rm_server):
        keys.append("reward_model_name_or_path")
    if algorithm(args.rl_algorithm).needs_critic:  # the critic starts from the first of these that is set
        keys.append("critic_model_name_or_path" if args.critic_model_name_or_path else "reward_model_name_or_path")
    judge = str(args.judge_model or "")
    values = [(key, str(getattr(args, key) or "").strip()) for key in dict.fromkeys(keys)]
    if judge and not judge.startswith(("http://", "https://")):
        values.append(("judge_model", judge.strip()))
    return [PathUse(key, value, READ_ANY, missing=missing_model_message(value)) for key, value in values
            if value and value.lower() not in ALIASES]
