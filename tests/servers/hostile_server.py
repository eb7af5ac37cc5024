"""A server that answers engine requests the way a hostile (or broken) one would, in a thread of
the test process: llama-server's shape (`/health`, `/metrics` with `llamacpp:` series,
`/completion`) and vLLM's (`/v1/models`, `/v1/completions`, `vllm:` series), both at once.

Each completion answers the prompt's last id `n_predict` / `max_tokens` times and adds `counts`
to the /metrics counters (`positions`: per-position acceptances by their `position` label, any
string). What makes it hostile, each off by default:

- `timings`: values merged into the llama.cpp reply's `timings` (NaN, -5000, 1e12, a string);
- `reply`: the parsed completion replaced by whatever this returns (given the request's body);
- `drip`: seconds between bytes of the whole completion reply, status line and headers included
  (less than a socket timeout, so only a wall-clock deadline stops it);
- `flood`: bytes of junk sent as the completion's body, 1 MiB at a time, until the client goes
  (`declared`: the Content-Length it claims; None: none, the body ends when the connection does);
- `metrics_lines`: /metrics as that many counter lines, streamed; `no_metrics`: /metrics is 404;
- `models`: what /v1/models answers (JSON);
- `hostile_from`: the first completion (1-based) that is hostile; those before answer well and
  count one draft of 2 tokens, one accepted (a run's warm-up, its first questions);
- `health_drip`: seconds between bytes of the /health answer (a server that accepts the
  readiness probe and never quite answers it);
- `start`: counter totals before the first request; `printed`: how /metrics prints a counter
  (llama-server's C++ `<<` is `"%g" % value`: 6 significant digits, `1.23457e+06`).

Run as a program (`python hostile_server.py [--health-drip S] ... --host H --port P`, other
arguments ignored) it serves on that port, as a server specbench starts would.

`sent` counts the completion bytes that went out, so a test can see a client stop reading.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional

PIECE = 1 << 20


class HostileServer:
    def __init__(self, *, counts: Optional[dict[str, float]] = None, positions: Optional[dict[str, float]] = None,
                 timings: Optional[dict[str, Any]] = None, reply: Optional[Callable[[dict], Any]] = None,
                 drip: Optional[float] = None, flood: int = 0, declared: Optional[int] = None,
                 metrics_lines: int = 0, no_metrics: bool = False, models: Any = None, hostile_from: int = 1,
                 health_drip: Optional[float] = None, start: Optional[dict[str, float]] = None,
                 printed: Callable[[float], str] = str, port: int = 0) -> None:
        self.counts = {"drafts": 2, "draft_tokens": 6, "accepted": 2, **(counts or {})}
        self.positions = {"0": 1, "1": 1} if positions is None else positions
        self.timings, self.reply, self.drip, self.flood, self.declared = timings or {}, reply, drip, flood, declared
        self.metrics_lines, self.no_metrics, self.hostile_from = metrics_lines, no_metrics, hostile_from
        self.models = {"data": [{"id": "served"}]} if models is None else models
        self.health_drip, self.printed = health_drip, printed
        self.totals: dict[str, float] = {"drafts": 0, "draft_tokens": 0, "accepted": 0, **(start or {})}
        self.pos_totals: dict[str, float] = {}
        self.requests = self.sent = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/health":
                    if outer.health_drip:
                        return self.dribble(b'{"status":"ok"}', outer.health_drip)
                    return self.send(200, b'{"status":"ok"}')
                if self.path == "/v1/models":
                    return self.send(200, json.dumps(outer.models).encode())
                if self.path == "/metrics" and not outer.no_metrics:
                    if outer.metrics_lines:
                        return self.stream(_metric_lines(outer.metrics_lines), declared=None)
                    return self.send(200, outer.metrics_text().encode(), "text/plain")
                self.send(404, b"{}")

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests += 1
                    hostile = outer.requests >= outer.hostile_from
                n = int(body.get("n_predict", body.get("max_tokens", 1)))
                tokens = [body["prompt"][-1]] * n
                outer.add(hostile)
                if hostile and outer.flood:
                    return self.stream(_junk(outer.flood), declared=outer.declared)
                timings = {"prompt_n": len(body["prompt"]), "prompt_ms": 1.5, "predicted_n": n, "predicted_ms": 10.0,
                           "draft_n": 6, "draft_n_accepted": 2, **(outer.timings if hostile else {})}
                answer: Any = ({"choices": [{"text": "x", "token_ids": tokens}], "usage": {"completion_tokens": n}}
                               if self.path == "/v1/completions" else
                               {"tokens": tokens, "content": "x", "timings": timings, "stop_type": "limit"})
                if hostile and outer.reply is not None:
                    answer = outer.reply(body)
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                if hostile and outer.drip:
                    return self.dribble(data, outer.drip)
                self.send(200, data)

            def send(self, code: int, data: bytes, kind: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def stream(self, pieces, declared: Optional[int]) -> None:
                """A body of `pieces`, with a Content-Length of `declared` or ended by closing."""
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if declared is not None:
                    self.send_header("Content-Length", str(declared))
                else:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                try:
                    for piece in pieces:
                        self.wfile.write(piece)
                        outer.sent += len(piece)
                except OSError:  # the client stopped reading: what it should do
                    self.close_connection = True

            def dribble(self, data: bytes, every: float) -> None:
                raw = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                       f"Connection: close\r\n\r\n").encode() + data
                self.close_connection = True
                try:
                    for i in range(len(raw)):
                        self.wfile.write(raw[i:i + 1])
                        self.wfile.flush()
                        outer.sent += 1
                        time.sleep(every)
                except OSError:
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def add(self, hostile: bool) -> None:
        with self.lock:
            counts = self.counts if hostile else {"drafts": 1, "draft_tokens": 2, "accepted": 1}
            positions = self.positions if hostile else {"0": 1}
            for k, v in counts.items():
                self.totals[k] = self.totals.get(k, 0) + v
            for k, v in positions.items():
                self.pos_totals[k] = self.pos_totals.get(k, 0) + v

    def metrics_text(self) -> str:
        lines = []
        for prefix in ("llamacpp", "vllm"):
            p = f"{prefix}:spec_decode_"
            shown = {k: self.printed(v) for k, v in self.totals.items()}
            lines += [f"# HELP {p}num_drafts_total drafts", f"{p}num_drafts_total {shown['drafts']}",
                      f"{p}num_draft_tokens_total {shown['draft_tokens']}",
                      f"{p}num_accepted_tokens_total {shown['accepted']}"]
            lines += [f'{p}num_accepted_tokens_per_pos_total{{position="{k}"}} {v}' for k, v in self.pos_totals.items()]
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "HostileServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _junk(total: int):
    piece = b"[" + b"1," * (PIECE // 2 - 1) + b"1"
    sent = 0
    while sent < total:
        yield piece[: total - sent]
        sent += len(piece)


def _metric_lines(n: int):
    line = b"llamacpp:spec_decode_num_drafts_total 1\n"
    per = 20000
    for i in range(0, n, per):
        yield line * min(per, n - i)


def main(argv: list[str]) -> None:
    """Serve on `--port` (a server specbench starts); `--health-drip S` as the option."""
    drip = float(argv[argv.index("--health-drip") + 1]) if "--health-drip" in argv else None
    server = HostileServer(health_drip=drip, port=int(argv[argv.index("--port") + 1]))
    print(f"hostile server listening on {server.url}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
