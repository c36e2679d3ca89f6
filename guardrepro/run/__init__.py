"""Run stage: a profile resolved, prompts rendered, guards run, records written (the run
directory's format: ``guardrepro.rundir``)."""
