"""Table files: block format, records, readers and writers."""
