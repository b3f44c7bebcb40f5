"""Do ccltwin's own ABI declarations (live/plugin/abi.h) lay NCCL's plugin structs out as NCCL does?

Compiles, with the C compiler, one file that includes both abi.h and the plugin headers an NCCL
checkout ships for plugin authors (``plugins/{profiler,tuner}/example/nccl`` from 2.29.7,
``ext-profiler``/``ext-tuner`` before), and asserts at compile time that every field the plugin reads
or NCCL calls sits at the same offset, with the same size where it matters, and that the constants
agree.  Prints one row per struct checked; exits 1 on any difference (the compiler's message names
the field), 2 on bad input.  Needs no GPU and no network (give it a checkout at the tag to check).

    python benchmarks/plugin_abi_check.py --nccl-src ~/src/nccl
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from live.plugin.build import SOURCE_DIR, PluginBuildError, find_compiler

PROFILER_FIELDS = ["type", "parentObj", "rank", "coll.seqNumber", "coll.func", "coll.count", "coll.datatype",
                   "coll.nChannels", "coll.nWarps", "coll.algo", "coll.proto", "kernelCh.channelId", "kernelCh.pTimer"]
PROFILER_CALLS = ["init", "startEvent", "stopEvent", "recordEventState", "finalize"]
TUNER_CALLS = {4: ["init", "getCollInfo", "destroy"], 5: ["init", "getCollInfo", "finalize"],
               6: ["init", "getCollInfo", "finalize", "getChunkSize"]}


def fork_dir(src: Path, kind: str) -> Path | None:
    for rel in (f"plugins/{kind}/example/nccl", f"ext-{kind}/example/nccl"):
        if (src / rel).is_dir():
            return src / rel
    return None


def declared(directory: Path, pattern: str) -> set[int]:
    text = "".join(p.read_text() for p in directory.glob("*.h"))
    return {int(v) for v in re.findall(pattern, text)}


def checks(profiler: Path, tuner: Path) -> tuple[dict[str, list[str]], list[str]]:
    """(C static assertions for the profiler headers and for the tuner's, a description per struct)."""
    parts: dict[str, list[str]] = {"profiler": [], "tuner": []}
    rows: list[str] = []

    def same(part: str, ours: str, theirs: str, fields: list[str], what: str) -> None:
        parts[part] += [f"_Static_assert(offsetof({theirs}, {f}) == offsetof({ours}, {f}), "
                        f"\"{theirs}.{f}: offset differs\");" for f in fields]
        rows.append(f"{theirs:34s} {len(fields):2d} {what} at NCCL's offsets")

    def size(part: str, ours: str, theirs: str) -> None:
        parts[part].append(f"_Static_assert(sizeof({theirs}) == sizeof({ours}), \"{theirs}: size differs\");")

    for v in sorted(declared(profiler, r"ncclProfilerEventDescr_v(\d)_t") & {4, 5, 6}):
        fields = PROFILER_FIELDS + (["coll.parentGroup"] if v >= 5 else [])
        same("profiler", f"ct_prof_descr_v{v}_t", f"ncclProfilerEventDescr_v{v}_t", fields, "fields")
        size("profiler", f"((ct_prof_descr_v{v}_t*)0)->type", f"((ncclProfilerEventDescr_v{v}_t*)0)->type")
        same("profiler", f"ct_profiler_v{v}_t", f"ncclProfiler_v{v}_t", ["name", *PROFILER_CALLS], "entries")
        size("profiler", f"ct_profiler_v{v}_t", f"ncclProfiler_v{v}_t")
        same("profiler", "ct_prof_state_args_t", f"ncclProfilerEventStateArgs_v{v}_t", ["kernelCh.pTimer"], "field")
    parts["profiler"] += [f"_Static_assert({theirs} == {ours}, \"{theirs}\");" for theirs, ours in (
        ("ncclProfileColl", "CT_PROFILE_COLL"), ("ncclProfileKernelCh", "CT_PROFILE_KERNEL_CH"),
        ("ncclProfilerKernelChStop", "CT_PROFILER_KERNEL_CH_STOP"))]
    for v in sorted(declared(tuner, r"ncclTuner_v(\d)_t") & set(TUNER_CALLS)):
        same("tuner", f"ct_tuner_v{v}_t", f"ncclTuner_v{v}_t", ["name", *TUNER_CALLS[v]], "entries")
        size("tuner", f"ct_tuner_v{v}_t", f"ncclTuner_v{v}_t")
    if declared(tuner, r"ncclNvlDomainInfo_v(\d)_t"):
        same("tuner", "ct_nvl_domain_info_v5_t", "ncclNvlDomainInfo_v5_t", ["maxRanksPerNvlDomain"], "field")
    return parts, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nccl-src", type=Path, required=True, help="an NCCL source checkout")
    args = parser.parse_args()
    src = args.nccl_src.expanduser()
    profiler, tuner = fork_dir(src, "profiler"), fork_dir(src, "tuner")
    if not profiler or not tuner:
        parser.error(f"{src}: no plugins/{{profiler,tuner}}/example/nccl nor ext-{{profiler,tuner}}/example/nccl")
    try:
        cc = find_compiler()
    except PluginBuildError as e:
        parser.error(str(e))
    parts, rows = checks(profiler, tuner)
    with tempfile.TemporaryDirectory() as tmp:
        results = []
        for part, directory, header in (("profiler", profiler, "profiler.h"), ("tuner", tuner, "tuner.h")):
            check = Path(tmp) / f"{part}.c"
            check.write_text("#include <stddef.h>\n#include <stdint.h>\n#include <sys/types.h>\n"
                             + ("#include \"err.h\"\n" if (directory / "err.h").exists() else "")
                             + f"#include \"{header}\"\n#include \"abi.h\"\n" + "\n".join(parts[part]) + "\n")
            results.append(subprocess.run([cc, "-std=gnu11", "-fsyntax-only", f"-I{directory}", f"-I{SOURCE_DIR}",
                                           str(check)], capture_output=True, text=True, check=False))
    print(f"# live/plugin/abi.h against {src} ({profiler.relative_to(src)}, {tuner.relative_to(src)})")
    for row in rows:
        print(row)
    failed = [r for r in results if r.returncode]
    for r in failed:
        print(r.stderr, file=sys.stderr)
    print("layouts differ" if failed else "all layouts match")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
