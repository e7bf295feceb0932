"""The spans of prose that name a label of the output (tests/named_labels.py), on made-up cells."""

from __future__ import annotations

import named_labels

MARKDOWN = {
    "intro": "看 `faster` 这一列和“在噪声范围内”的结论；`decision` 列写着 `keep`。",
    "code": "调用 `report_mfu(cfg)`，把 `rows` 传给 `helpers.report`，设 `QUICK = True`，或用 `nsys stats`。",
    "values": 'answer "compute" or `"memory"`; the option `--trace`; `p − 1`; `DistributedDataParallel`, '
    "`DTensor`; run `nvidia-smi`.",
    "fence": "```\n`inside a fence`\n```\n“最快”",
}
CODE = ["rows = report.rows()\nQUICK = True\n"]


def test_only_label_like_spans_are_named():
    names = named_labels._code_names(CODE)
    found = {cid: named_labels.named_spans(text, names) for cid, text in MARKDOWN.items()}
    assert found == {
        "intro": ["faster", "在噪声范围内", "decision", "keep"],
        "code": [],  # a call, a name of the code, an assignment, a command line
        "values": ["compute"],  # a quoted value inside backticks, an option, a formula, an API are not
        "fence": ["最快"],
    }


def test_a_span_is_missing_when_no_output_shows_it():
    outputs = [
        {"output_type": "stream", "name": "stdout", "text": "配置  更快  在噪声范围内\n"},
        {"output_type": "display_data", "data": {"text/html": "<td>Keep</td>", "image/png": "iVBORw0K"}},
    ]
    shown = named_labels.shown_text(outputs)
    missing = named_labels.missing_labels(MARKDOWN, CODE, shown)
    assert missing == ["intro: faster", "intro: decision", "values: compute", "fence: 最快"]
