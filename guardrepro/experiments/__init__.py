"""Experiments over guard configurations: declarative recipe sweeps, teacher-forced
divergence from a reference run, and the inputs of the cost-harm frontier."""
