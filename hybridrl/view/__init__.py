"""`hybridrl view RUN_DIR ...`: a local, read-only web page over run folders (curves, generations, A/B).

Modules, one job each: `index.py` (line offsets of growing JSONL files), `runs.py` (what a run folder
holds, read through the index), `generations.py` (a step's dumped generations grouped by prompt),
`app.py` (the FastAPI routes), `cli.py` (the subcommand), `static/` (the page itself).
"""
