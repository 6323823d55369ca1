"""The pages' parts that are not one report: the SVG plot geometry, the roll call's timeline, the trend page.

:mod:`rollcall.htmlreport` draws ``report.html`` with :mod:`.plot` and :mod:`.timeline`; ``rollcall history
--html`` draws the trend page (:mod:`.trend`) with the same :mod:`.plot`. Every page is self-contained: inline
CSS and SVG, no script, no address outside the artifacts.
"""
