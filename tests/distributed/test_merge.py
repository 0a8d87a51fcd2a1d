"""Per-rank recordings and the merge of per-rank findings into one report (no torch needed)."""

from __future__ import annotations

from pathlib import Path

from traindoc import record
from traindoc.analyze import analyze_ranks, merge_ranks
from traindoc.engine import Report
from traindoc.events import RankEnd, RankLoss, RankParams, RunEnd, RunStart, Scalar
from traindoc.catalog import finding


def test_rank_path_gives_every_rank_its_own_file(tmp_path: Path) -> None:
    assert record.rank_path(tmp_path, 1, 2) == tmp_path / "rank1.jsonl"  # an existing folder
    assert record.rank_path(tmp_path / "rec", 3, 4) == tmp_path / "rec" / "rank3.jsonl"
    assert record.rank_path(tmp_path / "run.jsonl", 1, 2) == tmp_path / "run.rank1.jsonl"
    assert record.rank_path(tmp_path / "run.jsonl", 0, 1) == tmp_path / "run.jsonl"  # one process: as given
    assert record.rank_path(tmp_path / "rec" / "rank1.jsonl", 0, 1) == tmp_path / "rec" / "rank1.jsonl"


def test_recorder_under_a_launcher_writes_one_file_per_rank(tmp_path: Path, monkeypatch: object) -> None:
    for rank in (0, 1):
        rec = record.Recorder(tmp_path / "rec", rank=rank, world_size=2)
        rec(RunStart(source="live", rank=rank, world_size=2))
        rec.close()
    assert sorted(p.name for p in (tmp_path / "rec").iterdir()) == ["rank0.jsonl", "rank1.jsonl"]
    assert record.rank_of(tmp_path / "rec" / "rank1.jsonl", []) == 1


def _report(*findings: object) -> Report:
    return Report(run={"steps": 10}, findings=list(findings), ran=[], not_applicable=[])  # type: ignore[arg-type]


def test_a_finding_on_one_rank_only_says_so_and_carries_its_rank() -> None:
    nan = finding("nonfinite", message="loss is nan at step 4", step=4)
    spike = finding("loss-spike", message="loss 9 at step 3", step=3)
    ends = {r: RankEnd(rank=r, world_size=2, steps=10, status="ok", backend="gloo") for r in (0, 1)}
    merged = merge_ranks(_report(spike), ends, {0: [spike], 1: [spike, nan]}, 2)
    by_id = {f.id: f for f in merged.findings}
    assert by_id["loss-spike"].evidence["ranks"] == [0, 1]
    assert by_id["nonfinite"].evidence["ranks"] == [1]
    assert by_id["nonfinite"].message.startswith("on rank 1 (not rank 0): loss is nan")
    assert merged.run["world_size"] == 2 and merged.run["backend"] == "gloo"
    assert merged.run["rank_steps"] == [10, 10] and merged.disabled == []


def test_a_rank_that_never_reported_is_named() -> None:
    ends = {0: RankEnd(rank=0, world_size=3, steps=10, status="ok")}
    merged = merge_ranks(_report(), ends, {0: []}, 3)
    assert merged.run["rank_status"] == ["ok", "unknown", "unknown"]
    assert merged.disabled and "rank(s) 1, 2 did not report" in merged.disabled[0][1]


def _params(step: int, rank: int, value: float) -> RankParams:
    return RankParams(step=step, rank=rank, world_size=2, names=("w",), sums=(value,), scales=(abs(value),),
                      samples=(value, 0.0, 0.0, 0.0))


def test_offline_merge_compares_ranks_like_the_live_run() -> None:
    streams = {
        r: [RunStart(source="live", rank=r, world_size=2),
            *[e for s in range(4) for e in (Scalar(step=s, name="loss", value=1.0), _params(s, r, 1.0 + (r * s >= 2)))],
            RunEnd(steps=4, duration_s=1.0, status="ok")]
        for r in (0, 1)
    }
    report = analyze_ranks(streams, select=["rank-divergence"])
    assert [(f.id, f.step, f.evidence["ranks"]) for f in report.findings] == [("rank-divergence", 2, [1])]
    assert report.run["rank_steps"] == [4, 4]


def test_offline_merge_compares_the_ranks_losses_step_by_step() -> None:
    def stream(rank: int, scale: float) -> list[object]:
        losses = [RankLoss(step=s, rank=rank, world_size=2, steps=tuple(range(s - 9, s + 1)),
                           values=tuple(scale * (1 + 0.1 * ((k * 7 + rank) % 5)) for k in range(s - 9, s + 1)))
                  for s in range(9, 400, 10)]
        return [RunStart(source="live", rank=rank, world_size=2), *losses, RunEnd(steps=400, duration_s=1.0, status="ok")]

    quiet = analyze_ranks({0: stream(0, 1.0), 1: stream(1, 1.0)}, select=["rank-loss-skew"])  # type: ignore[dict-item]
    assert quiet.findings == []
    skewed = analyze_ranks({0: stream(0, 1.0), 1: stream(1, 1.5)}, select=["rank-loss-skew"])  # type: ignore[dict-item]
    assert [(f.id, f.evidence["ranks"], f.evidence["side"]) for f in skewed.findings] == [("rank-loss-skew", [1], "above")]
