#!/usr/bin/python3
"""The chaos bench of elastic training (issue 13, acceptance point 2), driven
by bench/elastic.sh (read that for the usage).

Every trial is a 4-worker `hora launch` of the MNIST MLP with
train.elastic on, killed with SIGKILL as the trial kind says:
  single  one random worker (each worker index, rank 0 included, equally
          often) when its step log reaches a random step
  double  the same, then a second random survivor 0.3-1 s later
  vc      the same, then a second survivor 20-300 ms later, while the
          survivors are still detecting the first loss or re-forming (2 of 4
          left: they go on only because the two are proven gone, their
          host's port unreachable; net/MEMBERSHIP.md); each trial records
          whether the second kill came before the survivors trained again
Per trial: the launcher's exit status, the final val_acc (last line of the
metrics file) against the undisturbed run of the same config and seed, the
survivors' final crc32s (all equal?), every view-change line's "rolled back
R steps", and the recovery time: kill -> the end of the first step of the
final view in the survivors' step logs (HORA_TEST_STEP_LOG: "wallclock_ns
step view" per step), the latest survivor's. The torchrun anchor: two
agents (--nnodes=1:2, c10d rendezvous) of bench/elastic_torch.py, one
agent's process group killed with SIGKILL at a random step, and the time
until the survivor's re-formed job (world 1) ends a step.

Two more kinds (issue 34, acceptance point 2):
  double0 worker 0 and a second random worker killed within 0-0.15 s of
          each other, which one first at random (rank 0 is the seed and the
          view coordinator); recovery per kill as in double, and first kill
          -> the first step of the final view as in vc
  freeze  one random worker (each index equally often) stopped with
          SIGSTOP for a uniform 0.2-5 s, then SIGCONT: one run of tests/integration/freeze_trial.py (its own
          cluster file: train.elastic min_workers 2, the same membership
          timings), which measures the others' longest stall, SIGSTOP -> their
          first step in a new view, and the stall on the wake-up; completed =
          launcher exit 0 with all 4 crc32s equal, or the documented end of a
          job that finished while the worker was frozen (the woken worker
          exits 4 alone, the other three agree)
The summary sets each kind's kill recovery against the goal median <= 0.3 s
and max <= 1.0 s, and splits the freezes at the detection time (1.4 s:
suspect_timeout 1 s + 2 probe periods).
"""
import argparse, json, os, random, re, signal, statistics, subprocess, sys, time

VIEW = re.compile(r"view (\d+): (.*) at step (\d+); (\d+) workers; rolled back (\d+) steps to the commit at "
                  r"step (\d+); lr (\S+); training again after (\S+) s")
CRC = re.compile(r"worker (\d+): final parameters crc32 ([0-9a-f]+)")
FREEZE_TRIAL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "integration",
                            "freeze_trial.py")
DETECT_S = 1.4  # suspect_timeout_ms 1000 + 2 x probe_interval_ms 200: a shorter silence is never a death
GOAL_MEDIAN_S, GOAL_MAX_S = 0.3, 1.0  # kill -> training again (issue 34, acceptance point 2)


def cluster_file(path, a, port, workers, wait_s):
    with open(path, "w") as f:
        f.write(f"""cluster:
  name: chaos
  launcher: local
  port_base: {port}
  seeds: ["127.0.0.1:{port + 1}"]
  nodes:
    - host: 127.0.0.1
      workers: {workers}
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
  elastic: {{enabled: true{', commit_steps: ' + str(a.commit_steps) if a.commit_steps else ''}{', wait_s: ' + str(wait_s) if wait_s else ''}}}
""")


def children(ppid):
    """{worker index: pid} of the launcher's `hora worker --proc G` children"""
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
            if b"--proc" in argv:
                out[int(argv[argv.index(b"--proc") + 1])] = int(d)
        except (OSError, ValueError, IndexError):
            pass
    return out


def last_step(path, col=1):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            n = f.tell()
            f.seek(max(0, n - 200))
            lines = f.read().split(b"\n")
        line = lines[-2] if len(lines) >= 2 else b""
        return int(line.split()[col]) if line else 0
    except (OSError, ValueError, IndexError):
        return 0


def steps_of(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) >= 3:  # hora's hook: 3 columns; elastic_torch.py: 4
                    rows.append((int(p[0]), int(p[1]), int(p[2])))
    except OSError:
        pass
    return rows


def trial(a, kind, idx, victim, target, delay, second=None):
    """one kill trial; second: the second victim (double0), else a random survivor"""
    workers = a.workers
    wait_s = 0
    d = os.path.join(a.tmp, f"t{idx:02d}")
    os.makedirs(d, exist_ok=True)
    port = random.randrange(20000, 32000, 10)
    cfg = os.path.join(d, "c.yaml")
    cluster_file(cfg, a, port, workers, wait_s)
    env = dict(os.environ, HORA_TEST_STEP_LOG=os.path.join(d, "st"))
    out_path = os.path.join(a.out, f"trial-{idx:02d}-{kind}.txt")
    t_start = time.time()
    with open(out_path, "w") as out:
        p = subprocess.Popen([a.hora, "launch", cfg, "--set", f"train.metrics={d}/m.jsonl"], stdout=out,
                             stderr=subprocess.STDOUT, env=env, start_new_session=True)
        kills = []
        if kind != "none":
            pids = {}
            deadline = time.time() + 30
            while time.time() < deadline and p.poll() is None:
                pids = children(p.pid)
                if len(pids) == workers and last_step(f"{d}/st.{victim}") >= target:
                    break
                time.sleep(0.002)
            if victim in pids and p.poll() is None:
                kills.append((time.time_ns(), victim))
                os.kill(pids[victim], signal.SIGKILL)
                if kind in ("double", "vc", "double0"):
                    if second is None:
                        second = random.choice([g for g in pids if g != victim])
                    if kind == "double":  # after the survivors train again in the new view
                        t_end = time.time() + a.timeout
                        while time.time() < t_end and p.poll() is None and \
                                last_step(f"{d}/st.{second}", 2) < 2:
                            time.sleep(0.002)
                    t2 = time.time() + delay
                    while time.time() < t2:
                        time.sleep(0.001)
                    kills.append((time.time_ns(), second))
                    try:
                        os.kill(pids[second], signal.SIGKILL)
                    except (ProcessLookupError, KeyError):
                        pass
        try:
            rc = p.wait(timeout=a.timeout)
        except subprocess.TimeoutExpired:
            for w in children(p.pid).values():  # each worker leads a process group of its own
                try:
                    os.killpg(w, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            os.killpg(p.pid, signal.SIGKILL)
            rc = p.wait()
            rc = f"timeout {a.timeout} s"
    wall = time.time() - t_start
    text = open(out_path, errors="replace").read()
    views = {}  # view -> (rolled back, again after, what): the max over the survivors
    for m in VIEW.finditer(text):
        v, r, t = int(m.group(1)), int(m.group(5)), float(m.group(8))
        o = views.get(v, (0, 0.0, m.group(2)))
        views[v] = (max(o[0], r), max(o[1], t), m.group(2))
    crcs = {int(m.group(1)): m.group(2) for m in CRC.finditer(text)}
    killed = {g for _, g in kills}
    acc = None
    try:
        with open(f"{d}/m.jsonl") as f:
            acc = json.loads(f.read().strip().split("\n")[-1])["val_acc"]
    except (OSError, ValueError, IndexError, KeyError):
        pass
    rec = {"trial": idx, "kind": kind, "rc": rc, "completed": rc == 0, "wall_s": round(wall, 2),
           "killed": [g for _, g in kills], "target_step": target if kind != "none" else None,
           "delay_s": round((kills[1][0] - kills[0][0]) / 1e9, 3) if len(kills) > 1 else None,
           "val_acc": acc, "workers": workers,
           "crc32_equal": len(set(crcs.values())) == 1 and len(crcs) == workers - len(killed),
           "views": [{"view": v, "rolled_back": r, "again_after_s": t, "what": w}
                     for v, (r, t, w) in sorted(views.items())]}
    rec["paused"] = "training paused" in text
    if kills:
        surv = [steps_of(f"{d}/st.{g}") for g in range(workers) if g not in killed]
        final = max((s[-1][2] for s in surv if s), default=0)
        firsts = [next((t for t, _, v in s if v == final), None) for s in surv]
        at_kill = [max((st for t, st, _ in s if t <= kills[0][0]), default=0) for s in surv]
        rec["step_at_kill"] = max(at_kill)
        rec["final_view"] = final
        if final > 1 and all(firsts):
            rec["recovery_s"] = round((max(firsts) - kills[0][0]) / 1e9, 3)
            rec["recovery_from_last_kill_s"] = round((max(firsts) - kills[-1][0]) / 1e9, 3)
        # per kill: -> the first step of a later view than the one it hit (all survivors')
        per = []
        for tk, _ in kills:
            hit = max((v for s in surv for t, _, v in s if t <= tk), default=1)
            nxt = [next((t for t, _, v in s if v > hit), None) for s in surv]
            per.append(round((max(nxt) - tk) / 1e9, 3) if nxt and all(nxt) else None)
        rec["recovery_per_kill_s"] = per
        if kind in ("vc", "double0"):  # the second kill before any survivor trained in a view without the first victim
            hit = max((v for s in surv for t, _, v in s if t <= kills[0][0]), default=1)
            again = [next((t for t, _, v in s if v > hit), None) for s in surv]
            rec["second_kill_during_view_change"] = all(x is None or x > kills[1][0] for x in again)
    return rec


def freeze_trial(a, idx, victim, freeze_s, at_step):
    """one run of tests/integration/freeze_trial.py: worker `victim` stopped
    when its step log reaches at_step, resumed freeze_s later"""
    d = os.path.join(a.tmp, f"f{idx:02d}")
    # freeze_trial.py's default (20 x (freeze + 4) epochs) is for data/mnist's
    # 8,000 images; the bench's 4,000 train an epoch in half the time
    epochs = int(30 * (freeze_s + 4))
    cmd = [sys.executable, FREEZE_TRIAL, "--hora", a.hora, "--data", a.data, "--tmp", d, "--victim", str(victim),
           "--freeze", f"{freeze_s:.3f}", "--port", str(random.randrange(20000, 32000, 10)),
           "--at-step", str(at_step), "--epochs", str(epochs), "--timeout", str(a.timeout)]
    rec = {"trial": idx, "kind": "freeze", "victim": victim, "freeze_s": round(freeze_s, 3), "at_step": at_step,
           "epochs": epochs}
    t_start = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout + 120)
        r = json.loads(p.stdout)
    except (subprocess.TimeoutExpired, ValueError) as e:
        rec.update(rc=f"freeze_trial.py failed: {e}", completed=False, crc32_equal=False, view_changed=None)
        return rec
    rec["wall_s"] = round(time.time() - t_start, 2)
    with open(os.path.join(a.out, f"trial-{idx:02d}-freeze.txt"), "w") as f:
        f.write(r.get("output", ""))
    crcs = {int(g): c for g, c in r.get("crcs", {}).items()}
    others = {g: c for g, c in crcs.items() if g != victim}
    rec["rc"] = r.get("rc")
    rec["crc32_equal"] = len(crcs) == 4 and len(set(crcs.values())) == 1
    # the documented end of a job that finished while the victim was frozen:
    # the woken worker exits 4, alone, the launcher 1, the three others agree
    rec["ended_while_frozen"] = (r.get("rc") == 1 and len(others) == 3 and len(set(others.values())) == 1
                                 and f"worker {victim} is alone: every other worker of the job left it"
                                 in r.get("output", ""))
    rec["completed"] = (r.get("rc") == 0 and rec["crc32_equal"]) or rec["ended_while_frozen"]
    rec["froze"] = r.get("t_stop") is not None
    rec["view_changed"] = bool(r.get("views"))
    for k in ("stall_s", "recovery_s", "wake_stall_s", "victim_views", "end_after_cont_s"):
        rec[k] = r.get(k)
    rec["longest_stall_s"] = max(x for x in (rec["stall_s"], rec["wake_stall_s"], 0) if x is not None)
    rec["view_lines"] = r.get("views", [])
    return rec


JOINED = re.compile(r"view (\d+): joined at step (\d+) as rank (\d+) of (\d+); received the committed state from "
                    r"rank (\d+): (\d+) bytes in (\S+) s")


def join_trial(a, idx):
    """workers 0-2 of a 4-worker file start (membership.min_members 3), worker
    3 starts by hand (`hora worker --config F --proc 3`) at a random step of
    epochs 4-6: its start -> the end of its first step, and the transfer"""
    d = os.path.join(a.tmp, f"j{idx}")
    os.makedirs(d, exist_ok=True)
    cfg = os.path.join(d, "c.yaml")
    cluster_file(cfg, a, random.randrange(20000, 32000, 10), 4, 0)
    with open(cfg, "a") as f:
        f.write("  metrics: " + os.path.join(d, "m.jsonl") + "\n")
    with open(cfg) as f:
        text = f.read().replace("membership:\n", "membership:\n  min_members: 3\n")
    with open(cfg, "w") as f:
        f.write(text)
    env = dict(os.environ, HORA_TEST_STEP_LOG=os.path.join(d, "st"))
    outs = [os.path.join(a.out, f"join-{idx}-worker{g}.txt") for g in range(4)]
    start = lambda g: subprocess.Popen([a.hora, "worker", "--config", cfg, "--proc", str(g)],
                                       stdout=open(outs[g], "w"), stderr=subprocess.STDOUT, env=env,
                                       start_new_session=True)
    ps = [start(g) for g in range(3)]
    target = random.randint(4 * 41, 6 * 41)
    deadline = time.time() + 30
    while time.time() < deadline and last_step(f"{d}/st.0") < target:
        time.sleep(0.002)
    t0 = time.time_ns()
    ps.append(start(3))
    rcs = []
    for p in ps:
        try:
            rcs.append(p.wait(timeout=a.timeout))
        except subprocess.TimeoutExpired:
            p.kill()
            rcs.append(f"timeout {a.timeout} s")
    rec = {"trial": idx, "kind": "join", "rcs": rcs, "completed": rcs == [0, 0, 0, 0],
           "step_at_start": last_step(f"{d}/st.0") and max(st for t, st, _ in steps_of(f"{d}/st.0") if t <= t0)}
    first = steps_of(f"{d}/st.3")
    if first:
        rec["start_to_first_step_s"] = round((first[0][0] - t0) / 1e9, 3)
    m = JOINED.search(open(outs[3], errors="replace").read())
    if m:
        rec.update(joined_view=int(m.group(1)), joined_at_step=int(m.group(2)), rank=int(m.group(3)),
                   of=int(m.group(4)), bytes=int(m.group(6)), transfer_s=float(m.group(7)))
    crcs = {CRC.search(open(o, errors="replace").read()).group(2) for o in outs
            if CRC.search(open(o, errors="replace").read())}
    rec["crc32_equal"] = len(crcs) == 1
    return rec


def torch_trial(a, idx):
    d = os.path.join(a.tmp, f"torch{idx}")
    os.makedirs(d, exist_ok=True)
    port = random.randrange(20000, 32000, 10) + 5
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elastic_torch.py")
    agents = []
    for x in "ab":
        cmd = ["torchrun", "--nnodes=1:2", "--nproc_per_node=1", "--rdzv_backend=c10d",
               f"--rdzv_endpoint=127.0.0.1:{port}", f"--rdzv_id=chaos{idx}", "--max_restarts=3",
               "--redirects=2", "--tee=2", script, "--data", a.data, "--log", f"{d}/{x}.log"]
        agents.append(subprocess.Popen(cmd, stdout=open(os.path.join(a.out, f"torchrun-{idx}-{x}.txt"), "w"),
                                       stderr=subprocess.STDOUT, start_new_session=True))
        time.sleep(0.5)
    target = random.randint(100, 400)
    rec = {"trial": idx, "kind": "torchrun", "target_step": target}
    deadline = time.time() + 90
    while time.time() < deadline and last_step(f"{d}/b.log") < target:
        time.sleep(0.002)
    t_kill = time.time_ns()
    os.killpg(agents[1].pid, signal.SIGKILL)  # agent b and its worker: the node dies
    deadline = time.time() + 180
    while time.time() < deadline:
        back = [r for r in steps_of(f"{d}/a.log") if r[0] > t_kill and r[2] == 1]
        if back:
            rec["recovery_s"] = round((back[0][0] - t_kill) / 1e9, 3)
            break
        time.sleep(0.05)
    os.killpg(agents[0].pid, signal.SIGKILL)
    for p in agents:
        p.wait()
    with open(os.path.join(a.out, f"torchrun-{idx}-steps.txt"), "w") as f:  # the raw lines the figure is from
        b, a_ = steps_of(f"{d}/b.log"), steps_of(f"{d}/a.log")
        f.write(f"kill {t_kill}\nb (killed), last lines:\n" + "".join(f"{r[0]} {r[1]} {r[2]}\n" for r in b[-3:]))
        f.write("a (survivor), world 1:\n" + "".join([f"{r[0]} {r[1]} {r[2]}\n" for r in a_ if r[2] == 1][:3]))
    return rec


def summary(rows, a):
    base = next(r for r in rows if r["kind"] == "none")
    lines = [f"# bench/elastic.sh: {a.workers} workers, {a.data}, {a.epochs} epochs, batch 32, seed 7, "
             f"commit_steps {a.commit_steps or 'default'}, membership probe 200 ms / suspect 1000 ms; "
             f"load average at the end {os.getloadavg()[0]:.2f}",
             f"undisturbed: completed {base['completed']}, val_acc {base['val_acc']}, {base['wall_s']} s"]
    allrb, goal = [], []  # goal: (kind, trials, completed, recovery figures, kills never recovered, what)
    for kind in ("single", "double", "vc", "double0"):
        ks = [r for r in rows if r["kind"] == kind]
        if not ks:
            continue
        done = sum(r["completed"] for r in ks)
        crc = sum(r["crc32_equal"] for r in ks)
        rec = [r["recovery_s"] for r in ks if "recovery_s" in r]
        per_kill = kind in ("double", "double0")  # each kill recovers on its own
        if per_kill:
            rec = [x for r in ks for x in r.get("recovery_per_kill_s", []) if x is not None]
        first = [r["recovery_s"] for r in ks if "recovery_s" in r]
        recl = [r["recovery_from_last_kill_s"] for r in ks if "recovery_from_last_kill_s" in r]
        rb = [v["rolled_back"] for r in ks for v in r["views"]]
        allrb += rb
        dacc = [abs(r["val_acc"] - base["val_acc"]) for r in ks if r["val_acc"] is not None]
        label = {"single": "single (4 workers, one kill)",
                 "double": "double (4 workers; the second kill 0.3-1 s after the survivors train again)",
                 "vc": "vc (4 workers; the second kill 20-300 ms after the first: 2 of 4 left)",
                 "double0": "double0 (4 workers; worker 0 and one other killed 0-0.15 s apart, either first)"}[kind]
        during = sum(r.get("second_kill_during_view_change", False) for r in ks)
        if kind in ("vc", "double0"):
            label += f" [second kill before the survivors trained again: {during}/{len(ks)}]"
        if kind == "double0":
            w0 = sum(r["killed"][:1] == [0] for r in ks)
            label += f" [worker 0 killed first: {w0}/{len(ks)}]"
        what = "each kill -> first step of the next view" if per_kill else \
            "first kill -> first step of the final view"
        lines.append(f"{label}: completed {done}/{len(ks)}, survivors' crc32 equal {crc}/{len(ks)}; "
                     f"recovery ({what}) median {fmt(med(rec))} s, max {fmt(max(rec, default=None))} s "
                     f"({len(rec)} measured)"
                     + (f"; first kill -> first step of the final view median {fmt(med(first))} s, max "
                        f"{fmt(max(first))} s" if kind == "double0" and first else "")
                     + (f"; from the last kill median {fmt(med(recl))} s, max {fmt(max(recl))} s"
                        if kind != "single" and recl else "")
                     + f"; rolled back per view change: median {fmt(med(rb), 1)}, "
                       f"max {fmt(max(rb, default=None))} steps ({len(rb)} view changes); "
                       f"|val_acc - undisturbed| max {fmt(max(dacc, default=None), 4)}")
        if per_kill:
            never = sum(x is None for r in ks for x in r.get("recovery_per_kill_s", []))
        else:
            never = sum(bool(r["killed"]) and "recovery_s" not in r for r in ks)
        goal.append((kind, len(ks), done, rec, never, what))
    if goal:
        kills = [r for r in rows if r["kind"] in ("single", "double", "vc", "double0")]
        every = [x for r in kills for x in r.get("recovery_per_kill_s", []) if x is not None]
        goal.append(("all kills", len(kills), sum(r["completed"] for r in kills), every,
                     sum(x is None for r in kills for x in r.get("recovery_per_kill_s", [])),
                     "each kill -> first step of the next view"))
    fz = [r for r in rows if r["kind"] == "freeze"]
    if fz:
        lines += freeze_lines(fz)
    pa = [r["trial"] for r in rows if r.get("paused")]
    if pa:
        lines.append(f"trials whose output says 'training paused': {pa}")
    js = [r for r in rows if r["kind"] == "join"]
    if js:
        st = [r["start_to_first_step_s"] for r in js if "start_to_first_step_s" in r]
        tr = [r["transfer_s"] for r in js if "transfer_s" in r]
        lines.append(f"join (workers 0-2 running, worker 3 started by hand at epochs 4-6): completed "
                     f"{sum(r['completed'] for r in js)}/{len(js)}, crc32 equal {sum(r['crc32_equal'] for r in js)}; "
                     f"start -> first step median {statistics.median(st) if st else 'n/a'} s, max "
                     f"{max(st) if st else 'n/a'} s; state transfer {js[0].get('bytes')} bytes, median "
                     f"{statistics.median(tr) if tr else 'n/a'} s, max {max(tr) if tr else 'n/a'} s")
    ts = [r["recovery_s"] for r in rows if r["kind"] == "torchrun" and "recovery_s" in r]
    nt = sum(r["kind"] == "torchrun" for r in rows)
    if nt:
        lines.append(f"torchrun (--nnodes=1:2, c10d, kill -9 of one agent's process group): survivor trains "
                     f"again (world 1) after: {', '.join(map(str, ts)) or 'never'} s ({len(ts)}/{nt} came back)")
    if allrb:
        lines.append(f"steps lost per failure: max {max(allrb)} (commit_steps "
                     f"{a.commit_steps or 20}: {'<=' if max(allrb) <= (a.commit_steps or 20) else 'EXCEEDS'})")
    if goal:
        lines += goal_table(goal)
    if fz:
        lines += freeze_table(fz)
    return "\n".join(lines)


def med(xs):
    return statistics.median(xs) if xs else None


def fmt(x, digits=3):
    return "n/a" if x is None else f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def freeze_lines(fz):
    """the freeze-and-resume trials, split at the detection time"""
    out = []
    for below in (True, False):
        ks = [r for r in fz if (r["freeze_s"] < DETECT_S) == below]
        if not ks:
            continue
        n = len(ks)
        done = sum(r["completed"] for r in ks)
        froze = sum(bool(r.get("froze")) for r in ks)
        changed = sum(bool(r.get("view_changed")) for r in ks)
        ended = sum(bool(r.get("ended_while_frozen")) for r in ks)
        fr = [r["freeze_s"] for r in ks]
        stall = [r["stall_s"] for r in ks if r.get("stall_s") is not None]
        head = (f"freeze {'below' if below else 'at or above'} {DETECT_S} s ({n} trials, freezes "
                f"{min(fr):.2f}-{max(fr):.2f} s, workers {sorted({r['victim'] for r in ks})}): completed "
                f"{done}/{n} (of them ended while frozen: {ended}), frozen before the job ended {froze}/{n}, "
                f"view changed {changed}/{n}")
        if below:
            excess = [r["stall_s"] - r["freeze_s"] for r in ks if r.get("stall_s") is not None]
            over = sum(x > 0.1 for x in excess)
            longest = [r["longest_stall_s"] for r in ks if r.get("longest_stall_s") is not None]
            out.append(head + f"; survivors' longest stall max {fmt(max(longest, default=None))} s, during the "
                       f"freeze at most freeze + {fmt(max(excess, default=None))} s (longer than freeze + 0.1 s: "
                       f"{over}/{len(excess)}; expected: no view change and none longer)")
        else:
            rec = [r["recovery_s"] for r in ks if r.get("recovery_s") is not None]
            wake = [r["wake_stall_s"] for r in ks if r.get("wake_stall_s") is not None]
            back = sum(any(v > 1 for v in (r.get("victim_views") or [])) for r in ks)
            out.append(head + f", the woken worker trained again in a later view {back}/{n}; survivors' longest "
                       f"stall during the freeze median {fmt(med(stall))} s, max {fmt(max(stall, default=None))} s; "
                       f"recovery (SIGSTOP -> the others' first step in the new view) median {fmt(med(rec))} s, "
                       f"max {fmt(max(rec, default=None))} s ({len(rec)} measured; over the detection time + "
                       f"0.3 s = 1.9 s: {sum(x > 1.9 for x in rec)}); stall on the wake-up median "
                       f"{fmt(med(wake))} s, max {fmt(max(wake, default=None))} s (over 0.5 s: "
                       f"{sum(x > 0.5 for x in wake)})")
    return out


def freeze_table(fz):
    """the freezes in two rows: below and at or above the detection time"""
    out = [f"{'freeze':<10} {'trials':>6} {'completed':>9} {'views_changed':>13} {'longest_stall_s':>15} "
           f"{'recovery_median_s':>17} {'recovery_max_s':>14} {'wake_stall_max_s':>16}"]
    for below in (True, False):
        ks = [r for r in fz if (r["freeze_s"] < DETECT_S) == below]
        if not ks:
            continue
        n = len(ks)
        rec = [r["recovery_s"] for r in ks if r.get("recovery_s") is not None]
        wake = [r["wake_stall_s"] for r in ks if r.get("wake_stall_s") is not None]
        longest = [r["longest_stall_s"] for r in ks if r.get("longest_stall_s") is not None]
        label = f"{'<' if below else '>='} {DETECT_S} s"
        done = f"{sum(r['completed'] for r in ks)}/{n}"
        changed = f"{sum(bool(r.get('view_changed')) for r in ks)}/{n}"
        out.append(f"{label:<10} {n:>6} {done:>9} {changed:>13} "
                   f"{fmt(max(longest, default=None)):>15} {fmt(med(rec)):>17} {fmt(max(rec, default=None)):>14} "
                   f"{fmt(max(wake, default=None)):>16}")
    return out


def goal_table(goal):
    """kill recovery per kind against the goal, met or not, in words"""
    out = [f"recovery goal: median <= {GOAL_MEDIAN_S} s and max <= {GOAL_MAX_S} s (kill -> the survivors "
           f"train again)",
           f"{'kind':<10} {'trials':>6} {'completed':>9} {'measured':>8} {'never':>5} {'median_s':>8} "
           f"{'max_s':>7}  {'median':<8} {'max':<8} recovery measured"]
    met, missed = [], []
    for kind, n, done, rec, never, what in goal:  # never: a kill the survivors did not recover from
        m, x = med(rec), max(rec, default=None)
        ok_m = m is not None and m <= GOAL_MEDIAN_S
        ok_x = x is not None and x <= GOAL_MAX_S and not never
        out.append(f"{kind:<10} {n:>6} {f'{done}/{n}':>9} {len(rec):>8} {never:>5} {fmt(m):>8} {fmt(x):>7}  "
                   f"{'met' if ok_m else 'NOT met':<8} {'met' if ok_x else 'NOT met':<8} {what}")
        (met if ok_m and ok_x else missed).append(
            kind + ("" if ok_m and ok_x else " (" + ", ".join(
                w for w, ok in (("median", ok_m), ("max", ok_x)) if not ok) + ")"))
    out.append(f"goal met by: {', '.join(met) or 'none'}; NOT met by: {', '.join(missed) or 'none'}")
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hora", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--tmp", required=True)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--commit-steps", type=int, default=0)
    p.add_argument("--single", type=int, default=20)
    p.add_argument("--double", type=int, default=5)
    p.add_argument("--vc", type=int, default=5)
    p.add_argument("--double0", type=int, default=10)
    p.add_argument("--freeze", type=int, default=20)
    p.add_argument("--torchrun", type=int, default=2)
    p.add_argument("--join", type=int, default=5)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--timeout", type=float, default=90)
    a = p.parse_args()
    random.seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    steps = lambda kind: a.epochs * (4000 // (32 * a.workers))
    victims = list(range(a.workers)) * ((a.single + a.workers - 1) // a.workers)
    random.shuffle(victims)
    plan = [("single", victims[i], 0.0, None) for i in range(a.single)]
    plan += [("double", random.randrange(a.workers), random.uniform(0.3, 1.0), None) for _ in range(a.double)]
    plan += [("vc", random.randrange(a.workers), random.uniform(0.02, 0.3), None) for _ in range(a.vc)]
    for _ in range(a.double0):  # worker 0 and another, either first, 0-0.15 s apart
        pair = [0, random.randrange(1, a.workers)]
        random.shuffle(pair)
        plan.append(("double0", pair[0], random.uniform(0.0, 0.15), pair[1]))
    frozen = list(range(a.workers)) * ((a.freeze + a.workers - 1) // a.workers)
    random.shuffle(frozen)
    plan += [("freeze", frozen[i], random.uniform(0.2, 5.0), None) for i in range(a.freeze)]
    random.shuffle(plan)
    torch_at = {round((i + 1) * len(plan) / (a.torchrun + 1)) for i in range(a.torchrun)}
    rows = [trial(a, "none", 0, 0, 0, 0)]
    print(json.dumps(rows[-1]), flush=True)
    with open(os.path.join(a.out, "trials.jsonl"), "w") as f:
        f.write(json.dumps(rows[-1]) + "\n")
        for i, (kind, victim, delay, second) in enumerate(plan, 1):
            target = random.randint(steps(kind) // 40, steps(kind) // 2)
            if kind == "freeze":  # delay: the freeze's length
                rows.append(freeze_trial(a, i, victim, delay, target))
            else:
                rows.append(trial(a, kind, i, victim, target, delay, second))
            print(json.dumps(rows[-1]), flush=True)
            f.write(json.dumps(rows[-1]) + "\n")
            if i in torch_at:
                rows.append(torch_trial(a, len([r for r in rows if r["kind"] == "torchrun"]) + 1))
                print(json.dumps(rows[-1]), flush=True)
                f.write(json.dumps(rows[-1]) + "\n")
    with open(os.path.join(a.out, "trials.jsonl"), "a") as f:
        for i in range(1, a.join + 1):
            rows.append(join_trial(a, i))
            print(json.dumps(rows[-1]), flush=True)
            f.write(json.dumps(rows[-1]) + "\n")
    s = summary(rows, a)
    print(s)
    with open(os.path.join(a.out, "summary.txt"), "w") as f:
        f.write(s + "\n")


if __name__ == "__main__":
    main()
