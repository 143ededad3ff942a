"""Look at a finished run the way a person does: `visualdl --logdir` and a (headless) browser.

The API check needs only VisualDL; the screenshot needs Chromium (Debian: `apt-get install chromium`)
and is skipped without it. The page is driven over the DevTools protocol. VisualDL opens only the first
tag group by name (its ChartPage.js): the reward and evaluation charts share the group "0 reward and eval", which
sorts first, so the first screen shows them; the test looks at it as a person would.
"""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
from browser_helpers import CHROMIUM, chromium_page, visualdl, wait_for

from ppokit.tracking.console import VISUALDL_TABS

pytest.importorskip("visualdl", reason="VisualDL is not installed (pip install visualdl)")


@pytest.fixture(scope="module")
def board(tiny_run):
    with visualdl(tiny_run.vdl, "--component_tabs", *VISUALDL_TABS) as url:  # the command the summary prints
        yield url


def api(board: str, route: str, **params):
    answer = httpx.get(f"{board}/app/api/{route}", params=params, timeout=30).json()
    assert answer["status"] == 0, answer
    return answer["data"]


def test_visualdl_serves_the_reward_curve_eval_metrics_and_samples(board, tiny_run):
    (run,) = api(board, "runs")
    tags = api(board, "scalar/tags")["tags"][0]
    head = "0 reward and eval/"
    assert {head + "reward/mean", "actor/kl", "response_length/mean", head + "eval/pass@2",
            head + "eval/accuracy"} <= set(tags)
    groups = sorted({t.split("/")[0] for t in tags}, key=str.upper)  # VisualDL's order; it opens the first
    assert groups[0] == "0 reward and eval" and "train" not in groups and "reward" not in groups
    assert [t for t in tags if t.startswith(head)][:2] == [head + "reward/mean", head + "reward/std"]
    assert not {head + "reward/distinct_chars", head + "reward/raw_mean"} & set(tags)  # copies of reward/mean
    assert not {"cpu/update_threads", "cpu/rollout_threads"} & set(tags)  # constant: not drawn
    assert run == tiny_run.out.name  # named by the output folder, not by an absolute path
    points = api(board, "scalar/list", run=run, tag=head + "reward/mean")  # [wall time ms, step, value]
    logged = [json.loads(line) for line in (tiny_run.out / "metrics.jsonl").read_text().splitlines()]
    expected = [(r["step"], r["reward/mean"]) for r in logged if "reward/mean" in r]
    assert [(step, pytest.approx(value, abs=1e-6)) for _, step, value in points] == expected
    assert api(board, "text/tags")["tags"][0] == [f"samples/{i} · from step 1" for i in (1, 2, 3, 4)]
    (trial,) = api(board, "hparams/list")  # the hyper-parameter tab: the run's short name first, only keys in use
    assert list(trial["hparams"])[0] == "run" and trial["hparams"]["run"] == tiny_run.out.name
    assert not {"kl_coeff", "per_device_value_batch_size", "critic_learning_rate"} & set(trial["hparams"])  # GRPO
    assert set(trial["metrics"]) >= {head + "reward/mean", head + "eval/accuracy"}
    # the page opens on the first tab the server lists; without --component_tabs that list is a set's order
    assert api(board, "component_tabs") == ["scalar", "text", "hyper_parameters"]


# the y of each group header (a leaf element whose text is the group's name) and of each chart canvas
GROUPS_AND_CHARTS = """(() => {
  const headers = [...document.querySelectorAll('*')].filter(e => e.children.length == 0
    && /^(\\d [a-z_ ]+|[a-z_]+)$/.test(e.textContent.trim()) && e.getBoundingClientRect().x < 100)
    .map(e => [e.textContent.trim(), e.getBoundingClientRect().y]).sort((a, b) => a[1] - b[1]);
  const charts = [...document.querySelectorAll('canvas')].map(e => e.getBoundingClientRect().y);
  return [headers, charts];
})()"""


def curve_pixels(image, box) -> int:
    """Pixels of the run's blue line inside the chart's box (axes and grid lines are grey)."""
    x, y, w, h = (round(v) for v in box)
    rgb = np.asarray(image.crop((x, y, x + w, y + h)), dtype=int)
    return int(((rgb[..., 2] > 150) & (rgb[..., 0] < 140) & (rgb[..., 1] < 140)).sum())


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium to screenshot VisualDL with (apt-get install chromium)")
def test_the_first_screen_is_the_reward_and_eval_charts(board, tmp_path):
    """What a person sees on opening the page: the scalars, the reward and eval group open and drawn."""
    pytest.importorskip("websocket", reason="the DevTools protocol client (websocket-client) is not installed")
    Image = pytest.importorskip("PIL.Image", reason="Pillow is not installed")

    profile = tmp_path / "profile"
    profile.mkdir()
    shot = tmp_path / "visualdl.png"
    with chromium_page(profile) as page:
        page.call("Page.navigate", url=f"{board}/")
        wait_for(lambda: page.js("document.querySelectorAll('canvas').length"), "VisualDL's first charts")
        box = wait_for(lambda: page.js(
            "(() => { const c = document.querySelector('canvas'); if (!c) return null;"
            " const r = c.getBoundingClientRect(); return r.width > 100 ? [r.x, r.y, r.width, r.height] : null })()"),
            "the chart canvas")
        # the chart fetches its points and animates them in: look until the line is there
        wait_for(lambda: curve_pixels(Image.open(page.screenshot(shot)).convert("RGB"), box) > 100,
                 "the reward/mean curve to be drawn", every=1.0)
        path = page.js("location.pathname")
        headers, charts = page.js(GROUPS_AND_CHARTS)
    assert path.endswith("/scalar")  # the scalars tab, not samples or hyper-parameters
    names = [name for name, _ in headers]
    assert names[:2] == ["0 reward and eval", "actor"] and "reward" not in names and "eval" not in names
    (_, first_y), (_, second_y) = headers[:2]
    assert charts and all(first_y < y < second_y for y in charts)  # VisualDL opens the first group only
    image = Image.open(shot).convert("RGB")
    assert image.width == 1400 and image.height > 600  # the viewport of a 1400x1000 window
    assert len(image.getcolors(1 << 24)) > 50  # a rendered page, not a blank or error screen
