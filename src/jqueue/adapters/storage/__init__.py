"""Storage backends: memory, local file, S3 and GCS."""
