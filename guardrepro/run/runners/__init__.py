"""Inference backends behind one ``Runner`` protocol (see ``base``)."""
