"""The notebooks run top to bottom (nbclient, a real Jupyter kernel) on a tiny model, and show what they say."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
KERNEL = "ppokit-tests"


@pytest.fixture(scope="session")
def kernel_path(tmp_path_factory) -> str:
    """A kernel spec that runs this very interpreter (whatever specs the machine has installed)."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    return str(root)


def execute(name: str, model: str | None, out: Path, kernel_path: str, monkeypatch, timeout: int = 900):
    """Run notebooks/<name> in a fresh kernel (cwd notebooks/); returns the executed notebook. `timeout`: seconds
    per cell (the bundled model on a shared 2-core machine needs more than a tiny one)."""
    monkeypatch.setenv("JUPYTER_PATH", kernel_path)
    # An in-process Session earlier in this pytest run holds its process-group port; the kernel picks its own.
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PPOKIT_NOTEBOOK_OUTPUT", str(out))
    if model:
        monkeypatch.setenv("PPOKIT_NOTEBOOK_MODEL", model)
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name=KERNEL, store_widget_state=True,
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    return nb


def execute_twice(name: str, model: str | None, out: Path, kernel_path: str, monkeypatch, timeout: int = 900,
                  replaces: bool = True):
    """Run notebooks/<name> twice into the same output folder, as Restart & Run All does: the second run goes
    through and (`replaces`: a notebook that writes a run's records) says that it replaced the notebook's own demo
    folder. Returns the second executed notebook."""
    execute(name, model, out, kernel_path, monkeypatch, timeout)
    nb = execute(name, model, out, kernel_path, monkeypatch, timeout)
    said = "".join(o.text for c in nb.cells if c.cell_type == "code" for o in c.outputs
                   if o.output_type == "stream")
    if replaces:
        assert "ppokit: overwrite_output_dir: deleted" in said and "of an earlier run in" in said, said[-2000:]
    assert "EarlierRunError" not in said
    return nb


def output(nb, source_start: str, notes: bool = False) -> str:
    """The printed text (and plain-text result) of the code cell whose source starts with `source_start`: the
    cell's own prints, or with `notes` only ppokit's "ppokit: ..." lines (what it says it is doing)."""
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(source_start)]
    parts = []
    for o in cell.outputs:
        if o.output_type == "stream" and o.name == "stdout":
            parts.append(o.text)
        elif o.output_type == "execute_result":
            parts.append(o.data.get("text/plain", ""))
    lines = "".join(parts).splitlines(keepends=True)
    return "".join(line for line in lines if line.startswith("ppokit: ") == notes)


def html_output(nb, source_start: str) -> str:
    """The text/html output of the code cell whose source starts with `source_start`."""
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(source_start)]
    return "".join(o.data["text/html"] for o in cell.outputs if "text/html" in o.get("data", {}))


def widgets(nb) -> list[dict]:
    """The saved state of every widget model the notebook displayed."""
    store = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    return [m["state"] for m in store.get("state", {}).values()]


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_notebooks_are_kept_without_outputs_and_say_what_they_show(path):
    nb = nbformat.read(path, as_version=4)
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), f"clear the outputs of {path.name}"
    assert "PPOKIT_NOTEBOOK_MODEL" in code[0].source  # the one variable tests swap the model with


def test_grpo_step_by_step(tiny_model_dir, tmp_path, kernel_path, monkeypatch):
    nb = execute_twice("01_grpo_step_by_step.ipynb", tiny_model_dir, tmp_path / "out", kernel_path, monkeypatch)
    assert "reward functions: ['rule']" in output(nb, "s = Session.from_json(")
    rollout = output(nb, "def question(")
    assert rollout.startswith("8 answers = 2 prompts x 4") and rollout.count("Q: What is") == 2
    assert "reward tensor: (8,)" in output(nb, "rewards = s.score(batch)")
    advantages = output(nb, "advantages = s.compute_advantages(batch)")
    assert "advantage tensor: (8, 24)" in advantages and advantages.count("group ") == 8
    stats = output(nb, "stats = s.update(batch)")
    assert re.search(r"^actor/pg_loss\s+\S+", stats, re.M) and "actor/kl " in stats
    hyper = output(nb, "try:\n    s.args.temperature = -1.0")
    assert hyper.startswith("refused:") and "temperature 0.3: distinct answers per group" in hyper
    assert "step 1: reward" in hyper
    said = output(nb, "history = s.train()", notes=True).splitlines()  # no silent minute after the last step
    assert said[0].startswith("ppokit: saving the final model to ") and said[1].startswith("ppokit: saved in ")
    assert "ppokit: evaluating: 4 prompts x 4 answers (temperature 1)" in output(nb, "s.args.eval_rollout_n", True)
    trained = output(nb, "history = s.train()").splitlines()
    assert trained[0].split() == ["step", "reward", "KL", "length"] and [r.split()[0] for r in trained[1:]] == \
        ["1", "2", "3"]
    evaluated = output(nb, "s.args.eval_rollout_n = 4")
    assert re.search(r"^eval/pass@4\s+\d\.\d{3}$", evaluated, re.M) and "eval/prompts     4.000" in evaluated
    assert "metrics.jsonl: 3 step rows, 1 eval row" in output(nb, "import json")
    (show,) = [c for c in nb.cells if c.cell_type == "code" and c.source == "s.show(batch)"]
    table = show.outputs[-1].data  # a plain HTML output next to the sort controls: no widget needed
    assert "application/vnd.jupyter.widget-view+json" not in table and "reward/rule" in table["text/html"]
    assert "What is" in table["text/plain"] and "im_start" not in table["text/plain"]  # the question
    states = widgets(nb)
    labels = [w["value"] for w in states if w.get("_model_name") == "LabelModel"]
    assert any(v.startswith("step 3/3 | reward") and v.endswith("(done)") for v in labels)  # the live view
    bars = [w for w in states if w.get("_model_name") == "IntProgressModel" and w.get("description") == "train"]
    assert bars and bars[0]["value"] == 3 and bars[0]["max"] == 3
    charts = [w["value"] for w in states if w.get("_model_name") == "HTMLModel" and "<svg" in w.get("value", "")]
    assert charts and charts[-1].count("<svg") == 3 and "actor/kl" in charts[-1]
    (train,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("history = s.train()")]
    snapshot = [o.data for o in train.outputs if o.output_type == "display_data"]
    assert [sorted(d) for d in snapshot] == [["text/html", "text/plain"]]  # the widget became static HTML
    assert snapshot[0]["text/html"].count("<svg") == 3 and snapshot[0]["text/plain"].endswith("(done)")
    assert_static_html_export(nb)


def assert_static_html_export(nb) -> None:
    """`jupyter nbconvert --to html`: the charts and the table are in the page without any widget script."""
    from nbconvert import HTMLExporter

    page, _ = HTMLExporter().from_notebook_node(nb)
    page = re.sub(r'<script type="application/vnd\.jupyter\.widget-(state|view)\+json">.*?</script>', "", page,
                  flags=re.S)  # what needs JavaScript (and a CDN) to show is left out
    charts = re.findall(r"<svg[^>]*>", page)
    assert sum('aria-label="reward"' in c for c in charts) == 1 and len(charts) >= 3, charts  # train()'s charts
    assert len(re.findall(r"<table class=.ppokit-batch", page)) == 1 and "reward/rule" in page  # s.show(batch)


def test_reward_server(tiny_model_dir, tmp_path, kernel_path, monkeypatch):
    nb = execute_twice("03_reward_server.ipynb", tiny_model_dir, tmp_path / "out", kernel_path, monkeypatch)
    assert output(nb, "TOKEN = secrets").startswith("reward server: http://127.0.0.1:")
    assert "200 {'error_code': 0, 'error_msg': 'Success', 'score': [1.0, 0.0, 1.0]}" in output(nb, "AUTH =")
    native = output(nb, "native = httpx.post").splitlines()
    assert native[0].startswith("1.0 {'task': 'countdown'") and native[1].startswith("0.0 {'task': 'arithmetic'")
    assert output(nb, "denied = ").startswith("401 missing or wrong bearer token")
    assert "reward functions: ['reward_server']" in output(nb, "s = Session.from_json(")
    trained = output(nb, "history = s.train()").splitlines()
    assert [line.split(":")[0] for line in trained] == ["step 1", "step 2"]
    served = re.search(r"requests (\d+), items scored (\d+), errors 1", output(nb, "stats = httpx.get"))
    assert served and int(served.group(1)) >= 4 and int(served.group(2)) >= 3 + 2 + 2 * 8
    assert output(nb, "import html").strip().startswith("judge endpoint: http://127.0.0.1:")
    table = html_output(nb, "cases = [")
    assert table.startswith("<table") and "<script" not in table.lower()
    cells = re.findall(r"<tr>(.*?)</tr>", table, re.S)
    assert len(cells) == 1 + 5  # a header and one row per answer
    second = re.findall(r"<td[^>]*>(.*?)</td>", cells[2], re.S)
    assert second == ["What is 5 + 2?", "7", "The answer is 8.", "0", "0.11",  # (2 - 1) / 9
                      "The answer&#x27;s last number, 8, is not the reference answer 7.\nScore: 2"]
    assert "the stand-in judge (a script, not a model) and the rule agree on 5 of 5 answers: by construction" in \
        output(nb, "cases = [")  # said plainly where the agreement is read, not only in the text above
    assert "<b>stand-in judge</b>" in table
    assert output(nb, "failed = httpx.post").startswith("500 ") and "did not parse" in output(nb, "failed = httpx")
    assert output(nb, "for srv, th in").strip() == "servers stopped: True"


@pytest.mark.slow
def test_grpo_step_by_step_with_the_bundled_model(tmp_path, kernel_path, monkeypatch):
    monkeypatch.delenv("PPOKIT_NOTEBOOK_MODEL", raising=False)
    nb = execute("01_grpo_step_by_step.ipynb", None, tmp_path / "out", kernel_path, monkeypatch)
    assert "reward tensor: (8,)" in output(nb, "rewards = s.score(batch)")
    assert "metrics.jsonl: 3 step rows, 1 eval row" in output(nb, "import json")


def test_tool_use_notebook_shows_turns_and_masks(tiny_model_dir, tmp_path, kernel_path, monkeypatch):
    nb = execute_twice("04_tool_use.ipynb", tiny_model_dir, tmp_path / "out", kernel_path, monkeypatch,
                       replaces=False)  # one rollout and update by hand: no run's records to replace
    built = output(nb, "s = Session.from_json(")
    assert "tools: ['multiply'] | format: hermes | max turns: 2" in built and "tools=['multiply']" in built
    rollout = output(nb, "batch = s.rollout()")
    assert "tools/calls_per_sample" in rollout
    question = re.search(r"^the question: (.*)$", rollout, re.M).group(1)
    assert re.fullmatch(r"What is \d+ times \d+\?", question), question  # the whole user turn, not a cut tail
    assert re.search(r"^\d+ of 16 rows called the tool: \[.*\]; looking at row \d+$", rollout, re.M)
    rows = output(nb, "def show_row(")
    assert rows.count("row ") >= 2 and "[model] tokens 0-" in rows and "of which the model's" in rows
    assert "response_mask  loss_mask" in output(nb, "def masks_side_by_side(") or "one model turn" in \
        output(nb, "def masks_side_by_side(")
    assert "advantage on tool tokens: 0.0" in output(nb, "s.score(batch)")
    lr = re.search(r"'actor/lr': ([^,}]+)", output(nb, "s.score(batch)")).group(1)
    assert float(lr) > 0 and lr != "0.0"  # 4 significant digits, not 4 decimal places (3e-05 read as 0.0)
    assert "7 of the 16 rows" not in nb.cells[0].source  # the count depends on the CPU: the rollout cell says it
    assert_show_is_static(nb)


def assert_show_is_static(nb) -> None:
    """`s.show(batch)` as the last cell still leaves the table as plain HTML (no next cell freezes it)."""
    from nbconvert import HTMLExporter

    assert nb.cells[-1].source == "s.show(batch)"
    table = nb.cells[-1].outputs[-1].data
    assert "application/vnd.jupyter.widget-view+json" not in table and "<table class='ppokit-batch'" in \
        table["text/html"]
    page, _ = HTMLExporter().from_notebook_node(nb)
    page = re.sub(r'<script type="application/vnd\.jupyter\.widget-(state|view)\+json">.*?</script>', "", page,
                  flags=re.S)
    assert len(re.findall(r"<table class=.ppokit-batch", page)) == 1


@pytest.mark.slow
def test_tool_use_notebook_on_the_bundled_model_shows_a_real_call(tmp_path, kernel_path, monkeypatch):
    monkeypatch.delenv("PPOKIT_NOTEBOOK_MODEL", raising=False)
    nb = execute("04_tool_use.ipynb", None, tmp_path / "out", kernel_path, monkeypatch, timeout=3000)
    rollout = output(nb, "batch = s.rollout()")
    calls = float(re.search(r"'tools/calls_per_sample': ([\d.]+)", rollout).group(1))
    assert calls > 0, rollout  # few-shot prompts, 16 rows of 4 prompts and a fixed seed: a call is near-certain
    row = int(re.search(r"looking at row (\d+)$", rollout, re.M).group(1))
    assert re.search(rf"^row {row}: .*\n  \[model\] .*<tool_call>.*\n  \[tool\] tokens \d+-\d+ loss_mask=0/\d+",
                     output(nb, "def show_row("), re.M)
    masks = output(nb, "def masks_side_by_side(")
    assert re.search(r"\s1\s+0\s+tool$", masks, re.M) and re.search(r"\s1\s+1\s+model$", masks, re.M)
    assert re.search(r"^the tool's result: \d+$", masks, re.M)  # the product, as the tool returned it
    shown = [int(m.group(1)) for m in re.finditer(r"^\s*(\d+)  ", masks, re.M)]
    gaps = [b - a - 1 for a, b in zip(shown, shown[1:]) if b != a + 1]
    assert masks.count("tokens not shown)") == len(gaps)  # a jump in the token column is marked
    assert re.search(rf"^row {row}: reward [01]\.0, reference answer \d+", output(nb, "s.score(batch)"), re.M)
    assert_show_is_static(nb)
