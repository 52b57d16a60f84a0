"""docs/PERFORMANCE.md stays a page of current figures: short, every JSON it cites present in docs/bench, and
nothing in docs/bench that no page cites (the history lives in git)."""
from __future__ import annotations

import itertools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE_LINES_MAX = 400
BENCH_FILES_MAX = 60


def _cited(text: str) -> set[str]:
    """JSON file names a page cites, with `{a,b}` alternatives expanded."""
    names = set()
    for token in re.findall(r"[A-Za-z0-9_.{},\-]+\.json", text):
        parts = re.split(r"(\{[^}]*\})", token.split("/")[-1])
        options = [p[1:-1].split(",") if p.startswith("{") else [p] for p in parts]
        names.update("".join(combo) for combo in itertools.product(*options))
    return names


def test_the_performance_page_is_the_current_figures_only():
    lines = (ROOT / "docs/PERFORMANCE.md").read_text().splitlines()
    assert len(lines) <= PAGE_LINES_MAX, f"docs/PERFORMANCE.md has {len(lines)} lines; keep current figures only"


def test_every_bench_json_is_cited_and_every_cited_one_is_there():
    bench = {p.name for p in (ROOT / "docs/bench").iterdir()}
    assert len(bench) <= BENCH_FILES_MAX
    cited = set()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        cited |= _cited(page.read_text())
    perf = _cited((ROOT / "docs/PERFORMANCE.md").read_text())
    looks_like_bench = {n for n in perf if re.match(r"[a-z0-9]+-[a-z0-9-]+\.json$", n) or n == "update.json"}
    missing = sorted(n for n in looks_like_bench if n not in bench and "-" in n and not n.startswith("-"))
    assert not missing, f"cited in docs/PERFORMANCE.md but not in docs/bench: {missing}"
    uncited = sorted(bench - cited)
    assert not uncited, f"in docs/bench but cited by no page (remove them; git keeps the history): {uncited}"
