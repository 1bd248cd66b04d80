"""From the command line to a checked, composed config: the names typed, the run-level
settings, the devices, the help page and what Hydra says about the running job."""
