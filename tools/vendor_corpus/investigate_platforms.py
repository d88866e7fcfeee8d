"""Compare the same model compiled for several target platforms (header, Model fields,
tensor NPU shapes, weight tiling, bias sizes, regcmd/task counts, register targets).

    python tools/vendor_corpus/investigate_platforms.py FILE...
"""

from __future__ import annotations

import os
import struct
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from rkdump import TARGETS, RknnFile  # noqa: E402


def describe(path: str) -> None:
    f = RknnFile(path)
    r = f.root
    version, = struct.unpack_from("<Q", f.data, 8)
    print(f"== {os.path.basename(path)}: size {len(f.data)} version {version} "
          f"header-tail-zero {f.data[0x18:0x40] == bytes(40)}")
    print(f"   Target {r.string(1)!r} platform {r.string(8)!r} compiler {r.i32(6)} slots {r.num_slots} "
          f"subgraphs {len(f.subgraphs)} buffers {len(f.buffers)}")
    slot19 = r.table(19)
    if slot19 is not None:
        print("   Model[19] u64s:", [slot19.u64(s) for s in range(slot19.num_slots) if slot19.has(s)])
    for t in f.tensors():
        if t.kind in (1, 2, 3, 4, 8):
            print(f"   {t.name:18s} kind {t.kind} dtype {t.dtype} layout {t.layout} npu {list(t.npu_shape)} "
                  f"size {t.size} buflen {len(f.tensor_data(t))}")
    tasks = f.tasks()
    cmds = f.regcmd()
    tg = Counter(int(c) >> 48 for c in cmds)
    print(f"   regcmd {len(cmds)} entries, tasks {len(tasks)}, op_idx {sorted(Counter(t.op_idx for t in tasks).items())}")
    print(f"   enable masks {sorted(Counter(t.enable_mask for t in tasks).items())} "
          f"int_mask {sorted(Counter(t.int_mask for t in tasks).items())}")
    print("   targets", {TARGETS.get(k, hex(k)): v for k, v in sorted(tg.items())})


if __name__ == "__main__":
    for p in sys.argv[1:]:
        describe(p)
