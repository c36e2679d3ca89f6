"""The run directory's format, read and written in one place: below ``run`` (which writes
a run) and ``checks`` (which reads one); it imports neither.

Modules:

- ``manifest``: ``manifest.json`` (``RunManifest``), written once, its field digests and
  provenance re-checked on every read; whether a resumed run is the same run.
- ``records``: ``records.jsonl``, one ``schema.Record`` a line: the strict reader and the
  exclusive, append-only ``RecordWriter``.
- ``record_checks``: the field checks of a record read back, and its score re-parsed from
  its own output text.
- ``record_sync``: when the writer fsyncs ``records.jsonl`` (batched, bounded).
- ``leftovers``: what a run refused before its first record must not leave behind.
- ``cohort``: the cohort file read strictly, and the run's cohort found from the
  manifest's reference (path and sha256).
- ``shard``: which cohort rows a shard ``k/n`` holds.
- ``read``: a run directory read once for a verb (``RunData``: manifest, records, cohort,
  expected rows).
- ``outputs``: what the checks write into a run directory (``stats.json``, ``gate.json``),
  where it goes, and the one atomic JSON writer.
- ``stream``: a run directory read a line at a time for its rows only (``stats`` at any
  size).
"""
