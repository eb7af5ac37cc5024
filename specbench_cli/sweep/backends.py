"""Where jobs run: threads on this machine, or tasks on a Ray cluster. Both retry a failed job
(crash, killed worker, exit 1 before the end) up to `retries` more times; each retry resumes the
job's run folder. Exit 2 (bad input) is never retried.

`on_result(result, will_retry)` is called in the sweep process for every finished attempt.
"""

from __future__ import annotations

import importlib.util
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from specbench_cli.errors import UsageError
from specbench_cli.sweep import jobs as jobmod
from specbench_cli.sweep.jobs import run_job

RAY_HINT = "pip install 'specbench-cli[ray]'"
OnResult = Callable[[dict, bool], None]


def _retry(result: dict, attempt: int, retries: int) -> bool:
    return result["status"] == "failed" and attempt < retries and not jobmod.STOPPING.is_set()


def run_local(payloads: list[dict], sweep_dir: str, jobs: int, retries: int, on_result: OnResult) -> list[dict]:
    """Run jobs in `jobs` threads, each driving one `specbench run` subprocess at a time."""
    lock = threading.Lock()

    def one(payload: dict) -> dict:
        attempt = 0
        while True:
            result = run_job(payload, sweep_dir, attempt)
            again = _retry(result, attempt, retries)
            with lock:
                on_result(result, again)
            if not again:
                return result
            attempt += 1

    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        return list(pool.map(one, payloads))
    except KeyboardInterrupt:
        jobmod.stop_all()  # each `run` child stops after writing its current row; rerun the sweep to resume
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def require_ray() -> None:
    """Exit 2 with the install command when Ray is not installed."""
    if importlib.util.find_spec("ray") is None:
        raise UsageError(f"--ray-address needs Ray, which is not installed: {RAY_HINT}")


def run_ray(payloads: list[dict], sweep_dir: str, address: str, cpus: float, gpus: float, retries: int,
            on_result: OnResult) -> list[dict]:
    """One Ray task per job (cpus and gpus reserved per task); Ray's own retries are off so that
    every retry goes through the same resume logic as a local one."""
    require_ray()
    import ray

    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False, configure_logging=True)
    except Exception as exc:  # noqa: BLE001 - ray raises ConnectionError, RuntimeError, ValueError...
        raise UsageError(f"cannot connect to the Ray cluster at '{address}': "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    try:
        task = ray.remote(num_cpus=cpus, num_gpus=gpus, max_retries=0)(run_job)
        pending = {task.remote(p, sweep_dir, 0): (p, 0) for p in payloads}
        results = {}
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            payload, attempt = pending.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as exc:  # worker or node died, task cancelled...
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                result = {"id": payload["id"], "status": "failed", "attempt": attempt, "rc": None, "run": None,
                          "seconds": 0.0, "errors": 0, "skipped": False, "host": "?",
                          "error": f"{type(exc).__name__}: {first}"[:300]}
            again = _retry(result, attempt, retries)
            on_result(result, again)
            if again:
                pending[task.remote(payload, sweep_dir, attempt + 1)] = (payload, attempt + 1)
            else:
                results[payload["id"]] = result
        return [results[p["id"]] for p in payloads]
    finally:
        ray.shutdown()
