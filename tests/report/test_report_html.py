"""The HTML report, read from its DOM (stdlib html.parser): one self-contained file; per finding
an inline SVG of the curve its evidence rests on, with the trigger step marked where the
finding has one and the threshold drawn where its evidence gives one; a run overview."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest
from report_cases import case, face_cases
from conftest import traindoc

from traindoc.curves import Curve
from traindoc.engine import Report
from traindoc.catalog import finding
from traindoc.report import html


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list["Node"] = field(default_factory=list)
    text: str = ""

    def all(self, tag: str, cls: str | None = None) -> list["Node"]:
        found = [c for c in self.children if c.tag == tag and (cls is None or cls in c.attrs.get("class", "").split())]
        for c in self.children:
            found += c.all(tag, cls)
        return found


class _Tree(HTMLParser):
    VOID = {"meta", "br", "img", "input", "link", "hr"}

    def __init__(self) -> None:
        super().__init__()
        self.root = Node("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in self.VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID:
            return
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].text += data


def dom(text: str) -> Node:
    tree = _Tree()
    tree.feed(text)
    tree.close()
    assert tree.stack == [tree.root], "unclosed elements"
    return tree.root


def check_findings(text: str, findings: list[dict]) -> list[Node]:  # type: ignore[type-arg]
    """Each finding is an <article> with at least one <svg>, and each of its plots marks the
    trigger step when the finding has one."""
    articles = dom(text).all("article", "finding")
    assert [a.attrs["data-id"] for a in articles] == [f["id"] for f in findings]
    for a, f in zip(articles, findings):
        svgs = a.all("svg", "plot")
        assert svgs, f"no plot for {f['id']}"
        for svg in svgs:
            marks = svg.all("line", "trigger")
            if f["step"] is None:
                assert not marks
            else:
                assert [m.attrs["data-step"] for m in marks] == [str(f["step"])], f["id"]
    return articles


@face_cases
def test_every_face_plots_every_finding_with_its_trigger(name: str) -> None:
    c = case(name)
    data = c.data()
    assert data["findings"], c.stderr[-2000:]
    check_findings(c.html.read_text(encoding="utf-8"), data["findings"])


def test_loss_spike_plot_draws_its_threshold_at_the_evidence_level() -> None:
    c = case("analyze")
    f = c.data()["findings"][0]
    assert f["id"] == "loss-spike"
    article = check_findings(c.html.read_text(encoding="utf-8"), [f])[0]
    svg = article.all("svg", "plot")[0]
    assert svg.attrs["data-series"] == "loss"
    (line,) = svg.all("line", "threshold")
    ev = f["evidence"]
    assert float(line.attrs["data-value"]) == pytest.approx(ev["moving_average"] * ev["threshold"])


def test_per_tensor_evidence_is_a_table_of_the_named_parameters() -> None:
    c = case("run-bf16")
    data = c.data()
    underflow = next(f for f in data["findings"] if f["id"] == "update-underflow")
    articles = dom(c.html.read_text(encoding="utf-8")).all("article", "finding")
    article = next(a for a in articles if a.attrs["data-id"] == "update-underflow")
    (table,) = article.all("table", "params")
    rows = [r.all("td")[0].text for r in table.all("tr")[1:]]
    assert rows == [n for n in underflow["where"] if n in data["params"]][:12] and rows


@pytest.mark.parametrize("name", ["run-bf16", "logs"])
def test_overview_and_self_contained(name: str) -> None:
    text = case(name).html.read_text(encoding="utf-8")
    root = dom(text)
    overview = [s for s in root.all("section") if s.attrs.get("id") == "overview"][0]
    assert overview.all("svg", "plot")
    assert "loss" in [s.attrs["data-series"] for s in overview.all("svg", "plot")]
    assert not root.all("script") and not root.all("link") and not root.all("img")
    assert "http://" not in text and "https://" not in text  # nothing to fetch
    assert "prefers-color-scheme:dark" in text and "max-width:40rem" in text  # dark mode, phones
    assert root.all("meta") and any(m.attrs.get("name") == "viewport" for m in root.all("meta"))


def test_nonfinite_steps_are_marked_and_a_finding_without_curves_has_none() -> None:
    nan = finding("nonfinite", message="the loss is nan at step 3", step=3)
    atomic = finding("checkpoint-not-atomic", message="torch.save wrote ckpt.pt in place")
    curve = Curve(steps=[0, 1, 2], values=[1.0, 0.9, 0.8], nonfinite=[(3, "nan")], points=4, width=1)
    report = Report(run={"steps": 4}, findings=[nan, atomic], ran=[], not_applicable=[], series={"loss": curve})
    articles = dom(html.render(report)).all("article", "finding")
    svg = articles[0].all("svg", "plot")[0]
    assert [p.attrs["data-step"] for p in svg.all("path")] == ["3"]
    assert [m.attrs["data-step"] for m in svg.all("line", "trigger")] == ["3"]
    # no curve of its own: the loss as context, and no trigger to mark (no step)
    assert articles[1].all("svg", "plot") and not articles[1].all("line", "trigger")
    bare = Report(run={"steps": 0}, findings=[atomic], ran=[], not_applicable=[])
    assert not dom(html.render(bare)).all("svg")  # nothing measured, nothing drawn


def test_per_metric_threshold_is_drawn_on_that_metrics_curve() -> None:
    f = finding("metric-divergence", message="val_loss rose to 1.4 at step 6, 2.8x its best 0.5", step=6,
                evidence={"metrics": ["val_loss"], "best": {"val_loss": 0.5}, "threshold": 2.0})
    curve = Curve(steps=[0, 2, 4, 6], values=[0.9, 0.5, 0.8, 1.4], nonfinite=[], points=4, width=1)
    report = Report(run={"steps": 7}, findings=[f], ran=[], not_applicable=[], series={"val_loss": curve})
    svg = dom(html.render(report)).all("article", "finding")[0].all("svg", "plot")[0]
    assert svg.attrs["data-series"] == "val_loss"
    assert [float(t.attrs["data-value"]) for t in svg.all("line", "threshold")] == [1.0]


def test_a_page_renders_alike_under_any_hash_seed(tmp_path: Path) -> None:
    """A live run writes its page in the user's process; `traindoc report` writes it again in
    another. The curves chosen for a finding must not follow set order (PYTHONHASHSEED)."""
    pages = []
    for seed in ("0", "1", "2", "3", "5"):
        page = tmp_path / f"{seed}.html"
        ran = traindoc("report", str(case("run-nan").json), "--html", str(page), env={"PYTHONHASHSEED": seed})
        assert ran.returncode == 0, ran.stderr[-2000:]
        pages.append(page.read_text())
    assert all(p == pages[0] for p in pages[1:])
