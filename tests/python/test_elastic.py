"""hora.torch.elastic on 3 processes: a worker killed -9 mid-training, the
survivors roll back to their last commit, re-form as 2 and finish with the
same parameters (tests/python/workers/elastic.py)."""
from conftest import report

ELASTIC = "elastic: {min_workers: 1}"  # the cluster file's train.elastic: hora.init() is elastic


def same_params(res, workers):
    """the workers' final parameters (their PARAMS line: a sha256) are one"""
    hs = {g: [l.split()[1] for l in res[g][1].splitlines() if l.startswith("PARAMS ")] for g in workers}
    assert all(len(h) == 1 for h in hs.values()) and len({h[0] for h in hs.values()}) == 1, \
        (hs, report(res))


def test_the_survivors_of_a_killed_worker_re_form_and_finish(job):
    res = job(3, "elastic.py", train=ELASTIC).wait(180)
    assert res[2][0] == -9, report(res)
    for g in (0, 1):
        rc, out, err = res[g]
        assert rc == 0 and "FINAL size=2 resets=1 step=30 joined=0" in out, report(res)
    same_params(res, (0, 1))


def test_a_restarted_worker_joins_at_a_commit_and_takes_the_state(job):
    """worker 2 killed, then started again: it joins the running job, the
    survivors re-form with it at their next commit, it takes their state"""
    import time
    j = job(3, "elastic.py", env={"STEPS": "100", "WAIT_FOR_SIZE": "3"}, train=ELASTIC)
    j.procs[2].wait(120)
    time.sleep(0.5)
    j.spawn(2, {"HORA_TEST_LIFE": "2"})
    res = j.wait(240)
    assert res[2][0] == -9, report(res)
    for g in (0, 1, 3):
        rc, out, err = res[g]
        assert rc == 0 and "FINAL size=3" in out and "step=100" in out, report(res)
    assert "joined=1" in res[3][1] and "resets=2" in res[0][1], report(res)
    same_params(res, (0, 1, 3))


def test_without_train_elastic_a_killed_worker_stops_the_job(job):
    """the same program on a cluster file without train.elastic: not elastic,
    the survivors' HoraError (the lost worker, named) is raised by run"""
    res = job(3, "elastic.py").wait(180)
    assert res[2][0] == -9, report(res)
    for g in (0, 1):
        rc, out, err = res[g]
        assert rc != 0 and "HoraError" in err and "FINAL" not in out, report(res)
