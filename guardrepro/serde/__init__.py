"""JSON values derived from dataclass fields, one strict helper below every stage.

Modules:

- ``fields``: ``as_json_value`` / ``from_json_value``, the ``opt`` field options and the
  ``JsonValue`` mixin (``to_dict``, ``from_dict``, ``to_json``) of the project's frozen
  values; imports only ``errors`` and ``spec``.
"""
