"""ShieldGemma (2B): the project's chat template (``template``); the guard is a spec."""
