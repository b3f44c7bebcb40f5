"""aws-ofi-nccl's tuner: the algorithm and protocol NCCL takes from the EFA net plugin.

NCCL ≥ 2.21.5 loads a tuner from the net plugin when ``NCCL_TUNER_PLUGIN`` names none and no
``libnccl-tuner.so`` is found (``src/misc/tuner.cc`` @ v2.21.5-1: ``libnccl-net.so``'s
``ncclTunerPlugin_v2``; 2.19 and 2.20 load one only from ``NCCL_TUNER_PLUGIN``, by a v1 symbol the
plugin does not export).  On EFA that library is aws-ofi-nccl, whose tuner
(``src/tuner/nccl_ofi_tuner.cpp`` @ v1.21.1) runs only on an AWS platform it knows by its EC2
product name (``include/tuner/nccl_ofi_tuner_process_config.h``: p5.48xlarge and p5e.48xlarge share
one table, p5en.48xlarge has its own, p6-b200/p6-b300 theirs; p4d and every other instance keep
NCCL's choice) and not under ``OFI_NCCL_TUNER_TYPE=Internal`` or ``OFI_NCCL_FORCE_NUM_RAILS``.
Where both its region and its model tuner apply (the p5 family) it takes the region tuner.

The region tuner (``src/tuner/nccl_ofi_regions.cpp`` @ v1.21.1, whose tables ``_TABLES`` holds)
has, per platform, ranks per node (8, 2 or 1; any other shape keeps NCCL's choice) and collective,
polygons in the plane (log2 bytes, log2 ranks), each naming one (algorithm, protocol): a call takes
the first polygon that holds its point, a point on an edge counting as inside.  It keeps NCCL's
choice on communicators of at most two nodes ("the regions are not well defined at two nodes",
since v1.15.0) and where no polygon holds the point.  With NCCL's tuner v3 API (≥ 2.22.3) it zeroes
the region's entry of NCCL's cost table, skipping a region whose entry NCCL marks unavailable (so
``NCCL_ALGO``/``NCCL_PROTO`` still hold); with v2 (2.21) it names the pair itself, skipping PAT and,
without NVLS support, NVLS-Tree, and declines when ``NCCL_ALGO`` or ``NCCL_PROTO`` is set.  On the p5
family it leaves channels, threads and chunk to NCCL (its channel and chunk overrides are P6's, and
p5en's at one rank per node for Tree LL128 and PAT, through tuner v6; not emulated).

>>> [region_pair("p5", Op.ALLREDUCE, s, 32, 4) for s in (16 << 20, 64 << 20)] == [("tree", "ll128"), ("ring", "ll128")]
True
>>> region_pair("p5", Op.ALLREDUCE, 16 << 20, 16, 2) is None  # two nodes: NCCL's own choice
True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from traces.task import Op
from tuner.config import Algo, Proto

PLATFORMS = {"p5.48xlarge": "p5", "p5e.48xlarge": "p5", "p5en.48xlarge": "p5en"}
"""EC2 product names the tuner reads from DMI, and the region table each takes (the P6 tables are
not carried: no preset is a P6)."""
FIRST_NCCL = (2, 21, 5)
"""The first NCCL that loads a tuner from the net plugin by default (tuner v2)."""
V3_NCCL = (2, 22, 3)
"""The first NCCL with tuner v3: the plugin edits NCCL's cost table instead of naming the pair."""
MAX_SIZE = 100.0 * 1024 ** 3
MAX_RANKS = 1024.0 * 1024
"""``TUNER_MAX_SIZE`` / ``TUNER_MAX_RANKS`` (``include/tuner/nccl_ofi_tuner_region.h``): the far
corner that open regions extend to."""
_EPS = 1e-10


@dataclass(frozen=True)
class Region:
    """One polygon of the region tuner: the pair it names and its vertices (log2 bytes, log2 ranks)."""

    algo: Algo
    proto: Proto
    vertices: tuple[tuple[float, float], ...]

    def holds(self, x: float, y: float) -> bool:
        """Whether (``x``, ``y``) (log2 bytes, log2 ranks) is inside or on an edge (the plugin's
        ray casting: ``is_inside_region``)."""
        edges = list(zip(self.vertices, self.vertices[1:] + self.vertices[:1], strict=True))
        if any(_on_segment(x, y, p, q) for p, q in edges):
            return True
        xs, ys = [v[0] for v in self.vertices], [v[1] for v in self.vertices]
        if not (min(xs) <= x <= max(xs) and min(ys) <= y <= max(ys)):
            return False
        far = (math.log2(2 * MAX_SIZE), math.log2(2 * MAX_RANKS))
        return sum(_crosses((x, y), far, p, q) for p, q in edges) % 2 == 1


def region_pair(platform: str, op: Op, nbytes: int, nranks: int, nnodes: int,
                usable: Callable[[Algo, Proto], bool] = lambda a, p: True) -> tuple[Algo, Proto] | None:
    """The (algorithm, protocol) the region tuner of ``platform`` (a ``PLATFORMS`` value) names
    for ``op`` of ``nbytes`` on ``nranks`` over ``nnodes``, or None where it keeps NCCL's choice;
    ``usable`` says which pairs NCCL offers it (a region naming another is passed over)."""
    if nnodes <= 2 or nranks % nnodes:
        return None
    x, y = _log2(float(nbytes)), _log2(float(nranks))
    for region in regions(platform, nranks // nnodes, op):
        if usable(region.algo, region.proto) and region.holds(x, y):
            return region.algo, region.proto
    return None


def regions(platform: str, per_node: int, op: Op) -> tuple[Region, ...]:
    """The polygons of ``platform`` at ``per_node`` ranks per node for ``op``, in the plugin's order
    (empty where it has none)."""
    key = (platform, per_node, op)
    if key not in _REGIONS:
        _REGIONS[key] = _build(*_TABLES[key]) if key in _TABLES else ()
    return _REGIONS[key]


def _log2(v: float) -> float:
    return math.log2(v if v > 0 else 1e-6)  # the plugin's 0 → 1e-6 before log2


def _extend(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    """``extend_region``: the point where the line through ``a`` and ``b`` (log2 coordinates)
    leaves the box below the far corner (``MAX_SIZE``, ``MAX_RANKS``)."""
    zx, zy = _log2(MAX_SIZE), _log2(MAX_RANKS)
    if a[0] == b[0]:
        return a[0], zy
    if a[1] == b[1]:
        return zx, a[1]
    slope = (a[1] - b[1]) / (a[0] - b[0])
    offset = b[1] - slope * b[0]
    at_zx = slope * zx + offset
    return (zx, at_zx) if at_zx < zy else ((zy - offset) / slope, zy)


def _build(extended: dict, table: tuple) -> tuple[Region, ...]:
    ends = {name: _extend((_log2(c[0]), _log2(c[1])), (_log2(c[2]), _log2(c[3])))
            for name, c in extended.items()}

    def coord(v) -> float:
        if isinstance(v, str):
            name, _, which = v.partition(".")
            return ends[name]["xy".index(which)]
        return _log2(float(v))

    def point(v) -> tuple[float, float]:
        return ends[v] if isinstance(v, str) else (coord(v[0]), coord(v[1]))

    return tuple(Region(Algo(algo), Proto(proto), tuple(point(v) for v in vertices))
                 for algo, proto, vertices in table)


def _on_segment(x: float, y: float, p: tuple[float, float], q: tuple[float, float]) -> bool:
    """Within ``_EPS`` of segment p–q, measured square to it (a degenerate segment holds nothing)."""
    dx, dy = q[0] - p[0], q[1] - p[1]
    length2 = dx * dx + dy * dy
    if length2 < _EPS:
        return False
    t = ((x - p[0]) * dx + (y - p[1]) * dy) / length2
    if not -_EPS <= t <= 1 + _EPS:
        return False
    return math.hypot(x - p[0] - t * dx, y - p[1] - t * dy) < _EPS


def _crosses(a: tuple[float, float], b: tuple[float, float], p: tuple[float, float], q: tuple[float, float]) -> bool:
    """Whether ray segment a–b crosses edge p–q strictly inside the edge (a crossing within
    ``_EPS`` of a vertex does not count, as in the plugin's ``intersect``)."""
    rx, ry, ex, ey = b[0] - a[0], b[1] - a[1], q[0] - p[0], q[1] - p[1]
    denom = ex * ry - ey * rx
    if abs(denom) < _EPS:
        return False
    along_edge = ((a[0] - p[0]) * ry - (a[1] - p[1]) * rx) / denom
    along_ray = ((a[0] - p[0]) * ey - (a[1] - p[1]) * ex) / denom
    return _EPS <= along_edge <= 1 - _EPS and 0 <= along_ray <= 1


_REGIONS: dict[tuple[str, int, Op], tuple[Region, ...]] = {}
_TABLES: dict[tuple[str, int, Op], tuple[dict, tuple]] = {
    # (platform, ranks per node, op): ({extended point: (a.x, a.y, b.x, b.y)}, ((algo, proto, vertices), ...)),
    # from region_init_internal_p5_p5e / region_init_internal_p5en of src/tuner/nccl_ofi_regions.cpp
    # @ v1.21.1; a vertex "name" is extend_region(a, b, (MAX_SIZE, MAX_RANKS)), "name.x" its x.
    ("p5", 8, Op.ALLREDUCE): (
        {'tree_ll128': (402653184, 2048, 402653184, 4096), 'nvlstree_simple_1': (8053063680, 160, 9663676416, 192),
         'nvlstree_simple_2': (402653184, 2048, 402653184, 4096), 'ring_simple': (8053063680, 160, 9663676416, 192)},
        (
            ("tree", "ll128", ((0, 16), (31457280, 16), (37748736, 32), (117440512, 64), (301989888, 128),
                               (301989888, 256), (335544320, 512), (536870912, 1024), (402653184, 2048),
                               (402653184, 4096), 'tree_ll128', (0, 'tree_ll128.y'))),
            ("nvls_tree", "simple", ((31457281, 16), (MAX_SIZE, 16), (31457281, 16))),
            ("ring", "ll128", ((31457280, 17), (1073741824, 17), (2147483648, 64), (2147483648, 128),
                               (1342177280, 160), (2147483648, 256), (1074790400, 256), (444596224, 160),
                               (301989888, 128), (117440512, 64), (37748736, 32))),
            ("nvls_tree", "simple", ((2147483648, 128), (6442450944, 128), (8053063680, 160), (9663676416, 192),
                                     'nvlstree_simple_1', 'nvlstree_simple_2', (402653184, 4096), (402653184, 2048),
                                     (536870912, 1024), (335544320, 512), (301989888, 256), (310378496, 160),
                                     (444596224, 160), (1074790400, 256), (2684354560, 256), (2147483648, 224),
                                     (1342177280, 160))),
            ("ring", "simple", ((1073741824, 17), ('ring_simple.x', 17), 'ring_simple', (9663676416, 192),
                                (8053063680, 160), (2684354560, 64), (1610612736, 32))),
        )),
    ("p5", 2, Op.ALLREDUCE): (
        {'tree_ll128': (88160256, 128, 178163712, 256), 'tree_simple_1': (787480576, 128, 1073741824, 256),
         'tree_simple_2': (257114112, 128, 269484032, 256), 'nvlstree_simple': (787480576, 128, 1073741824, 256)},
        (
            ("tree", "ll128", ((0, 4), (1314816, 4), (1051648, 8), (1051648, 12), (2367488, 16), (5525504, 32),
                               (9473024, 64), (88160256, 128), (178163712, 256), 'tree_ll128', (0, 'tree_ll128.y'))),
            ("ring", "ll128", ((1314816, 4), (19736576, 4), (41842688, 8), (296747008, 64), (257114112, 128),
                               (269484032, 256), (178163712, 256), (88160256, 128), (9473024, 64), (5525504, 32),
                               (2367488, 16), (1051648, 12), (1051648, 8), (1314816, 4))),
            ("nvls_tree", "simple", ((19736576, 4), (81844224, 4), (275775488, 8), (275775488, 48), (296747008, 64),
                                     (41842688, 8))),
            ("tree", "ll128", ((81844224, 4), (269484032, 4), (81844224, 4))),
            ("tree", "simple", ((269484032, 4), (MAX_SIZE, 4), (269484032, 4))),
            ("ring", "simple", ((81844224, 5), (MAX_SIZE, 5), (MAX_SIZE, 32), (1073741824, 40), (1073741824, 128),
                                (787480576, 128), (296747008, 64), (275775488, 48), (275775488, 8), (81844224, 5))),
            ("tree", "simple", ((296747008, 64), (787480576, 128), (1073741824, 256), 'tree_simple_1',
                                'tree_simple_2', (269484032, 256), (257114112, 128))),
            ("nvls_tree", "simple", ('nvlstree_simple', (1073741824, 256), (787480576, 128), (1073741824, 128),
                                     (1073741824, 40), (MAX_SIZE, 32))),
        )),
    ("p5", 1, Op.ALLREDUCE): (
        {'tree_ll128': (9999360, 64, 119477248, 128), 'ring_ll128': (4736000, 2, 269484032, 128)},
        (
            ("tree", "ll128", ((0, 16), (2367488, 16), (9999360, 64), (119477248, 128), 'tree_ll128',
                               (0, MAX_RANKS))),
            ("ring", "ll128", ((0, 2), (4736000, 2), (269484032, 128), 'ring_ll128', 'tree_ll128', (119477248, 128),
                               (9999360, 64), (2367488, 16), (0, 16))),
            ("ring", "simple", ((4736000, 2), (MAX_SIZE, 2), 'ring_ll128', (269484032, 128))),
        )),
    ("p5", 1, Op.ALLGATHER): (
        {'ring_simple': (4194304, 2, 8589934592, 2048)},
        (
            ("ring", "simple", ((4194304, 2), (MAX_SIZE, 2), 'ring_simple', (8589934592, 2048))),
        )),
    ("p5", 1, Op.REDUCESCATTER): (
        {'ring_simple': (8388608, 2, 4294967296, 1024)},
        (
            ("ring", "simple", ((8388608, 2), (MAX_SIZE, 2), 'ring_simple', (4294967296, 1024))),
        )),
    ("p5en", 8, Op.ALLREDUCE): (
        {'tree_ll': (196608, 192, 196608, 1024), 'tree_ll128': (129499136, 127, 218103808, 1024),
         'nvlstree_simple': (7516192768, 256, 17179869184, 448)},
        (
            ("tree", "ll", ((0, 16), (196608, 16), (196608, 1024), 'tree_ll', (0, MAX_RANKS))),
            ("tree", "ll128", ('tree_ll', (196608, 1024), (196608, 16), (13107200, 16), (129499136, 127),
                               (218103808, 1024), 'tree_ll128')),
            ("ring", "ll128", ((129499136, 127), (13107200, 16), (29884416, 16), (293601280, 32), (589299712, 64),
                               (549453824, 128))),
            ("nvls_tree", "simple", ('tree_ll128', (218103808, 1024), (129499136, 127), (549453824, 128),
                                     (589299712, 64), (293601280, 32), (29884416, 16), (MAX_SIZE, 16),
                                     (509607936, 32), (7516192768, 256), (17179869184, 448), 'nvlstree_simple')),
            ("ring", "simple", ('nvlstree_simple', (17179869184, 448), (7516192768, 256), (509607936, 32),
                                (MAX_SIZE, 16))),
        )),
    ("p5en", 8, Op.ALLGATHER): (
        {'ring_ll': (28305408, 768, 33554432, 1024), 'ring_ll128': (7247754240, 384, 17179865088, 896)},
        (
            ("ring", "ll", ((0, 16), (786432, 16), (4718592, 128), (13630464, 384), (19922944, 512), (28305408, 768),
                            (33554432, 1024), 'ring_ll', (0, MAX_RANKS))),
            ("ring", "ll128", ('ring_ll', (33554432, 1024), (28305408, 768), (19922944, 512), (13630464, 384),
                               (4718592, 128), (786432, 16), (236978176, 16), (956301312, 64), (7247754240, 384),
                               (17179865088, 896), 'ring_ll128')),
            ("ring", "simple", ('ring_ll128', (17179865088, 896), (7247754240, 384), (956301312, 64), (494927872, 32),
                                (236978176, 16), (MAX_SIZE, 16))),
        )),
    ("p5en", 8, Op.REDUCESCATTER): (
        {'ring_ll': (7340032, 256, 18874368, 512), 'ring_ll128': (7247757312, 256, 17179869184, 640)},
        (
            ("ring", "ll", ((0, 16), (786432, 16), (4718592, 128), (7340032, 256), (18874368, 512), 'ring_ll',
                            (0, MAX_RANKS))),
            ("ring", "ll128", ('ring_ll', (18874368, 512), (7340032, 256), (4718592, 128), (786432, 16),
                               (291504128, 16), (589299712, 32), (2415919104, 128), (7247757312, 256),
                               (17179869184, 640), 'ring_ll128')),
            ("ring", "simple", ('ring_ll128', (17179869184, 640), (7247757312, 256), (2415919104, 128),
                                (589299712, 32), (291504128, 16), (MAX_SIZE, 16))),
        )),
    ("p5en", 1, Op.ALLREDUCE): (
        {'tree_ll128': (524288, 8, 1048576, 96), 'tree_simple': (8388608, 32, 33554432, 128),
         'ring_ll128': (50331648, 16, 301989888, 128)},
        (
            ("tree", "ll", ((0, 2), (65536, 2), (65536, 64), (65536, MAX_RANKS))),
            ("tree", "ll128", ((65536, MAX_RANKS), (65536, 64), (65536, 2), (262144, 2), (1048576, 4), (4194304, 8),
                               (16777216, 16), (33554432, 32), (1048576, 32), (1048576, 96), 'tree_ll128')),
            ("tree", "simple", ('tree_ll128', (1048576, 96), (1048577, 32), (33554431, 32), (33554432, 128),
                                'tree_simple')),
            ("ring", "ll128", ('tree_simple', (33554432, 128), (33554433, 32), (16777217, 16), (4194305, 8),
                               (1048577, 4), (262144, 2), (6291456, 2), (50331648, 16), (301989888, 128),
                               'ring_ll128')),
            ("ring", "simple", ('ring_ll128', (301989888, 128), (50331648, 16), (6291456, 2), (MAX_SIZE, 2))),
        )),
    ("p5en", 1, Op.ALLGATHER): (
        {'pat_simple': (50331648, 64, 117440512, 128), 'ring_ll128': (50331648, 16, 301989888, 128)},
        (
            ("pat", "simple", ((0, 2), (65536, 2), (1048576, 2), (8388608, 8), (16777216, 16), (16777216, 32),
                               (50331648, 64), (117440512, 128), 'pat_simple', (MAX_SIZE, MAX_RANKS),
                               (65536, MAX_RANKS), (0, MAX_RANKS))),
            ("ring", "ll128", ('pat_simple', (117440512, 128), (50331648, 64), (16777216, 32), (16777217, 16),
                               (8388609, 8), (1048576, 2), (4194304, 2), (50331648, 16), (301989888, 128),
                               'ring_ll128')),
            ("ring", "simple", ('ring_ll128', (301989888, 128), (50331648, 16), (4194304, 2), (MAX_SIZE, 2))),
        )),
    ("p5en", 1, Op.REDUCESCATTER): (
        {'pat_simple': (50331648, 64, 117440512, 128), 'ring_ll128': (50331648, 16, 301989888, 128)},
        (
            ("pat", "simple", ((0, 2), (65536, 2), (1048576, 2), (16777216, 32), (50331648, 64), (117440512, 128),
                               'pat_simple', (MAX_SIZE, MAX_RANKS), (65536, MAX_RANKS), (0, MAX_RANKS))),
            ("ring", "ll128", ('pat_simple', (117440512, 128), (50331648, 64), (16777216, 32), (1048576, 2),
                               (4194304, 2), (50331648, 16), (301989888, 128), 'ring_ll128')),
            ("ring", "simple", ('ring_ll128', (301989888, 128), (50331648, 16), (4194304, 2), (MAX_SIZE, 2))),
        )),
}
