"""elastic.py - horovod.torch.elastic's State and run over hora's elastic
communicator (hora.h's "elastic jobs": the cluster file's train section
turns train.elastic on, e.g. `train: {elastic: {min_workers: 2}}`).

    hvd.init()
    state = hvd.elastic.TorchState(model=model, optimizer=opt, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()          # every few steps: the point to roll back to

    train(state)

run(): syncs the state from a rank that holds it (the lowest rank that is
not a joiner), then calls train. When a worker dies, freezes or leaves,
the call in flight raises HoraError(HORA_ERR_VIEW): every state is rolled
back to its last commit, the communicator re-forms over the survivors
(hora_elastic_reform), the state is synced again (ranks can be a commit
apart: all take the chosen rank's), and train is called again. At a
commit, when a joiner waits (or a rank left), every rank agrees on it (one
allreduce) and re-forms at that same commit. Other errors propagate.
When train returns, run ends with two barriers (as hora.h says why); a
collective of yours after run() has returned is not protected: a rank
may have left.
"""
import copy
import functools

import numpy as np
import torch

import hora as _h
from hora import _comm
from hora._lib import lib, HoraError


def is_joiner():
    """whether this process joined a running job (and has not synced yet)"""
    return _comm.state.joiner


class HostsUpdatedInterrupt(Exception):
    """raised by commit() when the job re-forms there (a joiner, a rank that left)"""


def _root():
    """the lowest rank that holds the job's state (joiners do not)"""
    has = _h.allgather(np.array([0 if _comm.state.joiner else 1], dtype=np.int32))
    ranks = [r for r in range(len(has)) if has[r]]
    return ranks[0] if ranks else 0


class State:
    """what training needs to go on: save() at commit, restore() after a
    failure, sync() from the root after every (re-)start"""

    def __init__(self):
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """called after every re-form (e.g. to rescale the learning rate by size())"""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for cb in self._reset_callbacks:
            cb()

    def commit(self):
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """every rank agrees (one allreduce) whether to re-form now"""
        if not _comm.state.elastic:
            return
        want = np.array([lib.hora_elastic_pending(_comm.comm())], dtype=np.int32)
        if _h.allreduce(want, op=_h.Max)[0]:
            raise HostsUpdatedInterrupt()

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError


class ObjectState(State):
    """picklable attributes given as keyword arguments"""

    def __init__(self, **kwargs):
        super().__init__()
        self._keys = list(kwargs)
        for k, v in kwargs.items():
            setattr(self, k, v)
        self._saved = None
        ObjectState.save(self)

    def _objects(self):
        return {k: getattr(self, k) for k in self._keys}

    def save(self):
        self._saved = copy.deepcopy(self._objects())

    def restore(self):
        for k, v in copy.deepcopy(self._saved).items():
            setattr(self, k, v)

    def sync(self):
        for k, v in _h_torch().broadcast_object(self._objects(), root_rank=_root()).items():
            setattr(self, k, v)
        ObjectState.save(self)


def _h_torch():
    import hora.torch as t
    return t


class TorchState(ObjectState):
    """a model's and an optimizer's state, plus picklable attributes"""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer
        self._model_saved = self._opt_saved = None
        super().__init__(**kwargs)
        TorchState.save(self)

    def save(self):
        if self.model is not None:
            self._model_saved = copy.deepcopy(self.model.state_dict())
        if self.optimizer is not None:
            self._opt_saved = copy.deepcopy(self.optimizer.state_dict())
        ObjectState.save(self)

    def restore(self):
        with torch.no_grad():
            if self.model is not None:
                self.model.load_state_dict(self._model_saved)
            if self.optimizer is not None:
                self.optimizer.load_state_dict(self._opt_saved)
        ObjectState.restore(self)

    def sync(self):
        t = _h_torch()
        root = _root()
        if self.model is not None:
            t.broadcast_parameters(self.model.state_dict(), root_rank=root)
        if self.optimizer is not None:
            t.broadcast_optimizer_state(self.optimizer, root_rank=root)
        ObjectState.sync(self)
        TorchState.save(self)


_FATAL = (-10001, -10002, -10003, -10004, -10005, -10008, -12)
# config, data, model, diverged, stall, no job, ENOMEM: a re-form cannot mend them


def _finish():
    """The end of an elastic job, as the C trainer's (core/elastic.c): past a
    first barrier every rank has trained its last step (its failure rolls
    back and re-forms like any step's); a second keeps each rank until
    every one is past the first, so no rank leaves while a slower one is
    still in it (the leave, a view change, would stop that one's barrier:
    it would re-form alone and train the rolled-back steps by itself, or
    pause below min_workers). The second one's failure is no failure:
    every rank is done."""
    if not _comm.state.elastic or _h.size() == 1:
        return
    _h.barrier()
    try:
        _h.barrier()
    except HoraError:
        pass


def run(func):
    """@hora.torch.elastic.run: func(state, ...) re-run after every re-form.
    A failure on an elastic job rolls the state back to its last commit and
    re-forms (hora_elastic_reform waits up to the failure-detection time for
    the view to change: a crash's broken connection is seen before the
    failure detector speaks); a failure that is no view change, or one a
    re-form cannot mend, is raised."""
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        code = None  # None: start; 0: agreed at a commit; < 0: a failure
        while True:
            if code is not None:
                _comm.reform(code)  # raises when the failure stands or the job cannot go on
                state.on_reset()
            try:
                state.sync()
                _comm.state.joiner = False  # it holds the state now
                result = func(state, *args, **kwargs)
                _finish()
                return result
            except HoraError as e:
                if not _comm.state.elastic or e.code in _FATAL:
                    raise
                state.restore()
                code = e.code
            except HostsUpdatedInterrupt:
                code = 0  # committed just now, on every rank
    return wrapper
