"""``fairbench report``: a results tree (or two runs of one campaign) as report.md, report.html and plots.

load (files -> Run) -> summary (figures), differences (what differed) -> document (blocks) ->
markdown / html; plots draws the PNGs the document shows.
"""
