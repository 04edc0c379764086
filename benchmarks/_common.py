"""What the benchmark scripts share: servers, workloads, a raw client, the measured pytest run.

Every comparison is made inside one script run, against the same server, with the contenders
interleaved (A, B, A, B, ...) and medians reported, so that a noisy shared machine moves both
sides of a ratio together. Throughput is measured the same way for every contender: completions
per second between the first and the last completed request (``window_rps``), which leaves out
fixed start-up costs; wall times are reported separately where start-up is the point.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import textwrap
import time
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
DEMO_DATA = REPO / "evals" / "data" / "arithmetic.jsonl"
DEMO_MODEL = REPO / "models" / "tiny-arith"
SYSTEM_PROMPT = "Put the final answer in \\boxed{}."
MODEL_NAME = "tiny-arith"
MAX_TOKENS = 16
#: An environment variable that is never set: the endpoints here need no key.
NO_KEY_ENV = "BENCH_NO_API_KEY"


# -- reporting ------------------------------------------------------------------------------


def machine() -> str:
    """Cores, CPU model, memory and load: the context every figure needs."""
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = "? GiB"
    with contextlib.suppress(OSError, ValueError, IndexError):
        kib = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        memory = f"{kib / 1024**2:.1f} GiB"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{os.cpu_count()} cores ({model}), {memory} RAM, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}; load average {load:.1f} "
        "at start"
    )


def header(title: str) -> None:
    print(f"== {title}")
    print(f"machine: {machine()}")
    print(f"command: {shlex.join([Path(sys.executable).name, *sys.orig_argv[1:]])}")
    print(flush=True)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(c) for c in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for number, row in enumerate(cells):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
        if number == 0:
            print("  ".join("-" * width for width in widths))
    print(flush=True)


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def window_rps(times: Sequence[float]) -> float:
    """Completions per second between the first and the last completion."""
    if len(times) < 2 or times[-1] <= times[0]:
        return float("nan")
    return (len(times) - 1) / (times[-1] - times[0])


def log(message: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- servers --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def bench_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("OPENAI_API_KEY", None)
    env.update(extra)
    return env


@contextlib.contextmanager
def _listening(command: list[str], what: str, stop_timeout: float) -> Iterator[str]:
    """Run a server that prints ``... listening on URL`` once ready; yield URL; SIGTERM it."""
    process = subprocess.Popen(
        command, cwd=REPO, env=bench_env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"{what} did not start: {line!r}")
        yield line.split()[-1]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(stop_timeout)
        if process.stdout is not None:
            process.stdout.close()


@contextlib.contextmanager
def fake_server(*args: str) -> Iterator[str]:
    """``tests/support/openai_server.py`` (deterministic, fast); yields ``http://127.0.0.1:P``."""
    command = [PYTHON, "-m", "tests.support.openai_server", "--model", MODEL_NAME, *args]
    with _listening(command, "the test server", 10) as url:
        yield url


def server_stats(url: str) -> dict[str, Any]:
    import httpx

    data: dict[str, Any] = httpx.get(f"{url}/admin/stats", timeout=30).json()
    data.pop("by_question", None)
    return data


def configure_server(url: str, **settings: Any) -> None:
    import httpx

    httpx.post(f"{url}/admin/config", json=settings, timeout=30).raise_for_status()


def vllm_python() -> str:
    """The interpreter with vLLM: $MODAL_EVAL_VLLM_PYTHON, else .venv-vllm (scripts/setup.sh)."""
    candidates = (os.environ.get("MODAL_EVAL_VLLM_PYTHON"), str(REPO / ".venv-vllm/bin/python"))
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return candidate
    raise SystemExit(
        "no vLLM interpreter: run `bash scripts/setup.sh` (creates .venv-vllm) or set "
        "MODAL_EVAL_VLLM_PYTHON to a Python that has vLLM's CPU build"
    )


@contextlib.contextmanager
def server_cpus(isolate: bool, server: str) -> Iterator[None]:
    """With ``isolate``, what is started inside runs on the first half of this process's CPUs;
    afterwards this process, and what it starts (clients, pytest), on the other half."""
    if not isolate:
        yield
        return
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--isolate needs at least 2 CPUs")
    server_part, client_part = cpus[: len(cpus) // 2], cpus[len(cpus) // 2 :]
    os.sched_setaffinity(0, server_part)  # inherited by the server and its workers
    log(f"{server} on CPUs {server_part}, clients on CPUs {client_part}")
    try:
        yield
    finally:
        os.sched_setaffinity(0, client_part)


@contextlib.contextmanager
def batching_server(
    answers: Path, *, isolate: bool = False, step_s: float, steps: int
) -> Iterator[str]:
    """``tests/support/openai_server.py`` answering as a continuously batching server does
    (requests joining at one step are answered together ``steps`` steps later): a stand-in
    for vLLM whose pace does not drift, so only the clients differ between contenders."""
    settings = json.dumps({"batch_step": step_s, "batch_steps": steps})
    with contextlib.ExitStack() as stack:
        with server_cpus(isolate, "the batching server"):
            server = fake_server("--answers", str(answers), "--settings", settings)
            url = stack.enter_context(server)
        yield url


@contextlib.contextmanager
def vllm_server(logs_dir: Path, *, isolate: bool = False) -> Iterator[str]:
    """Real vLLM (CPU build) serving models/tiny-arith, started the way the plugin starts it.

    With ``isolate``, vLLM gets the first half of this process's CPUs and everything started
    afterwards (clients, pytest) the other half, as when the server has its own machine.
    """
    from pytest_modal_eval.config.schema import InfraConfig, VllmConfig
    from pytest_modal_eval.serving.endpoint import ServerProfile
    from pytest_modal_eval.serving.vllm.local import LocalVllmServer

    profile = ServerProfile(
        backend="local",
        model=str(DEMO_MODEL),
        infra=InfraConfig.model_validate({}),
        vllm=VllmConfig.model_validate({"max_model_len": 512}),
    )
    server = LocalVllmServer(
        profile, logs_dir=logs_dir, python=vllm_python(), served_model_name=MODEL_NAME
    )
    log(f"starting vLLM (log: {server.log_path}); about a minute")
    started = time.monotonic()
    with server_cpus(isolate, "vLLM"):
        endpoint = server.start()
    log(f"vLLM is up after {time.monotonic() - started:.0f} s")
    try:
        yield endpoint.base_url.removesuffix("/v1")
    finally:
        server.stop()


@contextlib.contextmanager
def proxy_process(upstream: str, log_path: Path) -> Iterator[str]:
    """The plugin's redirect proxy, standalone (``python -m`` its module)."""
    command = [
        PYTHON,
        "-m",
        "pytest_modal_eval.serving.modal.redirect_proxy",
        "--upstream",
        upstream,
    ]
    with _listening([*command, "--log", str(log_path)], "the proxy", 15) as url:
        yield url


@contextlib.contextmanager
def cpu_load(share: float, period_ms: float = 5.0) -> Iterator[None]:
    """Another process using ``share`` of one CPU (busy, then asleep, every ``period_ms``)."""
    busy = share * period_ms
    command = [PYTHON, "-m", "benchmarks._cpu_load", str(busy), str(period_ms - busy)]
    process = subprocess.Popen(command, cwd=REPO)
    try:
        time.sleep(0.2)  # started and in its loop
        yield
    finally:
        process.kill()
        process.wait()


# -- workloads ------------------------------------------------------------------------------


def demo_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DEMO_DATA.read_text().splitlines() if line.strip()]


def write_workload(path: Path, n: int, rows: Sequence[dict[str, Any]] | None = None) -> Path:
    """``n`` examples of the demo's kind: its 200 questions, repeated in order."""
    source = list(rows or demo_rows())
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            handle.write(json.dumps(source[i % len(source)]) + "\n")
    return path


def write_arithmetic(path: Path, n: int) -> Path:
    """``n`` distinct "What is A + B?" questions (the test server knows every answer)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            a, b = 10 + i % 9000, 3 + i // 9000
            handle.write(json.dumps({"question": f"What is {a} + {b}?", "answer": str(a + b)}))
            handle.write("\n")
    return path


def chat_bodies(
    rows: Sequence[dict[str, Any]], *, max_tokens: int = MAX_TOKENS
) -> list[dict[str, Any]]:
    """The request bodies verifiers sends for these rows (file-qa, the demo's sampling)."""
    return [
        {
            "model": MODEL_NAME,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": row["question"]},
            ],
            "temperature": 0.0,
            "top_p": 1.0,
            "max_completion_tokens": max_tokens,
            "seed": 0,
        }
        for row in rows
    ]


def make_project(
    root: Path,
    data: Path,
    *,
    name: str = "bench",
    max_concurrent: int = 64,
    rollouts: int = 1,
    max_tokens: int = MAX_TOKENS,
) -> Path:
    """A throw-away project with one file-qa benchmark over ``data``."""
    (root / "evals").mkdir(parents=True, exist_ok=True)
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (root / "evals" / f"{name}.yaml").write_text(
        textwrap.dedent(
            f"""\
            env_id: file-qa
            env_args:
              path: {json.dumps(str(data))}
              system_prompt: {json.dumps(SYSTEM_PROMPT)}
            sampling: {{temperature: 0.0, max_tokens: {max_tokens}}}
            eval: {{max_concurrent: {max_concurrent}, rollouts: {rollouts}}}
            gate: {{min_avg_reward: 0.0}}
            """
        ),
        encoding="utf-8",
    )
    return root


# -- the contenders -------------------------------------------------------------------------


@dataclass
class Run:
    """One measured run: wall time, completion timestamps, peak RSS (MB) where known."""

    wall_s: float
    times: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    peak_rss_mb: float = float("nan")
    errors: int = 0
    returncode: int = 0
    rss: list[tuple[float, float]] = field(default_factory=list)  # (perf_counter, MB) samples
    cpu_s: float = float("nan")  # client process CPU (all threads) over the measured requests

    @property
    def rps(self) -> float:
        return window_rps(self.times)

    @property
    def cpu_ms(self) -> float:
        """Client CPU milliseconds per request."""
        return self.cpu_s / max(1, len(self.times) - 1) * 1000


def run_plugin(
    project: Path,
    base_url: str,
    *,
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    proxy_upstream: str | None = None,
    timeout: float = 900,
    rss_every: float = 0.25,
    fresh: bool = True,
) -> Run:
    """``pytest evals --model ... --base-url ...`` in ``project``, as a user runs it.

    ``benchmarks._probe`` timestamps each example's subtest report and reads the peak RSS.
    With ``proxy_upstream``, the plugin's ``ProxyThread`` runs inside that pytest process in
    front of the upstream, as with the Modal backend, and ``base_url`` is ignored.
    """
    probe = project / "probe.json"
    for stale in (probe, probe.with_name(f"{probe.name}.times")):
        stale.unlink(missing_ok=True)
    extra = {"BENCH_PROBE_OUT": str(probe), **(env or {})}
    if proxy_upstream is not None:
        port = free_port()
        base_url = f"http://127.0.0.1:{port}"
        extra |= {
            "BENCH_PROXY_UPSTREAM": proxy_upstream,
            "BENCH_PROXY_PORT": str(port),
            "BENCH_PROXY_LOG": str(project / "proxy.log"),
        }
    rss: list[tuple[float, float]] = []
    started = time.perf_counter()
    with start_plugin(project, base_url, args=args, env=extra, fresh=fresh) as process:
        try:
            while process.poll() is None:
                if time.perf_counter() - started > timeout:
                    raise TimeoutError(f"pytest ran longer than {timeout} s in {project}")
                if (mb := _rss_mb(process.pid)) is not None:
                    rss.append((time.perf_counter() - started, mb))
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=rss_every)  # returns as soon as pytest exits
        finally:
            if process.poll() is None:
                process.kill()
    wall = time.perf_counter() - started
    data = json.loads(probe.read_text()) if probe.exists() else {}
    return Run(
        wall_s=wall,
        times=_probe_times(probe),
        peak_rss_mb=float(data.get("peak_rss_mb", float("nan"))),
        returncode=process.returncode,
        rss=[(started + offset, mb) for offset, mb in rss],
        cpu_s=float(data.get("cpu_window_s") or float("nan")),
    )


def _probe_times(probe: Path) -> list[float]:
    times = array("d")
    path = probe.with_name(f"{probe.name}.times")
    if path.exists():
        times.frombytes(path.read_bytes())
    return times.tolist()


def run_verifiers_loop(base_url: str, data: Path, concurrency: int, *, client: str) -> Run:
    """The plugin's verifiers layer alone (``benchmarks._verifiers_loop``), in a subprocess."""
    out = data.with_name(f"loop-{client}.json")
    started = time.perf_counter()
    subprocess.run(
        [PYTHON, "-m", "benchmarks._verifiers_loop", "--data", str(data), "--base-url", base_url,
         "--concurrency", str(concurrency), "--client", client, "--out", str(out)],
        cwd=REPO, env=bench_env(), check=True, timeout=900,
    )  # fmt: skip
    result = json.loads(out.read_text())
    return Run(
        wall_s=time.perf_counter() - started,
        times=result["times"],
        cpu_s=float(result["cpu_window_s"]),
    )


@contextlib.contextmanager
def start_plugin(
    project: Path,
    base_url: str,
    *,
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    fresh: bool = True,
) -> Iterator[subprocess.Popen[bytes]]:
    """The pytest process of :func:`run_plugin`, started; waited for (or killed) on exit."""
    command = [
        PYTHON, "-m", "pytest", "evals", "-p", "benchmarks._probe",
        "--model", MODEL_NAME, "--base-url", f"{base_url}/v1", "--api-key-env", NO_KEY_ENV,
        *(["--eval-fresh"] if fresh else []), *args,
    ]  # fmt: skip
    with (project / "pytest.log").open("ab") as output:
        process = subprocess.Popen(
            command, cwd=project, env=bench_env(**(env or {})), stdout=output, stderr=output
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                process.wait(timeout=900)


def _rss_mb(pid: int) -> float | None:
    """Resident memory of a process (MB), from /proc; None where there is no /proc."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def raw_client(base_url: str, bodies: Sequence[dict[str, Any]], concurrency: int) -> Run:
    """The floor: aiohttp sending ``bodies`` with ``concurrency`` requests in flight."""
    return asyncio.run(_raw_client(base_url, bodies, concurrency))


async def _raw_client(base_url: str, bodies: Sequence[dict[str, Any]], concurrency: int) -> Run:
    import aiohttp

    times: list[float] = []
    latencies: list[float] = []
    errors = 0
    pending = iter(bodies)
    url = f"{base_url}/v1/chat/completions"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def worker() -> None:
            nonlocal errors
            for body in pending:
                sent = time.perf_counter()
                try:
                    async with session.post(url, json=body) as response:
                        await response.read()
                        errors += response.status != 200
                except aiohttp.ClientError:
                    errors += 1
                done = time.perf_counter()
                times.append(done)
                latencies.append(done - sent)

        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return Run(wall_s=wall, times=times, latencies=latencies, errors=errors, cpu_s=cpu)


def run_vf_eval(base_url: str, data: Path, n: int, concurrency: int, workdir: Path) -> Run:
    """verifiers' own CLI on the same environment, data, sampling and server."""
    vf_eval = Path(PYTHON).with_name("vf-eval")
    command = [
        str(vf_eval), "file-qa",
        "-a", json.dumps({"path": str(data), "system_prompt": SYSTEM_PROMPT}),
        "-m", MODEL_NAME, "-b", f"{base_url}/v1", "-k", NO_KEY_ENV,
        "-n", str(n), "-r", "1", "-c", str(concurrency),
        "-t", str(MAX_TOKENS), "-T", "0", "-S", json.dumps({"top_p": 1.0, "seed": 0}),
        "-d", "-A",
    ]  # fmt: skip
    started = time.perf_counter()
    with (workdir / "vf-eval.log").open("ab") as output:
        result = subprocess.run(
            command, cwd=workdir, env=bench_env(), stdout=output, stderr=output, timeout=900
        )
    return Run(wall_s=time.perf_counter() - started, returncode=result.returncode)
