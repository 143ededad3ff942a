from pathlib import Path

from ppokit.dialects.verl.overrides import markdown_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "verl.md"


def test_docs_embed_the_table_generated_from_the_one_definition():
    text = DOC.read_text(encoding="utf-8")
    assert text.endswith(markdown_table()), "regenerate: python -m ppokit.args verl-table"
    for phrase in ("Batch units", "`ppo_epochs` vs `update_iters`", "sequences per GPU per forward"):
        assert phrase in text
