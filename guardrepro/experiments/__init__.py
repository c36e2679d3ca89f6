"""Experiments over guard configurations: declarative recipe sweeps, teacher-forced
divergence from a reference run, and the cost-harm frontier (``frontier``: dominance
and the Pareto frontier) with its inputs; ``artifact_side`` is a run's
``artifact.json``, the checkpoint size the frontier's bytes axis reads."""
