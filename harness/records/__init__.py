"""What a run leaves behind: its record (`results.json`), the sweep's `summary.jsonl`, the
statuses and the failure policy, the sweep's console and the W&B run."""
