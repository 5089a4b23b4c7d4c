"""The plan of the job whose flight-recorder dumps are in this folder: a (dp=2, tp=2) mesh
over 4 ranks, 2 per host.  Its dumps (torch 2.13, Gloo, as JSON) come from
``tests/hang_programs.py``'s ``two_dims``: rank 1 skipped its second tp all_reduce and rank 3
its second dp all_reduce.

    meshlayout hang examples/hang/fr_json_*.json --plan examples/hang/plan.py
"""

from mesh import MeshView, Topology

VIEWS = {"train": MeshView.from_shape((2, 2), ("dp", "tp"))}
TOPOLOGY = Topology(4, 2)
