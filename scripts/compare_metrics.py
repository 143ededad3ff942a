"""Compare two metrics.jsonl files: every key but time, timing/* and throughput/* must be equal (exact).

    python scripts/compare_metrics.py BEFORE/metrics.jsonl AFTER/metrics.jsonl   # exit 1 on any difference
"""
import json
import sys


def rows(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def ignored(key):
    return key == "time" or key.startswith("timing/") or key.startswith("throughput/")


a, b = rows(sys.argv[1]), rows(sys.argv[2])
bad = []
if len(a) != len(b):
    bad.append(f"row count {len(a)} != {len(b)}")
for i, (x, y) in enumerate(zip(a, b)):
    kx = {k for k in x if not ignored(k)}
    ky = {k for k in y if not ignored(k)}
    if kx != ky:
        bad.append(f"row {i}: keys differ: only before {sorted(kx - ky)}, only after {sorted(ky - kx)}")
    for k in sorted(kx & ky):
        if x[k] != y[k]:
            bad.append(f"row {i} step {x.get('step')}: {k}: {x[k]!r} != {y[k]!r}")
compared = sum(len([k for k in x if not ignored(k)]) for x in a)
print(f"{len(a)} rows, {compared} values compared, {len(bad)} differences")
for line in bad:
    print("  " + line)
sys.exit(1 if bad else 0)
