"""JSON Schemas of the files specload writes (``summary.schema.json``)."""
