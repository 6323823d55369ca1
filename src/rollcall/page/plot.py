"""The geometry of the pages' SVG charts: one bar (or point) per slot, a value axis, labelled lines.

A :class:`Plot` places slot ``i`` (a rank of a report, a run of the trend page) at ``x(i)`` and a value at
``y(value)``; :meth:`Plot.chart` gives the template what it draws, including the slot axis' labels
(:meth:`Plot.axis`: every slot while they fit, else every n-th), so a chart reads the same at 2 slots and at
2,048.
"""

from __future__ import annotations

import math
from typing import Any

#: The width of one character of an axis label (11px text), and the least gap between two labels, in pixels.
CHAR_W, LABEL_GAP = 7, 6


class Plot:
    """The geometry of a chart of one bar per slot; ``top`` is the value at the top of the plot."""

    LEFT, PLOT_H, PAD, AXIS_H = 48, 160, 18, 16

    def __init__(
        self, slots: int, top: float, *, width: int = 900, min_bar: int = 3, max_bar: int = 28
    ) -> None:
        self.slots = slots
        self.top = top
        self.bar_w = max(min_bar, min(max_bar, width // max(slots, 1)))
        self.bottom = self.PAD + self.PLOT_H
        self.right = self.LEFT + slots * self.bar_w

    def x(self, slot: int) -> int:
        """The left edge of slot ``slot``."""
        return self.LEFT + slot * self.bar_w

    def y(self, value: float) -> float:
        """Where ``value`` lies on the plot."""
        return self.PAD + self.PLOT_H * (1 - value / self.top)

    def bar(self, slot: int, state: str, value: float, title: str) -> dict[str, Any]:
        """Slot ``slot``'s bar, up to ``value``."""
        y = self.y(value)
        return {
            "rank": slot,
            "state": state,
            "x": self.x(slot),
            "y": f"{y:.1f}",
            "h": f"{self.bottom - y:.1f}",
            "title": title,
        }

    def stub(self, slot: int, state: str, title: str) -> dict[str, Any]:
        """A slot without a value: a low mark at the bottom."""
        return {"rank": slot, "state": state, "x": self.x(slot), "y": self.bottom - 4, "h": 4, "title": title}

    def axis(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        """The slot axis' labels (``names``, else the numbers): every slot while they fit, else every n-th.

        The first and the last slot are always labelled.
        """
        longest = max((len(n) for n in names), default=1) if names else len(str(max(self.slots - 1, 0)))
        step = max(1, math.ceil((CHAR_W * longest + LABEL_GAP) / self.bar_w))
        shown = sorted({*range(0, self.slots, step), self.slots - 1}) if self.slots else []
        if len(shown) > 2 and shown[-1] - shown[-2] < step:
            shown.pop(-2)  # the last label would overlap the one before it
        return [
            {
                "slot": i,
                "x": f"{self.x(i) + (self.bar_w - 1) / 2:.1f}",
                "y": self.bottom + self.AXIS_H - 4,
                "text": names[i] if names else str(i),
            }
            for i in shown
        ]

    def chart(
        self, bars: list[dict[str, Any]], lines: list[dict[str, Any]], names: list[str] | None = None
    ) -> dict[str, Any]:
        """The geometry a bar chart of the template draws from."""
        return {
            "width": self.right + 160,
            "height": self.PLOT_H + 2 * self.PAD + self.AXIS_H,
            "left": self.LEFT,
            "right": self.right,
            "bottom": self.bottom,
            "top_y": self.PAD + 4,
            "top_label": f"{self.top:.4g}",
            "bar_w": self.bar_w,
            "bars": bars,
            "lines": lines,
            "axis": self.axis(names),
        }


def hline(cls: str, y: float, label: str) -> dict[str, str]:
    """A horizontal line across the plot at ``y``, of class ``cls``, labelled at its right end."""
    return {"cls": cls, "y": f"{y:.1f}", "label_y": f"{y + 4:.1f}", "label": label}
