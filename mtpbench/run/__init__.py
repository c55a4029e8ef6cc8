"""Planning and executing the matrix: cells, schedule, executors (local, device pool, Ray), devices, doctor.
Writes the manifest; the engine writes the records.
"""
