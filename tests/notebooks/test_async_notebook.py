"""notebooks/05_async_timeline.ipynb runs top to bottom on the tiny model (issue 37): three synchronous steps and three
asynchronous ones with produce/consume by hand, the queue in print(s), and both timelines as static SVG."""

from __future__ import annotations

import re

from test_notebooks import execute_twice, kernel_path, output  # noqa: F401 - kernel_path is a fixture

NAME = "05_async_timeline.ipynb"


def test_async_timeline_notebook(tiny_model_dir, tmp_path, kernel_path, monkeypatch):  # noqa: F811
    nb = execute_twice(NAME, tiny_model_dir, tmp_path / "out", kernel_path, monkeypatch, timeout=300)
    assert "rollouts:" not in output(nb, "sync = session(")  # k = 0: no queue
    lines = output(nb, 's = session("async"').splitlines()
    assert "rollouts: staleness_threshold=1, queue 0 batches (policy versions -), 0 produced, 0 consumed" in lines[0]
    turns = output(nb, "for _ in range(STEPS):").splitlines()  # the two sides' steps in turn, as a person reads them
    assert [line.split(":")[0] for line in turns if line.startswith(("sync  step", "async step"))] == \
        ["sync  step 1", "async step 1", "sync  step 2", "async step 2", "sync  step 3", "async step 3"]
    sync = [line for line in turns if line.startswith("sync  step")]
    assert [re.search(r"made by version (\d+)", line).group(1) for line in sync] == ["0", "1", "2"]
    assert "step=3/3" in turns[-1]
    steps = [line for line in turns if line.startswith("async step")]
    assert [re.search(r"made by version (\d+), lag (\d+)", line).groups() for line in steps] == \
        [("0", "0"), ("0", "1"), ("1", "1")]  # batch i from version i - 1
    queues = [line for line in turns if line.startswith("    Session(")]
    assert "queue 1 batches (policy versions 0), 2 produced, 1 consumed" in queues[0]
    assert "queue 1 batches (policy versions 2), 4 produced, 3 consumed" in queues[2]
    assert all("importance weight nan" not in line for line in steps)
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("display(HTML(timeline_svg(")]
    (shown,) = [o.data for o in cell.outputs if o.output_type == "display_data"]
    html = shown["text/html"]
    assert html.count("<svg") == 2 and "<script" not in html and "http" not in html.replace(
        'xmlns="http', "")  # static: no script, nothing fetched
    assert "synchronous (k = 0)" in html and "asynchronous (k = 1, thread)" in html
    assert ">producer thread</text>" in html and html.count(">main thread</text>") == 2
    summary = output(nb, "display(HTML(")
    assert re.search(r"^steps' wall time, synchronous:( \d+\.\d\d){3} \| asynchronous:( \d+\.\d\d){3} \(s\)$", summary, re.M)
    assert re.search(r"max\(rollout \+ update, rollout \+ wait\) = \d+\.\d\d s against \d+\.\d\d s synchronous", summary)
    table = summary[summary.index("compute per step (median)"):].splitlines()  # compute beside the wall time
    assert [row.split(" (s)")[0] for row in table[1:4]] == ["rollout compute", "log-probs + update", "reward wait"]
    assert re.match(r"the two sides' compute (agrees within 30%|differs by more than noise \(30%\))", table[4])
    from nbconvert import HTMLExporter

    page, _ = HTMLExporter().from_notebook_node(nb)  # `jupyter nbconvert --to html`: the timelines are in the page
    assert len(re.findall(r'<svg[^>]*aria-label="(?:a)?synchronous', page)) == 2

