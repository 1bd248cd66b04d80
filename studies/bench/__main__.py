"""`python -m studies.bench`: see `studies.bench`."""

from studies.bench.cli import main

main()
