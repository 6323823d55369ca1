"""The pages' parts that are not one report: the SVG plot geometry, the roll call's timeline, the trend page.

:mod:`rollcall.page.report` draws ``report.html`` with :mod:`.plot` and :mod:`.timeline`; ``rollcall history
--html`` draws the trend page (:mod:`.trend`) with the same :mod:`.plot`. Every page is self-contained: inline
CSS and SVG, no script, no address outside the artifacts.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2
import markupsafe

from rollcall.collect import printable


def _finalize(value: Any) -> Any:
    if isinstance(value, markupsafe.Markup):  # already safe HTML: its escapes add no markup
        return markupsafe.Markup(printable(str(value)))
    return printable(value) if isinstance(value, str) else value


@cache
def template(name: str) -> jinja2.Template:
    """The page template ``name`` of ``rollcall/templates/`` (autoescaped; an undefined value is an error)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("rollcall", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        finalize=_finalize,  # every value a page shows, made printable
    )
    return env.get_template(name)
