"""cohort stage."""
