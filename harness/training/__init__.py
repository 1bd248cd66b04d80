"""One run: the data module, the Lightning module, the optimiser, the callbacks that stop,
checkpoint and report progress, and what a run prints."""
