"""notebooks/02_ppo_with_critic.ipynb runs top to bottom (on a tiny model) and shows what it promises."""

from pathlib import Path

import nbformat
import pytest

NOTEBOOK = Path(__file__).parents[2] / "notebooks" / "02_ppo_with_critic.ipynb"


def cell_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(out.get("text", ""))
        parts.append(out.get("data", {}).get("text/plain", ""))
    return "".join(parts)


@pytest.fixture(scope="module")
def executed(tiny_model_dir, tmp_path_factory):
    from nbclient import NotebookClient

    mp = pytest.MonkeyPatch()
    mp.setenv("PPOKIT_NOTEBOOK_MODEL", tiny_model_dir)  # the kernel inherits the environment
    out = tmp_path_factory.mktemp("notebook02")
    mp.setenv("PPOKIT_NOTEBOOK_OUTPUT", str(out))  # the notebook writes under output/notebook02 unless told
    # An earlier in-process Session set the single-process group's variables; the kernel must pick its own.
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        mp.delenv(key, raising=False)
    try:
        for _ in range(2):  # twice into one folder, as Restart & Run All does: the second run replaces the first
            nb = nbformat.read(NOTEBOOK, as_version=4)
            NotebookClient(nb, timeout=600, kernel_name="python3",
                           resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    finally:
        mp.undo()
    nb.out_dir = out
    return nb


def test_a_second_run_replaces_its_own_demo_folder_and_says_so(executed):
    said = "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", [])
                   if o.get("name") == "stderr")
    assert "ppokit: overwrite_output_dir: deleted" in said


def test_the_run_is_written_where_the_notebook_says(executed):
    assert (executed.out_dir / "metrics.jsonl").is_file()  # two step() rows
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert 'ROOT / "output" / "notebook02"' in nb.cells[2].source  # not a temporary folder


def test_first_cell_says_what_the_notebook_shows():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "markdown"
    for words in ("PPO", "critic", "values", "GAE", "returns", "3 minutes"):
        assert words in first.source
    model_cell = nb.cells[1].source
    assert 'MODEL = os.environ.get("PPOKIT_NOTEBOOK_MODEL", "smollm2-135m-instruct")' in model_cell


def test_notebook_runs_and_shows_values_advantages_and_returns(executed, tiny_model_dir):
    text = "\n".join(cell_text(c) for c in executed.cells if c.cell_type == "code")
    assert "rl_algorithm: ppo | gamma: 1.0 | lam: 0.95" in text
    assert f"critic starts from: {tiny_model_dir}" in text  # no reward model in the config: the actor
    assert "value head: (1, 64)" in text
    assert "values        (4, " in text
    assert "hand-computed GAE matches: True" in text
    assert "critic moved towards the returns: True" in text
    tables = [cell_text(c) for c in executed.cells if c.cell_type == "code" and "token_table(" in c.source]
    assert tables and all(all(col in t for col in ("token", "value", "reward", "advantage", "return")) for t in tables)
    history = next(cell_text(c) for c in executed.cells if c.cell_type == "code" and "history = " in c.source)
    assert "critic/value_loss" in history and "kl/beta" in history
    assert "done; logs in" in text
