"""The pages' parts that are not one report: the SVG plot geometry, the roll call's timeline, the trend page.

:mod:`rollcall.htmlreport` draws ``report.html`` with :mod:`.plot` and :mod:`.timeline`; ``rollcall history
--html`` draws the trend page (:mod:`.trend`) with the same :mod:`.plot`. Every page is self-contained: inline
CSS and SVG, no script, no address outside the artifacts.
"""

from __future__ import annotations

from functools import cache

import jinja2


@cache
def template(name: str) -> jinja2.Template:
    """The page template ``name`` of ``rollcall/templates/`` (autoescaped; an undefined value is an error)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("rollcall", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    return env.get_template(name)
