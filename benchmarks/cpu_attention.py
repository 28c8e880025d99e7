"""The CPU attention ops of one forward pass, this checkout against a git revision's, in one run.

    OMP_NUM_THREADS=1 python benchmarks/cpu_attention.py --base 91c2f4b
    python benchmarks/cpu_attention.py --base HEAD~1 --batch 4 --layers 4

Times ``decode_attention_cpu`` (a decode step) and ``extend_attention_cpu`` (a verify pass of ``--rows`` rows a
request, causal as CPU verify is for chains) over ``--layers`` layers, each with its own KV cache, as one forward
pass calls them: ``--batch`` requests of 60-140 context tokens, the deep cycle pair's heads (4 query, 2 KV, 16
dims). The base revision's ``sglang_faser/kernels/cpu/attention.py`` is loaded from git beside this checkout's,
outputs are checked equal, and the two alternate over ``--repeats`` rounds (medians reported; this shared machine
moves 10-25 % between runs, so only same-run ratios mean much). Writes ``benchmarks/results/cpu_attention.{json,md}``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"
HEADS, KV_HEADS, DIM, SLOTS = 4, 2, 16, 8192


def load_base(base: str):
    """The attention module of ``base`` (a git revision, or a file), imported under its own name; and its name."""
    if Path(base).is_file():
        path = Path(base)
    else:
        source = subprocess.run(["git", "show", f"{base}:sglang_faser/kernels/cpu/attention.py"], cwd=ROOT,
                                check=True, capture_output=True, text=True).stdout
        path = Path(tempfile.mkdtemp()) / "attention_base.py"
        path.write_text(source)
        base = subprocess.run(["git", "rev-parse", "--short", base], cwd=ROOT, check=True, capture_output=True,
                              text=True).stdout.strip()
    spec = importlib.util.spec_from_file_location("attention_base", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, base


def forward_pass(args):
    """(decode(module), verify(module)): one forward pass's attention calls, each returning its last output."""
    gen = torch.Generator().manual_seed(0)
    caches = [(torch.randn(SLOTS, KV_HEADS, DIM, generator=gen), torch.randn(SLOTS, KV_HEADS, DIM, generator=gen))
              for _ in range(args.layers)]
    table = torch.stack([torch.randperm(SLOTS, generator=gen)[:256] for _ in range(args.batch)]).to(torch.int32)
    pools = torch.arange(args.batch)
    lens = torch.randint(60, 140, (args.batch,), generator=gen)
    q_decode = torch.randn(args.batch, HEADS, DIM, generator=gen)
    q_verify = torch.randn(args.batch * args.rows, HEADS, DIM, generator=gen)
    ext = torch.full((args.batch,), args.rows)
    starts = torch.arange(0, args.batch * args.rows, args.rows)
    scale = DIM ** -0.5

    def decode(module):
        out = torch.empty(args.batch, HEADS, DIM)
        for k, v in caches:
            module.decode_attention_cpu(q_decode, k, v, 1.0, 1.0, out, None, None, torch.zeros(args.batch), None,
                                        table, pools, lens, scale, 0.0, False, 0, None, None)
        return out

    def verify(module):
        out = torch.empty(args.batch * args.rows, HEADS, DIM)
        for k, v in caches:
            module.extend_attention_cpu(q_verify, None, None, out, k, v, 1.0, 1.0, table, pools, lens + args.rows,
                                        ext, starts, args.rows, scale, 0.0, False, 0, None, None, None, True)
        return out
    return decode, verify


def timed(fn, module, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(module)
    return (time.perf_counter() - start) / calls * 1000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the git revision (or an attention.py file) to compare this "
                        "checkout's kernels with")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rows", type=int, default=6, help="verify rows a request (drafts + 1)")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=30, help="forward passes timed per repeat")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    from sglang_faser.kernels.cpu import attention as new
    base, revision = load_base(args.base)
    rows = {}
    for name, fn in zip(("decode", "verify"), forward_pass(args)):
        torch.testing.assert_close(fn(new), fn(base), atol=1e-5, rtol=1e-5)
        times = {"new": [], "base": []}
        for repeat in range(args.repeats):
            for key, module in (("new", new), ("base", base)) if repeat % 2 == 0 else (("base", base), ("new", new)):
                times[key].append(timed(fn, module, args.calls))
        rows[name] = {key: round(statistics.median(ms), 3) for key, ms in times.items()}
        rows[name]["new / base"] = round(rows[name]["new"] / rows[name]["base"], 3)
        print(f"{name}: new {rows[name]['new']:.2f} ms, base {rows[name]['base']:.2f} ms a pass "
              f"({rows[name]['new / base']:.2f}x)", flush=True)
    meta = {"base": revision, **{k: getattr(args, k) for k in ("batch", "rows", "layers", "repeats", "calls")},
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"), "torch_threads": torch.get_num_threads()}
    stem = RESULTS / f"cpu_attention{'_' + args.tag if args.tag else ''}"
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "ms_per_pass": rows}, indent=2) + "\n")
    lines = [f"# CPU attention, one forward pass: this checkout against {revision}", "", f"`{json.dumps(meta)}`", "",
             "| pass | new ms | base ms | new / base |", "|---|---|---|---|"]
    lines += [f"| {name} | {r['new']} | {r['base']} | {r['new / base']}x |" for name, r in rows.items()]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
