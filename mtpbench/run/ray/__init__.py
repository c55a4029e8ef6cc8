"""Ray: reaching a cluster in bounded time, and the keeper of the cluster mtpbench starts itself. The executor that
runs a cell-repeat on a node is run/executors.py's RayExecutor. The package imports nothing:
`python -m mtpbench.run.ray.keeper` imports it before the keeper runs.

- cluster.py: Reaching a Ray cluster in bounded time: the cluster mtpbench starts itself when no address is named,
  the deadline of every wait on Ray, and the check, before anything is submitted, that each cell-repeat fits a node
- keeper.py: The keeper of the Ray cluster mtpbench starts itself (run/ray/cluster.py's LocalCluster)
"""
