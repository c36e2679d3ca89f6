"""Audits of the benchmark itself and the audit ladder. Imports the stages below it (in
practice ``core`` only).

Modules:

- ``association``: rung 2, the guard's observational association with nuisance features.
- ``benchmark``: interaction weighting and the tool-name lookup diagnostic (rung 1).
- ``ladder``: what each rung of the audit ladder may and may not be taken to show.
- ``types``: the typed results (frozen dataclasses; ``to_json()`` is the JSON the verb
  writes, ``from_json()`` reads it back where it is read back).
"""
