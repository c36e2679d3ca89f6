"""guardrepro: reproduce safety guard outputs, gate parity, measure counterfactual flips."""

__version__ = "0.1.0"
