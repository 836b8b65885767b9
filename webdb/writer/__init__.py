"""The writer: edit records, the cascade, the local and the distributed writer."""
