"""The judge's prompts and the parsers that turn its verdicts into numbers.

A template renders the judge's chat messages for one question; five are built in:

    score_10   "rate the answer from 1 to 10 against the reference answer"   parser: score (1..10 -> 0..1)
    pairwise   "which answer is better, A or B?"                              parser: choice (A / B / tie)
    rubric     "does the answer meet this rubric item? yes or no" (one call per item) parser: yes_no
    yes_no     "is the answer correct? one word: yes or no"                   parser: yes_no (or p_yes)
    yes_no_fewshot  "does the given answer equal the reference answer?" after 4 worked examples (chat turns)
               parser: yes_no; p_yes for small judges (the bundled SmolLM2-135M does better than chance with it)

A user's own template is a file path or inline text: Jinja (`{{ question }}`, `{% if reference %}`) when it holds
`{{` or `{%`, else Python format fields (`{question}`). Its fields: question, answer, reference, answer_a,
answer_b (pairwise), item (rubric). Its parser is `judge_parser` (score by default).

Parsers return a number, or None when the verdict does not say one clearly (the caller counts it; nothing here
guesses a default).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SYSTEM = "You are a strict, fair grader. Reason briefly, then give your verdict in the exact format asked for."

SCORE_10 = """Question:
{{ question }}
{% if reference %}
Reference answer:
{{ reference }}
{% endif %}
Answer to grade:
{{ answer }}

Rate the answer from 1 (wrong or useless) to 10 (fully correct{% if reference %} and consistent with the reference \
answer{% endif %}). Write one or two sentences of reasoning, then a last line exactly like: Score: 7"""

PAIRWISE = """Question:
{{ question }}

Answer A:
{{ answer_a }}

Answer B:
{{ answer_b }}

Which answer is better (more correct, more helpful)? Write one or two sentences of reasoning, then a last line \
exactly like: Verdict: A   (or Verdict: B, or Verdict: tie)"""

RUBRIC = """Question:
{{ question }}
{% if reference %}
Reference answer:
{{ reference }}
{% endif %}
Answer to check:
{{ answer }}

Rubric item: {{ item }}
Does the answer meet this rubric item? Write one sentence of reasoning, then a last line exactly like: Verdict: yes \
(or Verdict: no)"""

YES_NO = """Question:
{{ question }}
{% if reference %}
Reference answer:
{{ reference }}
{% endif %}
Given answer:
{{ answer }}

Is the given answer correct{% if reference %} (the same as the reference answer){% endif %}? Reply with one word: \
yes or no."""

# For small judges (read with judge_parser p_yes): one short question whose answer is a comparison with the
# reference, asked after four worked examples (two equal, two not) answered as the judge should. SmolLM2-135M does
# not follow the zero-shot yes_no instruction (its P(yes) barely moves with correctness) but continues this pattern:
# docs/rewards.md has the measurement. No question in the prompt: the judge compares, it does not solve.
YES_NO_FEWSHOT = """Reference answer: {{ reference }}
Given answer: {{ answer }}
Does the given answer equal the reference answer? Reply yes or no."""
FEWSHOT_EXAMPLES = (({"question": "What is 4 + 3?", "reference": "7", "answer": "7"}, "yes"),
                    ({"question": "What is 6 - 2?", "reference": "4", "answer": "5"}, "no"),
                    ({"question": "What is 8 + 1?", "reference": "9", "answer": "9"}, "yes"),
                    ({"question": "What is 3 + 9?", "reference": "12", "answer": "13"}, "no"))

BUILTIN = {"score_10": (SCORE_10, "score"), "pairwise": (PAIRWISE, "choice"), "rubric": (RUBRIC, "yes_no"),
           "yes_no": (YES_NO, "yes_no"), "yes_no_fewshot": (YES_NO_FEWSHOT, "yes_no")}
PARSERS = ("score", "choice", "yes_no", "p_yes")
MODES = {"score_10": "score", "pairwise": "pairwise", "rubric": "rubric", "yes_no": "score", "yes_no_fewshot": "score"}
EXAMPLES = {"yes_no_fewshot": FEWSHOT_EXAMPLES}
NEEDS_REFERENCE = ("yes_no_fewshot",)


@dataclass(frozen=True)
class Template:
    """A judge prompt: `render(**fields) -> messages`, the mode it is used in and the parser of its verdicts."""

    name: str
    text: str
    parser: str  # score | choice | yes_no
    mode: str  # score (one call per answer) | pairwise (two calls, both orders) | rubric (one call per item)
    jinja: bool = True
    system: str | None = SYSTEM
    examples: tuple[tuple[dict, str], ...] = ()  # worked (fields, verdict) pairs asked and answered before the case
    needs_reference: bool = False  # it compares the answer with the reference answer: a record without one is an error

    def render(self, **fields) -> list[dict]:
        """The system message, each worked example as a user turn and the judge's answer, then the case."""
        messages = [{"role": "system", "content": self.system}] if self.system else []
        for example, verdict in self.examples:
            messages += [{"role": "user", "content": self._user({**fields, **example})},
                         {"role": "assistant", "content": verdict}]
        return messages + [{"role": "user", "content": self._user(fields)}]

    def _user(self, fields: dict) -> str:
        if self.jinja:
            import jinja2

            env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False)
            try:
                user = env.from_string(self.text).render(**fields)
            except jinja2.TemplateError as exc:
                raise ValueError(f"judge template {self.name!r} could not be rendered: {exc}; its fields are "
                                 f"{sorted(fields)}") from exc
        else:
            try:
                user = self.text.format(**fields)
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(f"judge template {self.name!r} names a field it was not given ({exc}); its fields "
                                 f"are {sorted(fields)}") from exc
        return re.sub(r"\n{3,}", "\n\n", user).strip()


def load_template(spec: str, parser: str | None = None, mode: str | None = None) -> Template:
    """A built-in template by name, or the user's template from a file path or inline text.

    parser: score | choice | yes_no; None -> the built-in's own, or score for a user template.
    mode: score | pairwise | rubric; None -> the built-in's own, else pairwise for a choice parser, rubric for a
    template naming `item`, score otherwise.
    """
    if parser is not None and parser not in PARSERS:
        raise ValueError(f"judge_parser is {parser!r}; use one of {', '.join(PARSERS)}")
    if spec in BUILTIN:
        text, own = BUILTIN[spec]
        return Template(spec, text, parser or own, mode or MODES[spec], examples=EXAMPLES.get(spec, ()),
                        needs_reference=spec in NEEDS_REFERENCE)
    path = Path(spec).expanduser()
    looks_like_path = "\n" not in spec and len(spec) < 4096 and spec.endswith((".j2", ".jinja", ".txt", ".md"))
    if looks_like_path and not path.is_file():
        raise ValueError(f"judge_template {spec!r} is neither a built-in template ({', '.join(BUILTIN)}) nor an "
                         "existing file; give a template name, a file path or the template text itself")
    name, text = (str(path), path.read_text(encoding="utf-8")) if looks_like_path else ("inline", spec)
    jinja = "{{" in text or "{%" in text
    parser = parser or "score"
    if mode is None:
        mode = "pairwise" if parser == "choice" else "rubric" if re.search(r"{{?\s*item\b", text) else "score"
    if not re.search(r"{{?\s*(answer|answer_a)\b", text):
        raise ValueError(f"judge template {name!r} never names the answer ({{{{ answer }}}} or {{answer}}); the judge "
                         "would not see what it grades")
    check_fields(name, text, jinja)
    return Template(name, text, parser, mode, jinja=jinja)


FIELDS = ("question", "answer", "reference", "answer_a", "answer_b", "item")


def check_fields(name: str, text: str, jinja: bool) -> None:
    """Refuse, before the first rollout, a user template that cannot render: a syntax error (with its line) or a
    field that no template is given (ValueError)."""
    if jinja:
        import jinja2
        from jinja2 import meta

        try:
            names = meta.find_undeclared_variables(jinja2.Environment().parse(text))
        except jinja2.TemplateSyntaxError as exc:
            raise ValueError(f"judge template {name!r} line {exc.lineno}: {exc.message} (Jinja syntax): "
                             f"{_line(text, exc.lineno)!r}; fix that line") from None
    else:
        import string

        names = set()
        for number, line in enumerate(text.splitlines(), 1):
            try:
                names |= {field.split(".")[0].split("[")[0] for _, field, _, _ in string.Formatter().parse(line) if field}
            except ValueError as exc:
                raise ValueError(f"judge template {name!r} line {number}: {exc} (Python format fields; write a "
                                 f"literal brace as {{{{ or }}}}): {line.strip()!r}; fix that line") from None
    unknown = sorted(set(names) - set(FIELDS))
    if unknown:
        raise ValueError(f"judge template {name!r} names {', '.join(unknown)}, which no judge prompt is given; its "
                         f"fields are {', '.join(FIELDS)}")


def _line(text: str, number: int | None) -> str:
    lines = text.splitlines()
    return lines[number - 1].strip() if number and 0 < number <= len(lines) else ""


# ---------------------------------------------------------------- parsers

_SCORE = re.compile(r"score\s*(?:[:=]|is)\s*\**\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
_OUT_OF = re.compile(r"(-?\d+(?:\.\d+)?)\s*(?:/|out of)\s*(\d+)", re.IGNORECASE)
_VERDICT = re.compile(r"verdict\s*[:=]\s*\**\s*\[?\s*([A-Za-z]+)", re.IGNORECASE)


def parse_score(text: str, low: float = 1.0, high: float = 10.0) -> float | None:
    """The last `Score: N` (else the last `N/high` or `N out of high`) in the verdict, mapped linearly from
    [low, high] to [0, 1]; None when there is none or it lies outside [low, high]."""
    found = _SCORE.findall(text)
    if found:
        value = float(found[-1])
    else:
        pairs = [(float(n), float(d)) for n, d in _OUT_OF.findall(text) if float(d) == high]
        if not pairs:
            return None
        value = pairs[-1][0]
    if not low <= value <= high:
        return None
    return (value - low) / (high - low)


def parse_choice(text: str) -> str | None:
    """'A', 'B' or 'tie' from the last `Verdict: X`; None for anything else."""
    found = _VERDICT.findall(text)
    if not found:
        return None
    word = found[-1].strip().lower()
    return {"a": "A", "b": "B", "tie": "tie", "equal": "tie", "draw": "tie"}.get(word)


def parse_yes_no(text: str) -> float | None:
    """1.0 for the last `Verdict: yes`, 0.0 for no; else a verdict whose first word is yes or no; else None."""
    found = _VERDICT.findall(text)
    words = re.findall(r"[A-Za-z]+", text)
    word = found[-1].lower() if found else (words[0].lower() if words else "")
    return {"yes": 1.0, "no": 0.0}.get(word)


def parse_p_yes(first_token_probs: dict[str, float] | None) -> float | None:
    """P(yes) / (P(yes) + P(no)) over the judge's most likely first tokens (any case, spaces stripped): a graded
    verdict that needs no parsing of free text; None when neither word is among them (or no probabilities came)."""
    if not first_token_probs:
        return None
    p = {"yes": 0.0, "no": 0.0}
    for token, prob in first_token_probs.items():
        word = token.strip().lower()
        if word in p:
            p[word] += prob
    total = p["yes"] + p["no"]
    return p["yes"] / total if total > 0 else None
