"""NCCL's example tuner plugin's reading of its CSV (``plugins/tuner/example/plugin.c``), in Python.

The real plugin is checked by ``benchmarks/tuner_plugin_check.py`` (it needs an NCCL checkout);
the tests read exported files back with these two functions.
"""

from __future__ import annotations

PLUGIN_COLLS = {"broadcast", "reduce", "allgather", "reducescatter", "allreduce"}
PLUGIN_ALGOS = {"tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"}
PLUGIN_PROTOS = {"ll", "ll128", "simple"}


def plugin_load(text: str) -> list[dict]:
    """The example plugin's loadConfig: fgets of 256 bytes, '#' or empty lines skipped, strtok on ',',
    tokens trimmed of spaces/tabs, 8 to 10 fields a rule. Unknown names would silently default, so
    this reader refuses them instead."""
    rules = []
    for raw in text.splitlines(keepends=True):
        assert len(raw) < 256, "fgets would split this line"
        if raw[0] in "#\n":
            continue
        tokens = [t.strip(" \t") for t in raw.rstrip("\n").split(",") if t != ""]
        if not 8 <= len(tokens) <= 10:
            continue
        assert tokens[0] in PLUGIN_COLLS and tokens[3] in PLUGIN_ALGOS and tokens[4] in PLUGIN_PROTOS, raw
        tokens += ["-1"] * (10 - len(tokens))
        rules.append({"coll": tokens[0], "min": int(tokens[1]), "max": int(tokens[2]), "algo": tokens[3],
                      "proto": tokens[4], "channels": int(tokens[5]), "nodes": int(tokens[6]),
                      "ranks": int(tokens[7]), "pipe": int(tokens[8]), "reg": int(tokens[9])})
    return rules


def plugin_choose(rules, coll, nbytes, nnodes, nranks):
    """pluginGetCollInfo: the first matching rule wins; without one the plugin sets 1 channel."""
    for r in rules:
        if (r["coll"] == coll and r["min"] <= nbytes <= r["max"] and r["nodes"] in (-1, nnodes)
                and r["ranks"] in (-1, nranks) and r["pipe"] == -1 and r["reg"] == -1):
            return r["algo"], r["proto"], r["channels"]
    return None, None, 1
