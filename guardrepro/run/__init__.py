"""Run stage: what a run writes and how it is read back (see ``record_checks``)."""
