"""One table of the kernels NCCL has, read by the tuner's rules, the twin's model and its NCCL cost model."""

import re

import pytest

from traces.task import Op
from tuner.config import Algo, Proto, Subspace
from tuner.rules import CommFacts, implementation_problem, subspace_problem
from twin.model.geometry import CommGeometry
from twin.model.schedule import Unsupported, check_supported
from twin.nccl_model.cost_table import implemented
from twin.topology import load_cluster


@pytest.mark.parametrize("op", list(Op))
def test_the_tuner_the_model_and_the_nccl_cost_model_agree_on_every_kernel(op):
    """Where NCCL has no kernel, all three refuse with the same reason; where it has one, none does
    for that reason."""
    geom = CommGeometry(load_cluster("dgx-h100", nodes=2))
    facts = CommFacts(nranks=16, nnodes=2, sm_count=132, sm_version=90, nvls=True, collnet=True)
    for algo in Algo:
        for proto in Proto:
            problem = implementation_problem(op, algo, proto)
            if op not in (Op.ALLTOALL, Op.SENDRECV):
                assert implemented(op, algo, proto) == (problem is None), (op, algo, proto)
            if problem is None:
                continue
            assert subspace_problem(op, Subspace(algo, proto), facts) == problem
            with pytest.raises(Unsupported, match=f"^{re.escape(problem)}$"):
                check_supported(geom, op, algo, proto)


def test_the_table_holds_nccls_kernels():
    """Spot checks against NCCL's kernel list (``src/device/generate.py``)."""
    assert implementation_problem(Op.ALLREDUCE, Algo.TREE, Proto.LL128) is None
    assert implementation_problem(Op.ALLGATHER, Algo.PAT, Proto.SIMPLE) is None
    assert implementation_problem(Op.ALLREDUCE, Algo.COLLNET_DIRECT, Proto.LL) == (
        "collnet_direct runs only with the simple protocol")
    assert implementation_problem(Op.BROADCAST, Algo.TREE, Proto.SIMPLE) == (
        "broadcast has no tree algorithm (NCCL offers ring)")
    assert implementation_problem(Op.SENDRECV, Algo.RING, Proto.LL) == (
        "sendrecv is point-to-point and uses the simple protocol")
