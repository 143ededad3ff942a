"""ppokit.widgets: the batch table (widget, HTML, text) and the live training view, with and without ipywidgets."""

from __future__ import annotations

import re
import sys
from types import SimpleNamespace

import pytest
from widget_helpers import make_batch

from ppokit import widgets
from ppokit.tracking import ConsoleProgress
from ppokit.training.loop import progress_view

LONG = "step by step, " * 30  # 420 characters: folded in HTML, clipped in text


@pytest.fixture
def batch():
    return make_batch(
        responses=["7", "<b>8</b>", LONG, "nine"],
        rewards=[1.0, 0.0, 0.5, 0.0],
        lengths=[1, 3, 5, 2],
        advantages=[[0.7], [-0.7, -0.7, -0.7], [1.0, 2.0, 3.0, 0.0, 0.0], [-1.0, -1.0]],
    )


@pytest.fixture
def displayed(monkeypatch):
    """Capture IPython.display.display calls (outside a kernel it would only print)."""
    shown = []

    class Handle:
        def __init__(self, obj):
            self.objects = [obj]

        def update(self, obj, raw=False):
            self.objects.append(obj)

    def fake_display(obj, display_id=None, raw=False):
        shown.append(obj)
        return Handle(obj) if display_id else None

    monkeypatch.setattr("IPython.display.display", fake_display)
    return shown


def order_in(html: str, texts: list[str]) -> list[str]:
    """`texts` in the order they first appear in `html`."""
    return sorted(texts, key=lambda t: html.index(t))


def test_rows_hold_prompt_response_rewards_advantage_length(batch):
    rows = widgets.batch_rows(batch)
    assert list(rows[0]) == ["#", "group", "prompt", "response", "reward", "reward/rule", "reward/style",
                             "advantage", "length", "rendered prompt"]
    assert [r["group"] for r in rows] == [0, 0, 1, 1]
    assert [r["length"] for r in rows] == [1, 3, 5, 2]
    assert rows[2]["advantage"] == pytest.approx(1.2)  # mean over the 5 response tokens, padding ignored
    assert rows[3]["advantage"] == pytest.approx(-1.0)
    assert rows[1]["reward/rule"] == 0.0 and rows[0]["prompt"] == "question 0"


CHATML = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
          "<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n<|im_start|>assistant\n")


def test_prompts_show_the_question_with_the_full_prompt_one_click_away(batch, monkeypatch):
    batch.prompt_texts = [CHATML] * len(batch)
    batch.records = [{"prompt": CHATML}] * len(batch)
    rows = widgets.batch_rows(batch)
    assert rows[0]["prompt"] == "What is 12 + 30?" and rows[0]["rendered prompt"] == CHATML
    page = widgets.show_batch(batch)._repr_html_()
    assert page.count("<summary style='color:#777'>full prompt</summary>") == 4 and "named SmolLM" in page
    text = str(widgets.show_batch(batch)).splitlines()
    assert "What is 12 + 30?" in text[1] and "im_start" not in "".join(text)  # text mode: the question
    assert text[0].split()[:2] == ["#", "group"] and "rendered" not in text[0]
    header = page[: page.index("</tr>")]
    assert "padding:3px 8px" in header and header.index(">#<") < header.index(">group<")  # spaced columns


def test_rows_before_scoring_have_no_reward_or_advantage():
    rows = widgets.batch_rows(make_batch(["a", "b"], None, [1, 1]))
    assert rows[0]["reward"] is None and rows[0]["advantage"] is None
    assert widgets.sort_rows(rows, "reward") == rows  # nothing to sort by: order kept


def test_html_escapes_folds_long_text_and_sorts(batch):
    page = widgets.rows_html(widgets.batch_rows(batch), sort_by="reward")
    assert "&lt;b&gt;8&lt;/b&gt;" in page and "<b>8</b>" not in page
    assert page.count("<details>") == 1  # only the long response is folded
    assert order_in(page, [">7<", LONG[:40], "&lt;b&gt;8"]) == [">7<", LONG[:40], "&lt;b&gt;8"]
    ascending = widgets.rows_html(widgets.batch_rows(batch), sort_by="advantage", descending=False)
    assert order_in(ascending, [">nine<", "&lt;b&gt;8", ">7<"]) == [">nine<", "&lt;b&gt;8", ">7<"]


def test_sorting_by_an_unknown_column_names_the_columns(batch):
    with pytest.raises(ValueError, match="cannot sort by 'score'.*reward"):
        widgets.show_batch(batch).sort("score")


def test_outside_a_notebook_the_table_prints_as_text(batch, monkeypatch):
    monkeypatch.setattr(widgets, "in_notebook", lambda: False)
    table = widgets.show_batch(batch)
    lines = str(table).splitlines()
    assert lines[0].split()[:4] == ["#", "group", "prompt", "response"]
    assert [line.split()[0] for line in lines[1:]] == ["0", "2", "1", "3"]  # by reward, descending
    assert all(len(line) < 250 for line in lines) and "…" in lines[2]  # the long response is clipped
    by_length = str(table.sort("length", descending=False)).splitlines()
    assert [line.split()[0] for line in by_length[1:]] == ["0", "3", "1", "2"]
    assert "<table" in table._repr_html_()  # a notebook without ipywidgets renders it as HTML


def test_in_a_notebook_the_table_is_its_own_static_output_under_the_controls(batch, monkeypatch, displayed):
    pytest.importorskip("ipywidgets")
    monkeypatch.setattr(widgets, "in_notebook", lambda: True)
    events = []
    shell = SimpleNamespace(events=SimpleNamespace(register=lambda name, f: events.append((name, f)),
                                                   unregister=lambda name, f: events.remove((name, f))))
    monkeypatch.setattr("IPython.get_ipython", lambda: shell)
    table = widgets.show_batch(batch)
    table._ipython_display_()
    controls_output, shown = displayed  # the controls (a widget), then the table: plain HTML, no widget needed
    assert "application/vnd.jupyter.widget-view+json" in controls_output and "<table" not in str(controls_output)
    assert set(shown) == {"text/html", "text/plain"} and "<table" in shown["text/html"]
    assert order_in(shown["text/html"], [">7<", "&lt;b&gt;8"]) == [">7<", "&lt;b&gt;8"]
    controls = table.controls
    assert controls.sort.value == "reward" and "length" in controls.sort.options
    assert "#" not in controls.sort.options and "group" not in controls.sort.options
    controls.sort.value = "length"  # redraws the table's own output in place
    assert order_in(table.handle.objects[-1]["text/html"], [LONG[:40], "&lt;b&gt;8", ">nine<", ">7<"])[0] == LONG[:40]
    controls.order.value = "ascending"
    assert order_in(table.handle.objects[-1]["text/html"], [LONG[:40], ">7<"]) == [">7<", LONG[:40]]
    [(name, freeze)] = events
    assert name == "pre_run_cell"
    freeze(None)  # the next cell starts: the controls close and their output empties; the table stays as sorted
    final = table.handle.objects[-1]
    assert set(final) == {"text/html", "text/plain"} and order_in(final["text/html"], [LONG[:40], ">7<"]) == \
        [">7<", LONG[:40]]
    assert table.controls_handle.objects[-1] == {"text/plain": ""}
    assert controls.sort.comm is None and table.controls is None and events == []  # closed: not saved


def test_table_text_wraps_between_words():
    page = widgets.rows_html([{"#": 0, "prompt": "a " * 200, "reward": 1.0}])
    assert page.count("word-break:normal;overflow-wrap:break-word") >= 2  # not Jupyter's break-all


def test_without_ipywidgets_the_notebook_gets_an_html_table(batch, monkeypatch):
    monkeypatch.setattr(widgets, "in_notebook", lambda: True)
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # `import ipywidgets` now raises ImportError
    table = widgets.show_batch(batch)
    assert isinstance(table, widgets.BatchTable)
    assert "<table" in table._repr_html_() and "reward/rule" in table._repr_html_()


def test_showing_nothing_says_what_to_run_first():
    with pytest.raises(ValueError, match=r"s\.rollout\(\)"):
        widgets.show_batch(None)


def metrics(step, reward):
    return {"reward/mean": reward, "reward/std": 0.1, "actor/kl": 0.01 * step, "response_length/mean": 10.0 + step}


def test_live_view_shows_progress_reward_and_charts(displayed):
    pytest.importorskip("ipywidgets")
    view = widgets.live_view(3, history=[{"step": 1, **metrics(1, 0.25)}])
    assert isinstance(view, widgets.LiveView) and displayed == [view.widget]
    assert view.bar.value == 1 and view.plot.value.count("<svg") == 3  # seeded from the session's history
    view.update(2, metrics(2, 0.5))
    assert view.bar.value == 2
    assert view.label.value.startswith("step 2/3 | reward 0.5±0.1 | len 12 | kl 0.02")
    svg = view.plot.value
    assert svg.count("<svg") == 3 and "reward/mean" in svg and "actor/kl" in svg and "response_length/mean" in svg
    view.update(3, {**metrics(3, 0.75), "eval/accuracy": 0.5})
    assert "eval/accuracy" in view.plot.value
    view.close()
    assert view.label.value.endswith("(done)") and view.bar.bar_style == "success"
    assert [s for s, _ in view.state.history] == [1, 2, 3]
    static = view.handle.objects[-1]  # the widget is replaced by a static copy that survives saving
    assert static["text/html"].count("<svg") == 3 and "<progress value='3' max='3'" in static["text/html"]
    assert static["text/plain"].endswith("(done)")


def test_live_chart_falls_back_to_the_policy_drift_when_there_is_no_kl_term():
    history = [(s, {"reward/mean": 0.1, "actor/approx_kl": 0.001 * s, "response_length/mean": 4.0})
               for s in (1, 2)]
    svg = widgets.live_plot_svg(history)
    assert "actor/approx_kl" in svg and "no finite values" not in svg


def test_live_view_without_ipywidgets_redraws_one_html_output(displayed, monkeypatch):
    monkeypatch.setitem(sys.modules, "ipywidgets", None)
    view = widgets.live_view(2)
    assert isinstance(view, widgets.HtmlLiveView) and len(displayed) == 1
    view.update(1, metrics(1, 0.5))
    view.update(2, metrics(2, 1.0))
    view.close()
    pages = [obj.data for obj in view.handle.objects]
    assert len(pages) == 4 and len(displayed) == 1  # updated in place, never displayed again
    assert "<progress value='1' max='2'" in pages[1] and "reward 0.5" in pages[1] and "<svg" in pages[1]
    assert re.search(r"step 2/2 \| reward 1±0\.1.*\(done\)", pages[-1])


def fake_session(history=()):
    args = SimpleNamespace(disable_tqdm=False)
    return SimpleNamespace(args=args, learner=SimpleNamespace(dist=SimpleNamespace(rank=0)), history=list(history))


def test_train_uses_the_live_view_in_jupyter_and_the_console_bar_elsewhere(displayed, monkeypatch):
    monkeypatch.setattr(widgets, "in_notebook", lambda: True)
    view = progress_view(fake_session([{"step": 1, **metrics(1, 0.5)}]), 4)
    assert isinstance(view, (widgets.LiveView, widgets.HtmlLiveView)) and view.state.step == 1
    monkeypatch.setattr(widgets, "in_notebook", lambda: False)
    bar = progress_view(fake_session(), 4)
    assert isinstance(bar, ConsoleProgress)
    bar.close()
