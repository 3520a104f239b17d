#!/usr/bin/python3
"""freeze_trial.py - one freeze-and-resume trial of an elastic job, with
real processes: `hora launch` of 4 MNIST MLP workers (train.elastic on,
min_workers 2, default membership timings), one of them stopped with
SIGSTOP when its step log reaches a step, resumed with SIGCONT FREEZE
seconds later. Used by tests/integration/test_freeze.sh (which asserts)
and bench/elastic.py (which counts).

  freeze_trial.py --hora H --data D --tmp DIR --victim G --freeze S
                  [--netns TAG] [--port P] [--at-step N] [--epochs E]

--netns TAG: the 4 workers on namespace hosts TAG-1..TAG-4 made by
deploy/netns-cluster.sh (10.213.8.1-4, one worker each); else one host
(127.0.0.1, shared memory among the workers). Prints one JSON object:
  rc, output (the launch's lines), crcs {worker: crc32}, views (the
  view-change lines), t_stop/t_cont (CLOCK_REALTIME ns), and from the step
  logs (HORA_TEST_STEP_LOG, "wallclock_ns step view" per step):
  stall_s      the longest gap between two steps of any other worker
               that overlaps the freeze (the survivors' stall)
  recovery_s   SIGSTOP -> the end of the first step of a view > 1 of the
               slowest other worker (null: no view change)
  wake_stall_s the longest gap between two steps of any other worker that
               begins after that first step (null: none; what the woken
               worker's return costs the others)
  victim_views the views the victim trained in
  end_after_cont_s  SIGCONT -> the launcher's exit
--until-end: the SIGCONT waits until every other worker has exited (the
job ended while the victim was frozen).
"""
import argparse, json, os, re, signal, subprocess, sys, time

CRC = re.compile(r"worker (\d+): final parameters crc32 ([0-9a-f]+)")
VIEWLINE = re.compile(r"^\[(\d+) [^]]*\] (view \d+: .*)$", re.M)


def cluster(a, path):
    if a.netns:
        nodes = "\n".join(f"    - {{host: 10.213.8.{i}, netns: {a.netns}-{i}, workers: 1}}" for i in range(1, 5))
        launcher, seed = "netns", "10.213.8.1"
    else:
        nodes = "    - {host: 127.0.0.1, workers: 4}"
        launcher, seed = "local", "127.0.0.1"
    with open(path, "w") as f:
        f.write(f"""cluster:
  name: freeze
  launcher: {launcher}
  port_base: {a.port}
  seeds: ["{seed}:{a.port + 1}"]
  nodes:
{nodes}
membership:
  probe_interval_ms: 200
  suspect_timeout_ms: 1000
train:
  model: mnist_mlp
  data: {a.data}
  epochs: {a.epochs}
  batch_size: 32
  seed: 7
  optimizer: {{name: sgd, lr: 0.1, warmup_epochs: 1}}
  elastic: {{min_workers: 2}}
""")


def children(ppid):
    """{worker index: pid} of `hora worker --proc G` processes under ppid
    (the netns launcher's children are `ip netns exec`, which execs)"""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
            if int(st[st.rindex(")") + 2:].split()[1]) != ppid:
                continue
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if b"--proc" in argv and b"worker" in argv:
                out[int(argv[argv.index(b"--proc") + 1])] = int(d)
        except (OSError, ValueError, IndexError):
            pass
    return out


def steps(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) == 3:
                    rows.append((int(p[0]), int(p[1]), int(p[2])))
    except (OSError, ValueError):
        pass
    return rows


def last_step(path):
    r = steps(path)
    return r[-1][1] if r else 0


def measure(rec, logs, victim, t_stop, t_cont):
    others = [steps(p) for g, p in logs.items() if g != victim]
    rec["victim_views"] = sorted({v for _, _, v in steps(logs[victim])})
    stall = 0
    for s in others:
        for (t0, _, _), (t1, _, _) in zip(s, s[1:]):
            if t1 > t_stop and t0 < t_cont:
                stall = max(stall, t1 - t0)
    rec["stall_s"] = round(stall / 1e9, 3)
    v0 = min((v for s in others for _, _, v in s), default=1)  # the job's first view
    firsts = [next((t for t, _, v in s if v > v0), None) for s in others]
    if all(firsts):
        first = max(firsts)
        rec["recovery_s"] = round((first - t_stop) / 1e9, 3)
        wake = 0
        for s in others:
            for (t0, _, _), (t1, _, _) in zip(s, s[1:]):
                if t0 >= first:
                    wake = max(wake, t1 - t0)
        rec["wake_stall_s"] = round(wake / 1e9, 3)
    else:
        rec["recovery_s"] = rec["wake_stall_s"] = None


def stop_all(p):
    """every worker of launcher p (a stopped one resumed first, so that it
    dies) and the launcher's session"""
    for w in children(p.pid).values():
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(w, sig)
            except ProcessLookupError:
                pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def trial(a, p, logs, rec):
    """wait until the victim trains, freeze it, resume it, wait for the end"""
    deadline, pids = time.time() + 60, {}
    while time.time() < deadline and p.poll() is None:
        pids = children(p.pid)
        if len(pids) == 4 and last_step(logs[a.victim]) >= a.at_step:
            break
        time.sleep(0.005)
    if a.victim in pids and p.poll() is None:
        rec["t_stop"] = time.time_ns()
        os.kill(pids[a.victim], signal.SIGSTOP)
        time.sleep(a.freeze)
        while a.until_end and any(os.path.exists(f"/proc/{q}") for g, q in pids.items() if g != a.victim):
            time.sleep(0.01)  # the job ends while the victim is frozen
        rec["t_cont"] = time.time_ns()
        try:
            os.kill(pids[a.victim], signal.SIGCONT)
        except ProcessLookupError:  # the launcher killed it (the job had ended long before)
            rec["gone_before_cont"] = True
    try:
        rec["rc"] = p.wait(timeout=a.timeout)
        if rec.get("t_cont"):
            rec["end_after_cont_s"] = round((time.time_ns() - rec["t_cont"]) / 1e9, 3)
    except subprocess.TimeoutExpired:
        stop_all(p)
        rec["rc"] = "timeout"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hora", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--victim", type=int, required=True)
    ap.add_argument("--freeze", type=float, required=True)
    ap.add_argument("--netns", default="")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--at-step", type=int, default=150)
    ap.add_argument("--epochs", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=240)
    ap.add_argument("--until-end", action="store_true",
                    help="resume only once every other worker has exited (the job ended meanwhile)")
    a = ap.parse_args()
    if not a.port:
        a.port = 20000 + (os.getpid() * 10) % 12000
    if not a.epochs:  # about 11 epochs a second here (4 workers): the job outlasts the freeze
        a.epochs = int(20 * (a.freeze + 4))
    os.makedirs(a.tmp, exist_ok=True)
    cfg = os.path.join(a.tmp, "c.yaml")
    cluster(a, cfg)
    logs = {g: os.path.join(a.tmp, f"st.{g}") for g in range(4)}
    for p in logs.values():
        if os.path.exists(p):
            os.unlink(p)
    env = dict(os.environ, HORA_TEST_STEP_LOG=os.path.join(a.tmp, "st"))
    out_path = os.path.join(a.tmp, "out.txt")
    rec = {"victim": a.victim, "freeze_s": a.freeze, "netns": bool(a.netns), "t_stop": None}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a test's timeout: the finally below
    with open(out_path, "w") as out:
        p = subprocess.Popen([a.hora, "launch", cfg], stdout=out, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        try:
            trial(a, p, logs, rec)
        finally:
            if p.poll() is None:  # interrupted: nothing it started is left, stopped or not
                stop_all(p)
    text = open(out_path, errors="replace").read()
    rec["output"] = text
    rec["crcs"] = {int(m.group(1)): m.group(2) for m in CRC.finditer(text)}
    rec["views"] = [f"[{m.group(1)}] {m.group(2)}" for m in VIEWLINE.finditer(text)]
    if rec["t_stop"]:
        measure(rec, logs, a.victim, rec["t_stop"], rec["t_cont"])
    json.dump(rec, sys.stdout)
    print()


if __name__ == "__main__":
    main()
