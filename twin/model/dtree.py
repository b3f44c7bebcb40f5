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
