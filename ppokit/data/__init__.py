"""Datasets for ppokit: src/tgt records, readers, prompt rendering, the resumable loader and `prepare`.

    from ppokit.data import load_datasets, load_task_config, render_prompt, encode_prompts, PromptLoader
    records = load_datasets("ppo-kk/34567ppl/train.jsonl")      # generated on first use if missing
    kept, ids, dropped = encode_prompts(records, tokenizer, max_prompt_len=1024)
    loader = PromptLoader(kept, batch_size=8, seed=42)

See docs/data.md for the formats, the rendering rules and the task-config format. No torch here.

May import: `ppokit.tasks` (generated datasets); no torch.
"""

from ppokit.data.errors import DataError
from ppokit.data.loader import PromptLoader
from ppokit.data.prepare import LAYOUTS, ensure_prepared, prepare, write_jsonl
from ppokit.data.records import TEMPLATE_MARKERS, is_templated, row_to_record
from ppokit.data.render import choose_chat_template, encode_prompts, render_plain, render_prompt
from ppokit.data.specs import load_datasets, load_task_config

__all__ = [
    "LAYOUTS",
    "TEMPLATE_MARKERS",
    "DataError",
    "PromptLoader",
    "choose_chat_template",
    "encode_prompts",
    "ensure_prepared",
    "is_templated",
    "load_datasets",
    "load_task_config",
    "prepare",
    "render_plain",
    "render_prompt",
    "row_to_record",
    "write_jsonl",
]
