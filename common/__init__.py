"""Small pieces shared below `harness`: name registries and parameter checks (`tasks`,
`models`), and the human-readable sizes, times and counts (`harness`'s console and report)."""
