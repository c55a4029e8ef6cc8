"""Where runs and baselines live on disk: the manifest, the append-only records and their columnar copy,
baselines. Reads and validates files; judges nothing.
"""
