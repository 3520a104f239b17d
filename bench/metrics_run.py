"""metrics_run.py - what the gossip benches read from one run's metrics JSONL
(train.metrics, one line an epoch): imported by bench/gossip.sh and
bench/gossip-link.sh.

run(path, target) -> (seconds to val_acc >= target or None, final val_acc,
samples/s): the seconds are the epochs' wall times (rank 0's `seconds`, its
evaluation included) summed up to the first epoch at or above target; the
samples/s the median over epochs 2.. (over all of them for a run of one).
"""
import json
import statistics


def run(path, target):
    rows = [json.loads(line) for line in open(path)]
    t, to = 0.0, None
    for r in rows:
        t += r["seconds"]
        if to is None and r["val_acc"] is not None and r["val_acc"] >= target:
            to = t
    return to, rows[-1]["val_acc"], statistics.median(r["samples_per_s"] for r in rows[1:] or rows)
