"""``specload report``: results as one self-contained HTML page (:mod:`.cli`).

:mod:`.html` builds the page (tables, verdicts, warnings) from :mod:`.markup`'s tags, tables
and number formats, :mod:`.svg` draws the plots' charts as inline SVG, :mod:`.prediction`
reads ``prediction.json`` back and sets it beside the measured runs (:mod:`.prediction_html`
draws that section). ``specload compare`` writes the same page as ``comparison.html``.
"""
