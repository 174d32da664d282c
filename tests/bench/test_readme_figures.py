"""No measured figure on a page that carries them without a result file: every number with a unit on bench/README.md
and the group READMEs beside it (the pages that carry measured figures: the other docs link to them) sits in a block
rendered from bench/results/ (and checked against it by a test), or is on the allow-list below, which names the
numbers that are settings, targets or code constants rather than measurements."""

from __future__ import annotations

import re

import pytest

from bench import readme_sections

# The pages that carry measured figures; each is audited whole.
FIGURE_PAGES = (readme_sections.README, *readme_sections.PAGES.values())

# A number followed by a unit of time, size, rate, share or ratio (the forms the Benchmarks section measures in); a
# ratio is written 5.5x, so "batch 2 x 2" is not one.
FIGURE = re.compile(
    r"(?<![\w.-])\d[\d,]*(?:\.\d+)?(?:x|\s?(?:ms/event|ms/request|req/s|events/s|ms|s|min|minutes?|seconds?|hours?|%|"
    r"KiB|MiB|GiB|KB|MB|GB|cores?|points?))(?![\w/])"
)

# Blocks rendered from result files and the test that checks each against its file.
RENDERED_ELSEWHERE = {
    "learning-bench": "tests/bench/learning/test_learning_readme.py (bench/learning/render_learning.py)",
    "rollout-speed": "tests/bench/rollout/test_rollout_speed_readme.py (bench/rollout/render_rollout_speed.py)",
    "verdict-rates": "tests/bench/learning/test_verdict_rates_readme.py (bench/learning/verdict_error_rates.py)",
}

# Numbers with a unit that are not measurements, each with what it is. Matched on the figure and its sentence.
ALLOWED = {
    "every 2 s per job": "a code constant: REMOTE_CHECK_INTERVAL_S in service/adapters/events_file.py",
    "per 0.5 s round": "a setting: RLJOB_PROGRESS_POLL_INTERVAL_S's default",
    "`tight` (over 90%)": "the fit check's threshold (trainer/sizing/fit.py)",
    "a 95% prediction interval": "the estimate's method (service/domain/cost/estimate_stats.py)",
}


def _without_blocks(text: str) -> str:
    """The text with every rendered block (registered in readme_sections or checked elsewhere) blanked out."""
    names = [re.escape(f"bench:{name}") for name in readme_sections.SECTIONS] + [re.escape(n) for n in RENDERED_ELSEWHERE]
    for name in names:
        text = re.sub(rf"<!-- {name}:begin -->.*?<!-- {name}:end -->", "", text, flags=re.DOTALL)
    return text


def unsourced_figures(page: str) -> list[str]:
    """Each figure with a unit on the page outside rendered blocks that no allow-list entry covers, with its context."""
    text = _without_blocks(page)
    found = []
    for match in FIGURE.finditer(text):
        context = text[max(0, match.start() - 60) : match.end() + 60].replace("\n", " ")
        if not any(allowed in context and match.group() in allowed for allowed in ALLOWED):
            found.append(f"{match.group()!r} in ...{context}...")
    return found


@pytest.mark.parametrize("page", FIGURE_PAGES, ids=lambda page: str(page.relative_to(readme_sections.REPO)))
def test_a_page_with_figures_has_none_outside_a_rendered_block(page) -> None:
    found = unsourced_figures(page.read_text())
    assert not found, (
        f"figures on {page} that no result file backs: render them from bench/results/ "
        "(bench/readme_sections.py) or, if they are settings or constants, add them to ALLOWED with what they are:\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    "planted",
    [
        "- `bench/new.py`: a new bench, 12.5 ms p99 on this machine.\n",
        "  it is 3.4x faster now\n",
        "  one replica answered at 500 req/s\n",
        "  50% of jobs\n",
    ],
)
@pytest.mark.parametrize("page", FIGURE_PAGES, ids=lambda page: str(page.relative_to(readme_sections.REPO)))
def test_a_planted_unsourced_figure_is_found(planted: str, page) -> None:
    text = page.read_text()
    at = text.index("\n", text.index("\n## ") + 1) + 1  # under the page's first section heading
    assert not unsourced_figures(text)
    assert unsourced_figures(text[:at] + "\n" + planted + text[at:])


def test_a_figure_inside_a_rendered_block_is_not_reported() -> None:
    name = next(iter(readme_sections.SECTIONS))
    block = f"<!-- bench:{name}:begin -->\n12.5 ms\n<!-- bench:{name}:end -->\n"
    assert not unsourced_figures("\n## Benchmarks\n" + block + "\n## Next\n")


@pytest.mark.parametrize("allowed", sorted(ALLOWED))
def test_every_allowed_figure_is_still_on_a_page_with_figures(allowed: str) -> None:
    assert any(allowed in page.read_text().replace("\n  ", " ") for page in FIGURE_PAGES), (
        f"{allowed!r} is no longer on {', '.join(str(p) for p in FIGURE_PAGES)}: drop it from ALLOWED"
    )
