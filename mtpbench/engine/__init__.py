"""What runs inside a build's interpreter (worker, serving server/load/job): the standard library only at module
level, vllm imported lazily; of mtpbench only schema.py.
"""
