"""artifacts stage."""
