"""The report (layer 5): what summary.ipynb shows, report.md and verdict.json written, the HTML export."""
