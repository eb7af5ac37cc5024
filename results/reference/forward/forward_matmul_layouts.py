"""The matmuls of one SmolLM2-135M forward (30 layers x q/k/v fused, o, gate/up fused, down;
and the 49,152 x 576 output head), as distinct tensors like the model's, by kernel and
weight storage order: MKL (`F.linear`) on `[out, in]` and on `[in, out]` storage, oneDNN
(`torch.ops.mkldnn._linear_pointwise`) on both. Median CPU ms of this thread per pass.

    python results/reference/forward/forward_matmul_layouts.py --threads 1 --dtype float32 \
        -o results/reference/forward/matmul-layouts-float32-t1.json
"""

from __future__ import annotations

import sys

import argparse
import os
import statistics
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from bench_json import write_result  # noqa: E402

SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("-o", "--out", type=Path)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    dt = getattr(torch, args.dtype)
    rows = [torch.randn(o, i).to(dt) for _ in range(30) for o, i in SHAPES]
    head = torch.randn(49152, 576).to(dt)
    cols = [w.t().contiguous().t() for w in rows]
    head_cols = head.t().contiguous().t()
    onednn = lambda x, w: torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")  # noqa: E731
    res = {"dtype": args.dtype, "threads": args.threads, "torch": torch.__version__,
           "loadavg_before": round(os.getloadavg()[0], 2), "cpu_ms": {}}
    for q in (1, 10):
        xs = {576: torch.randn(1, q, 576).to(dt), 1536: torch.randn(1, q, 1536).to(dt)}
        cases = {"mkl [out,in]": (F.linear, rows, head), "mkl [in,out]": (F.linear, cols, head_cols),
                 "onednn [out,in]": (onednn, rows, head), "onednn [in,out]": (onednn, cols, head_cols)}
        for name, (fn, ws, h) in cases.items():
            layers, heads = [], []
            for r in range(args.repeats + 1):
                c = time.thread_time()
                for w in ws:
                    fn(xs[w.shape[1]], w)
                c1 = time.thread_time()
                fn(xs[576], h)
                if r:
                    layers.append(1000 * (c1 - c))
                    heads.append(1000 * (time.thread_time() - c1))
            res["cpu_ms"][f"q{q} {name}"] = {"layers": round(statistics.median(layers), 1),
                                            "head": round(statistics.median(heads), 2)}
    res["loadavg_after"] = round(os.getloadavg()[0], 2)
    text = write_result(res, args.out)
    print(text)


if __name__ == "__main__":
    main()
