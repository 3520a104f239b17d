#!/usr/bin/env python3
"""timeline-overlap.py TRACE.json - how much gradient averaging was hidden
behind forward/backward, read from a hora timeline (train.timeline /
HORA_TIMELINE; Chrome trace format).

Per rank: the share of the `allreduce` spans' time (communication thread)
that lies inside the same rank's `forward_backward` spans (training thread),
and the time the training thread spent in `wait`. Prints one line per rank
and the total."""
import json
import sys


def main(path):
    ev = json.load(open(path))["traceEvents"]
    ranks = sorted({e["pid"] for e in ev if e.get("ph") == "X"})
    tot_ar = tot_hidden = tot_wait = tot_fb = 0.0
    for r in ranks:
        fb = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev
                    if e.get("ph") == "X" and e["pid"] == r and e["name"] == "forward_backward")
        ar = [(e["ts"], e["ts"] + e["dur"]) for e in ev
              if e.get("ph") == "X" and e["pid"] == r and e["name"] == "allreduce"]
        wait = sum(e["dur"] for e in ev if e.get("ph") == "X" and e["pid"] == r and e["name"] == "wait")
        hidden = 0.0
        j = 0
        for s, t in sorted(ar):
            while j < len(fb) and fb[j][1] < s:
                j += 1
            k = j
            while k < len(fb) and fb[k][0] < t:
                hidden += max(0.0, min(t, fb[k][1]) - max(s, fb[k][0]))
                k += 1
        busy = sum(t - s for s, t in ar)
        fbt = sum(t - s for s, t in fb)
        print(f"rank {r}: {len(ar)} allreduce spans, {busy / 1e3:.1f} ms, {hidden / 1e3:.1f} ms "
              f"({100 * hidden / busy if busy else 0:.0f} %) inside forward/backward "
              f"({fbt / 1e3:.1f} ms); the step waited {wait / 1e3:.1f} ms")
        tot_ar += busy
        tot_hidden += hidden
        tot_wait += wait
        tot_fb += fbt
    print(f"all ranks: {100 * tot_hidden / tot_ar if tot_ar else 0:.1f} % of the allreduce time hidden "
          f"behind forward/backward; waiting {tot_wait / 1e3:.1f} ms vs computing {tot_fb / 1e3:.1f} ms")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
