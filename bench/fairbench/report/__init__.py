"""``fairbench report``: a results tree (or two runs of one campaign) as report.md, report.html and plots.

load (files -> Run; rules checks each file's shape, fleet_file reads fleet.json) -> summary (figures),
differences (what differed) -> document (blocks; formatting writes figures in text, fleet_blocks the
fleet's sections) -> markdown / html; plots draws the PNGs the document shows.
"""
