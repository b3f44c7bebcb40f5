"""NCCL's double binary tree between nodes: who is whose parent in each of its two trees.

NCCL (every release from 2.4 to 2.30) links the nodes of a Tree channel by ``ncclGetDtree``
(``src/graph/trees.cc``): the first tree is ``ncclGetBtree``'s binary tree, in which node 0 is the
root with a single child (``nnodes / 2`` rounded up to a power of two) and every other node's
parent and children follow from its lowest set bit; the second tree is its mirror
(``nnodes - 1 - node``) for an even node count, or the first shifted by one node for an odd one.
``connectTrees`` (``src/graph/connect.cc`` @ v2.8.4-1 and v2.30.7-1) gives search channel ``c``
the first tree and its copy ``c + nChannels`` the second, so the two trees share each NIC.

>>> [parent(8, node, 0) for node in range(8)]
[-1, 2, 4, 2, 0, 6, 4, 6]
>>> [parent(8, node, 1) for node in range(8)]
[1, 3, 1, 7, 5, 3, 5, -1]
>>> [inner_children(n) for n in (1, 2, 3, 4, 16)]
[0, 0, 1, 2, 2]

Inside each node a tree channel is a chain of GPUs from its head (``tree_chain``), and the search's
pattern says which GPU of a node's chain each network link reaches (``ncclTopoPreset``,
``src/graph/connect.cc`` @ v2.8.4-1 – v2.28.9-1: ``child0Index``, ``child1Index``;
``setTreeUp``/``setTreeDown`` in ``connectTrees``): ``"tree"`` (``NCCL_TOPO_PATTERN_TREE``) joins
the parent and both children to the head; ``"balanced"`` (``NCCL_TOPO_PATTERN_BALANCED_TREE``,
"Tree parent + one child on first GPU, second child on second GPU", ``src/include/graph.h``) the
parent and the upper child to the head, the lower child (``ncclGetBtree``'s ``parentChildType`` 0)
to the chain's second GPU; ``"split"`` (``NCCL_TOPO_PATTERN_SPLIT_TREE``) both children to the
second GPU.  A link that reaches the second GPU costs its data one more hop inside the parent node:

>>> [entry_gpu(8, node, 0, "balanced") for node in range(1, 8)]  # children 1, 2, 5: lower ones
[1, 1, 0, 0, 1, 0, 0]
>>> [entry_hops(n, "balanced") for n in (2, 3, 4, 8, 16)], entry_hops(8, "split"), entry_hops(8, "tree")
([0, 1, 1, 2, 3], 3, 0)
"""

from __future__ import annotations


def btree(nnodes: int, node: int) -> tuple[int, tuple[int, ...]]:
    """(parent, children) of ``node`` in ``ncclGetBtree``'s tree over ``nnodes`` nodes (-1: root).

    >>> btree(4, 0), btree(4, 2), btree(4, 3)
    ((-1, (2,)), (0, (1, 3)), (2, ()))
    """
    bit = 1
    while bit < nnodes and not bit & node:
        bit <<= 1
    if node == 0:
        return -1, ((bit >> 1,) if nnodes > 1 else ())
    up = (node ^ bit) | (bit << 1)
    if up >= nnodes:
        up = node ^ bit
    low = bit >> 1
    if low == 0:
        return up, ()
    down1 = node + low
    while down1 >= nnodes:  # the highest child inside the tree, as ncclGetBtree's loop finds it
        down1 = node + low if low else -1
        low >>= 1
    return up, tuple(c for c in (node - (bit >> 1), down1) if c >= 0)


def _btree_rank(nnodes: int, node: int, tree: int) -> int:
    """``node``'s rank in the ``ncclGetBtree`` call ``ncclGetDtree`` makes for tree ``tree``."""
    if tree == 0:
        return node
    return (node - 1) % nnodes if nnodes % 2 else nnodes - 1 - node


def entry_gpu(nnodes: int, node: int, tree: int, pattern: str) -> int:
    """Which GPU of its parent node's chain (0: the head, 1: the next) ``node``'s network link
    reaches in tree ``tree`` under the search's ``pattern``; 0 for a root (it has no parent).
    ``parentChildType`` is that of ``ncclGetBtree``'s tree before ``ncclGetDtree`` mirrors or
    shifts it (``ncclGetDtree`` passes it through, ``src/graph/trees.cc`` @ v2.8.4-1 – v2.28.9-1)."""
    rank = _btree_rank(nnodes, node, tree)
    up = btree(nnodes, rank)[0]
    if up < 0 or pattern == "tree":
        return 0
    return 1 if pattern == "split" or rank < up else 0  # rank < up: parentChildType 0


def entry_hops(nnodes: int, pattern: str) -> int:
    """The most hops inside nodes that network links reaching a chain's second GPU
    (``entry_gpu``) add to a path from a node up to the root, in either tree."""
    def hops(node: int, tree: int) -> int:
        up = parent(nnodes, node, tree)
        return 0 if up < 0 else entry_gpu(nnodes, node, tree, pattern) + hops(up, tree)
    return max((hops(node, tree) for tree in (0, 1) for node in range(nnodes)), default=0)


def parent(nnodes: int, node: int, tree: int) -> int:
    """``node``'s parent in tree ``tree`` (0 or 1) of ``ncclGetDtree`` (-1: the root)."""
    if tree == 0:
        return btree(nnodes, node)[0]
    if nnodes % 2:  # odd: the first tree shifted by one node
        up = btree(nnodes, (node - 1) % nnodes)[0]
        return -1 if up < 0 else (up + 1) % nnodes
    up = btree(nnodes, nnodes - 1 - node)[0]  # even: mirrored
    return -1 if up < 0 else nnodes - 1 - up


def inner_children(nnodes: int) -> int:
    """The most children a node other than the root has, in either tree (at most 2; the root of
    either tree has one child)."""
    return max((len(btree(nnodes, node)[1]) for node in range(1, nnodes)), default=0)
