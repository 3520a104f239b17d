"""hora.torch.elastic: 3 workers train STEPS (30) steps with a commit every
5; worker 2 kills itself (-9) at step 12 of its first life (not when
HORA_TEST_LIFE=2: then it is the restarted worker, a joiner). The survivors
roll back to step 10, re-form as 2 ranks, and finish (or, with a joiner,
re-form as 3 again at a commit); all end with the same parameters. Prints
'FINAL size resets step joined' and 'PARAMS <sha256 of the parameters>' on
each."""
import hashlib
import os
import signal
import time

import torch

import hora.torch as hvd

torch.set_num_threads(1)
hvd.init()  # elastic: the cluster file's train.elastic (test_elastic.py)
g = int(os.environ["HORA_PROC"])
steps = int(os.environ.get("STEPS", "30"))
wait_for = int(os.environ.get("WAIT_FOR_SIZE", "0"))  # at step 50, commit until this many ranks
second_life = os.environ.get("HORA_TEST_LIFE") == "2"
joined = hvd.elastic.is_joiner()
torch.manual_seed(1 + g)                       # different at first: the sync makes them equal
model = torch.nn.Sequential(torch.nn.Linear(10, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                               named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model=model, optimizer=opt, step=0, resets=0)
state.register_reset_callbacks([lambda: setattr(state, "resets", state.resets + 1)])


@hvd.elastic.run
def train(state):
    while state.step < steps:
        if g == 2 and state.step == 12 and not second_life:
            os.kill(os.getpid(), signal.SIGKILL)
        while state.step == 50 and hvd.size() < wait_for:
            time.sleep(0.05)
            state.commit()     # raises HostsUpdatedInterrupt on every rank once the joiner waits
        gen = torch.Generator().manual_seed(100 * state.step + hvd.rank())
        x, y = torch.randn(16, 10, generator=gen), torch.randint(0, 2, (16,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        state.step += 1
        if state.step % 5 == 0:
            state.commit()


train(state)
# the test compares the replicas' hashes (no collective here: once run()
# has returned, a rank may leave, and a collective after it is unprotected)
h = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
print("FINAL size=%d resets=%d step=%d joined=%d" % (hvd.size(), state.resets, state.step, joined),
      flush=True)
print("PARAMS %s" % h, flush=True)
hvd.shutdown()
