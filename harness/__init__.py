"""The run pipeline around `tasks` and `models`, in wings by role, each importing only those
before it: `readouts`, `config`, `records`, `training`, `report`; the entry points `train`
(one run), `evaluate` (a re-test of kept weights) and `api` (the Python API) at the top."""
