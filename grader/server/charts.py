"""Small inline SVG charts rendered on the server (no script, no chart library).

:func:`gate_bars_svg` draws, per gate, the baseline's and the candidate's pass rate as two
horizontal bars with a 95% interval whisker on each: the Wilson score interval of that side's
pass rate (``scipy.stats.binomtest(k, n).proportion_ci(method="wilson")``), which stays inside
[0, 1] and is sensible at 0/n and n/n. Built from counts only, so the same chart is safe on the
student's comparison page.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from markupsafe import Markup, escape
from scipy import stats

BASELINE_COLOUR = "#7a8ca3"
CANDIDATE_COLOUR = "#2a6fdb"
WORSE_COLOUR = "#c0392b"


@dataclass(frozen=True)
class GateBar:
    label: str
    cases: int
    baseline_passed: int
    candidate_passed: int


def wilson(passed: int, total: int) -> tuple[float, float]:
    """The 95% Wilson score interval of ``passed`` out of ``total`` (0, 0 when empty)."""
    if total == 0:
        return 0.0, 0.0
    ci = stats.binomtest(passed, total).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def bars_from_gates(gates: dict[str, dict[str, dict[str, int]]]) -> list[GateBar]:
    """Bars from a comparison's ``gates`` (kind → gate → counts), labelled ``kind: gate``."""
    return [
        GateBar(f"{kind}: {gate}", c["cases"], c["baseline_passed"], c["candidate_passed"])
        for kind, by_gate in gates.items()
        for gate, c in by_gate.items()
    ]


def gate_bars_svg(bars: Iterable[GateBar], *, title: str = "Pass rate per gate") -> Markup:
    """An accessible SVG bar chart (a <title> and a text legend; every bar has a tooltip)."""
    rows = list(bars)
    label_width, plot_width, row_height, top = 260, 420, 34, 40
    width = label_width + plot_width + 90
    height = top + row_height * len(rows) + 30
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="gate-chart" role="img" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}: baseline vs candidate, 95% Wilson intervals</title>",
        f'<rect x="{label_width}" y="8" width="12" height="12" fill="{BASELINE_COLOUR}"/>',
        f'<text x="{label_width + 16}" y="18">baseline</text>',
        f'<rect x="{label_width + 90}" y="8" width="12" height="12" fill="{CANDIDATE_COLOUR}"/>',
        f'<text x="{label_width + 106}" y="18">candidate</text>',
        f'<text x="{label_width + 190}" y="18" fill="#555">whiskers: 95% interval</text>',
    ]
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        x = label_width + tick * plot_width
        parts.append(
            f'<line x1="{x:.1f}" y1="{top - 6}" x2="{x:.1f}" y2="{height - 24}" '
            'stroke="#ddd" stroke-width="1"/>'
        )
        parts.append(
            f'<text x="{x:.1f}" y="{height - 10}" text-anchor="middle" fill="#555">'
            f"{tick:.0%}</text>"
        )
    for index, bar in enumerate(rows):
        y = top + index * row_height
        worse = bar.candidate_passed < bar.baseline_passed
        emphasis = f' class="worse" fill="{WORSE_COLOUR}" font-weight="bold"' if worse else ""
        parts.append(
            f'<text x="{label_width - 8}" y="{y + 17}" text-anchor="end"{emphasis}>'
            f"{escape(bar.label)}</text>"
        )
        for offset, passed, colour, side in (
            (2, bar.baseline_passed, BASELINE_COLOUR, "baseline"),
            (16, bar.candidate_passed, CANDIDATE_COLOUR, "candidate"),
        ):
            rate = passed / bar.cases if bar.cases else 0.0
            low, high = wilson(passed, bar.cases)
            x0 = label_width
            bar_y = y + offset
            parts.append(
                f'<rect class="bar bar-{side}" x="{x0}" y="{bar_y}" '
                f'width="{rate * plot_width:.1f}" height="12" fill="{colour}">'
                f"<title>{escape(bar.label)}, {side}: {passed}/{bar.cases} "
                f"({rate:.0%}; 95% interval {low:.0%}–{high:.0%})</title></rect>"
            )
            mid = bar_y + 6
            xl, xh = x0 + low * plot_width, x0 + high * plot_width
            parts.append(
                f'<path class="whisker" d="M{xl:.1f} {mid}H{xh:.1f}M{xl:.1f} {mid - 4}V{mid + 4}'
                f'M{xh:.1f} {mid - 4}V{mid + 4}" stroke="#222" stroke-width="1.2" fill="none"/>'
            )
            parts.append(
                f'<text x="{label_width + plot_width + 8}" y="{bar_y + 10}" fill="#333">'
                f"{passed}/{bar.cases}</text>"
            )
    parts.append("</svg>")
    return Markup("".join(parts))
