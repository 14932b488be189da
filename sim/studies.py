"""Where a study's simulations run: one by one in this process, or as tasks on a Dask cluster.

A study (``mms sweep``'s grid, ``mms identify``'s Jacobians) is a list of independent simulations, each a call
``task(item)`` of a module-level function on a picklable item. :func:`open_evaluator` gives the
:class:`Evaluator` that runs them:

- ``"local"`` (the default of the commands' ``--scheduler``): a Dask ``LocalCluster`` of one single-threaded
  worker process per core (a simulation holds the GIL; numba's kernels come from the on-disk cache);
- ``"tcp://HOST:PORT"``: the scheduler of an existing cluster (``dask scheduler`` and ``dask worker`` on the lab's
  machines, each with this package installed); one that does not answer within :data:`CONNECT_TIMEOUT_S` is a
  one-line :class:`sim.config.ConfigError`;
- ``"serial"``: this process, in order (the reference the cluster's results are checked against).

Every task runs inside :func:`_guarded`, so a simulation that raises (or a worker that dies under it) becomes a
:class:`Failure` naming the item's parameters and the error, reported on stderr while the others go on. The
results come back in the items' order whatever the order of completion: a task is a pure function of its item
(its seeds included), so the cluster's results equal the serial run's.
"""
from __future__ import annotations

import logging
import os
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from sim.config import ConfigError

#: how long a client waits for an existing scheduler to answer, s: a scheduler on the lab's network answers in
#: milliseconds; a wrong address or a closed port is reported after this
CONNECT_TIMEOUT_S = 10.0
SCHEDULERS = ("local", "serial")


@dataclass(frozen=True)
class Failure:
    """A simulation that did not finish: the item's parameters (``describe(item)``) and the error, one line."""
    parameters: str
    error: str

    def __str__(self) -> str:
        return f"simulation failed ({self.parameters}): {self.error}"


def _guarded(task: Callable[[Any], Any], item: Any) -> tuple[bool, Any]:
    """``(True, task(item))``, or ``(False, "Type: message")`` when the task raises: on a worker, an exception
    would otherwise travel back with a traceback meant for a notebook."""
    try:
        return True, task(item)
    except Exception as exc:   # any error of one simulation is that simulation's result, not the study's end
        last = traceback.extract_tb(exc.__traceback__)[-1:]
        where = f" (at {last[0].filename}:{last[0].lineno})" if last else ""
        return False, f"{type(exc).__name__}: {exc}{where}"


class Evaluator:
    """Runs a study's tasks; ``where`` says on what (for the report)."""
    where = "this process, serially"
    workers = 1

    def map(self, task: Callable[[Any], Any], items: Sequence[Any], describe: Callable[[Any], str] = repr,
            progress: str | None = None) -> list[Any]:
        """``[task(item) or Failure]`` in the order of ``items``; ``progress``: the bar's label (None: no bar)."""
        from tqdm import tqdm

        results = []
        for item in tqdm(items, desc=progress, unit="sim", disable=progress is None, mininterval=0.5):
            results.append(_outcome(item, _guarded(task, item), describe))
        return results

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _outcome(item: Any, guarded: tuple[bool, Any], describe: Callable[[Any], str]) -> Any:
    ok, value = guarded
    if ok:
        return value
    failure = Failure(describe(item), value)
    print(f"warning: {failure}; the study goes on", file=sys.stderr, flush=True)
    return failure


class DaskEvaluator(Evaluator):
    """Tasks on a Dask cluster through a ``distributed.Client`` (:func:`open_evaluator` makes it)."""

    def __init__(self, client, cluster=None):
        self.client, self.cluster = client, cluster
        self.workers = max(1, len(client.nthreads()))
        self.where = (f"a local Dask cluster of {self.workers} worker processes" if cluster is not None
                      else f"the Dask cluster at {client.scheduler.address} ({self.workers} workers)")

    def map(self, task, items, describe=repr, progress=None):
        from distributed import as_completed
        from tqdm import tqdm

        futures = self.client.map(_guarded, [task] * len(items), list(items), pure=False)
        index = {future.key: k for k, future in enumerate(futures)}
        results: list[Any] = [None] * len(items)
        with tqdm(total=len(items), desc=progress, unit="sim", disable=progress is None, mininterval=0.5) as bar:
            for future in as_completed(futures):
                k = index[future.key]
                try:
                    guarded = future.result()
                except Exception as exc:   # the worker itself died (killed, out of memory): that task failed
                    guarded = (False, f"{type(exc).__name__}: {exc}")
                results[k] = _outcome(items[k], guarded, describe)
                bar.update(1)
        return results

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def open_evaluator(scheduler: str = "local", workers: int | None = None) -> Evaluator:
    """The evaluator of a ``--scheduler`` value (the module docstring); ``workers``: a local cluster's processes
    (default: one per core)."""
    if scheduler == "serial":
        return Evaluator()
    if workers is not None and workers < 1:
        raise ConfigError(None, "--workers", f"got {workers}, expected at least 1 worker process")
    from distributed import Client, LocalCluster

    if scheduler == "local":
        cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=logging.ERROR)
        return DaskEvaluator(Client(cluster), cluster)
    if not scheduler.startswith("tcp://"):
        raise ConfigError(None, "--scheduler", f"got {scheduler!r}, expected local, serial or tcp://HOST:PORT")
    try:
        client = Client(scheduler, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        raise ConfigError(None, "--scheduler", f"no Dask scheduler answered at {scheduler} within "
                                               f"{CONNECT_TIMEOUT_S:g} s ({type(exc).__name__})") from None
    return DaskEvaluator(client)


def failures(results: Sequence[Any]) -> list[Failure]:
    return [r for r in results if isinstance(r, Failure)]
