"""Killable parse workers: every file is parsed in a child process under a hard wall-clock limit.

Why not ``concurrent.futures``: a parse stuck inside a native parser never returns to
the interpreter, so no signal handler (the in-process ``SIGALRM`` limit) ever runs, and a
parse that crashes it (``SIGSEGV``) takes its whole process down. Only killing a process
cuts the first off, and only a separate process survives the second. A
``ProcessPoolExecutor`` breaks as a whole when one worker dies and cannot say which task
did it. Here each worker holds one task at a time, so

* a worker that runs past its task's deadline is killed (``SIGKILL``) and replaced, and the
  task is reported as *timed out*;
* a worker that dies is replaced and its task retried once in a fresh worker (an OOM kill
  of a neighbour's doing deserves a second chance); a second death reports it as *crashed*;
* the scan always finishes, with ``--jobs 1`` too (one worker).

The pool knows nothing of files or facts: it runs ``run(task, *args)`` in the children and
hands back ``(task, outcome)`` pairs, or :class:`Lost` records for the tasks it gave up on.
"""

from __future__ import annotations

import gc
import multiprocessing
import signal
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Callable

RETRIES_AFTER_DEATH = 1


@dataclass(frozen=True, slots=True)
class Lost:
    """A task the pool gave up on: ``kind`` is ``"timeout"`` or ``"crash"``."""

    task: Any
    kind: str
    reason: str


# What a wait hands back: a task with the outcome its worker sent, or the task lost.
Finished = tuple[Any, Any] | Lost


def _serve(conn: Connection, run: Callable[..., object], args: tuple[object, ...]) -> None:
    """The child: run tasks until told to stop (``None``) or the parent goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        conn.send(run(task, *args))


class _Worker:
    __slots__ = ("process", "conn", "task", "deadline", "started")

    def __init__(self, process: multiprocessing.process.BaseProcess, conn: Connection) -> None:
        self.process, self.conn = process, conn
        self.task: Any = None
        self.deadline = float("inf")
        self.started = 0.0


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"killed by {name}"
    return f"exit status {exitcode}"


class WorkerPool:
    """Up to ``size`` children, started as tasks arrive, each running one task at a time."""

    def __init__(self, size: int, run: Callable[..., object], args: tuple[object, ...], limit_s: float) -> None:
        self.size = max(1, size)
        self.run, self.args = run, args
        self.limit_s = limit_s if limit_s > 0 else float("inf")
        fork = sys.platform.startswith("linux")
        self.context = multiprocessing.get_context("fork" if fork else "spawn")
        self.workers: list[_Worker] = []
        self.retries: dict[int, int] = {}  # id(task) -> deaths so far
        self.pending: list[Any] = []  # tasks to resubmit (a worker died under them)
        self._forked_once = False

    # -- capacity ----------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        return sum(1 for w in self.workers if w.task is not None) + len(self.pending)

    def has_room(self) -> bool:
        return not self.pending and (len(self.workers) < self.size or any(w.task is None for w in self.workers))

    def submit(self, task: Any) -> None:
        """Give ``task`` to an idle worker, starting one when below ``size`` (raises OSError
        when no process can be started)."""
        worker = next((w for w in self.workers if w.task is None), None)
        if worker is None:
            worker = self._start()
        self._assign(worker, task)

    def _assign(self, worker: _Worker, task: Any) -> None:
        worker.task = task
        worker.started = time.monotonic()
        worker.deadline = worker.started + self.limit_s
        try:
            worker.conn.send(task)
        except (OSError, ValueError):
            pass  # it died already: the next wait() sees the closed pipe and handles it

    def _start(self) -> _Worker:
        parent, child = self.context.Pipe(duplex=True)
        process = self.context.Process(target=_serve, args=(child, self.run, self.args), daemon=True)  # type: ignore[attr-defined]
        # Children inherit this process's objects: keep their GC from walking (and so
        # copying) those pages. One full collection before the first fork, not every one.
        if not self._forked_once:
            gc.collect()
        gc.freeze()
        try:
            process.start()
        finally:
            gc.unfreeze()
            child.close()
        self._forked_once = True
        worker = _Worker(process, parent)
        self.workers.append(worker)
        return worker

    # -- results -------------------------------------------------------------------
    def wait(self, block: bool) -> list[Finished]:
        """Finished work: ``(task, outcome)`` pairs and :class:`Lost` records. With ``block``,
        waits for at least one (or for a deadline to pass)."""
        self._resubmit()
        busy = [w for w in self.workers if w.task is not None]
        if not busy:
            return []
        timeout = 0.0
        if block:
            timeout = max(0.0, min(w.deadline for w in busy) - time.monotonic())
            timeout = None if timeout == float("inf") else timeout  # type: ignore[assignment]
        ready = set(wait([w.conn for w in busy], timeout))
        out: list[Finished] = []
        now = time.monotonic()
        for worker in busy:
            if worker.conn in ready:
                out.extend(self._receive(worker))
            elif now >= worker.deadline:
                out.append(self._expire(worker))
        self._resubmit()
        return out

    def _receive(self, worker: _Worker) -> list[Finished]:
        task = worker.task
        try:
            outcome = worker.conn.recv()
        except (EOFError, OSError):
            return self._died(worker)
        worker.task = None
        worker.deadline = float("inf")
        return [(task, outcome)]

    def _expire(self, worker: _Worker) -> Lost:
        task = worker.task
        self._discard(worker)
        return Lost(task, "timeout", f"parse took over {self.limit_s:g}s; the worker was killed")

    def _died(self, worker: _Worker) -> list[Finished]:
        task = worker.task
        self._discard(worker)
        deaths = self.retries.get(id(task), 0) + 1
        self.retries[id(task)] = deaths
        if deaths <= RETRIES_AFTER_DEATH:
            self.pending.append(task)
            return []
        self.retries.pop(id(task), None)
        return [Lost(task, "crash", f"the parser crashed ({_death(worker.process.exitcode)}); not parsed")]

    def _resubmit(self) -> None:
        while self.pending:
            self.submit(self.pending.pop())

    def _discard(self, worker: _Worker) -> None:
        self.workers.remove(worker)
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join()
        worker.conn.close()

    # -- shutting down ---------------------------------------------------------------
    def close(self, cancel: bool = False) -> None:
        """Stop every worker: idle ones are asked to exit, busy ones (``cancel``) killed."""
        for worker in self.workers:
            if worker.task is None and not cancel:
                try:
                    worker.conn.send(None)
                except (OSError, ValueError):
                    pass
        for worker in list(self.workers):
            worker.process.join(timeout=None if (worker.task is None and not cancel) else 0)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.conn.close()
        self.workers.clear()
        self.pending.clear()
