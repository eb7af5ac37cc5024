#!/usr/bin/env python3
"""A stand-in for a streaming `llama-server` and an OpenAI-compatible server at once, for load runs:
`/health`, `/metrics` (llamacpp: and vllm: counters), `/v1/models`, and streamed `/completion`
(llama.cpp's events: one per token, then `stop` with `timings`) and `/v1/completions` (OpenAI
chunks, `[DONE]`). Answers are the prompt's last ids, cycled, up to the cap.

Run as a program it takes a server's arguments (only --host/--port matter; `-np N` is written to
FAKE_STREAM_RECORD when set, with each request's arrival); in a test it can run in a thread
(`serve(mode)`). FAKE_STREAM_MODE (or `mode`), what a completion does:

- ok        streams the answer (FAKE_STREAM_DELAY seconds between tokens, default 0);
- stall     sends one token, then nothing;
- drop      sends two tokens, then closes the connection;
- garbage   sends one token, then a line that is not a server-sent event;
- die       exits the whole process (a fatal line in its log) during the FAKE_STREAM_AT-th completion;
- textonly  (OpenAI) streams text chunks without token ids, with the final usage;
- noids     (llama.cpp) streams one token's id short (a held-back UTF-8 piece).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-reply (the point of the fault tests) is no error worth a traceback:
    printed from a server thread, it would land in whatever test runs next and is capturing stderr."""

    def handle_error(self, request, client_address) -> None:
        pass

STATE = {"requests": 0, "drafts": 0, "draft_tokens": 0, "accepted": 0}
LOCK = threading.Lock()


def make_handler(mode_of, delay: float, at: int, record):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            sys.stderr.write("fake: " + (args[0] % args[1:]) + "\n")

        def _send(self, code, body, kind="application/json"):
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                return self._send(200, '{"status":"ok"}')
            if self.path == "/v1/models":
                return self._send(200, '{"data":[{"id":"fake"}]}')
            if self.path == "/metrics":
                lines = []
                for p in ("llamacpp", "vllm"):
                    lines += [f"{p}:spec_decode_num_drafts_total {STATE['drafts']}",
                              f"{p}:spec_decode_num_draft_tokens_total {STATE['draft_tokens']}",
                              f"{p}:spec_decode_num_accepted_tokens_total {STATE['accepted']}",
                              f'{p}:spec_decode_num_accepted_tokens_per_pos_total{{position="0"}} {STATE["accepted"]}']
                return self._send(200, "\n".join(lines) + "\n", "text/plain")
            self._send(404, "{}")

        def _event(self, obj) -> None:
            data = (obj if isinstance(obj, str) else "data: " + json.dumps(obj)) + "\n\n"
            self.wfile.write(data.encode())
            self.wfile.flush()

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            mode = mode_of()
            with LOCK:
                STATE["requests"] += 1
                n_request = STATE["requests"]
            if record:
                with open(record, "a") as f:
                    f.write(json.dumps({"request": n_request, "t": time.time()}) + "\n")
            if mode == "die" and n_request >= at:
                sys.stderr.write("fatal: the fake server broke down\n")
                sys.stderr.flush()
                os._exit(3)
            prompt = body["prompt"]
            openai = self.path == "/v1/completions"
            n = int(body["max_tokens"] if openai else body["n_predict"])
            tokens = [prompt[-1 - (i % min(3, len(prompt)))] for i in range(n)]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            with LOCK:   # one draft of 2 tokens, one accepted, per request
                STATE["drafts"] += 1
                STATE["draft_tokens"] += 2
                STATE["accepted"] += 1
            for i, tok in enumerate(tokens):
                if mode == "stall" and i == 1:
                    time.sleep(3600)
                if mode == "drop" and i == 2:
                    self.wfile.flush()
                    self.connection.shutdown(2)
                    return
                if mode == "garbage" and i == 1:
                    self._event("<html>oops</html>")
                    return
                if openai:
                    choice = {"index": 0, "text": "x", "finish_reason": "length" if i == n - 1 else None}
                    if mode != "textonly":
                        choice["token_ids"] = [tok]
                    self._event({"choices": [choice]})
                else:
                    if mode == "noids" and i == 0:   # held back: its id never comes, the count does
                        continue
                    self._event({"content": "x", "tokens": [tok], "stop": False, "tokens_predicted": i + 1})
                if delay:
                    time.sleep(delay)
            if openai:
                self._event({"choices": [], "usage": {"prompt_tokens": len(prompt), "completion_tokens": n,
                                                      "total_tokens": len(prompt) + n}})
                self._event("data: [DONE]")
            else:
                self._event({"content": "", "tokens": [], "stop": True, "stop_type": "limit", "tokens_predicted": n,
                             "timings": {"prompt_n": len(prompt), "prompt_ms": 1.0, "predicted_n": n,
                                         "predicted_ms": 2.0, "draft_n": 2, "draft_n_accepted": 1}})
            self.close_connection = True

    return Handler


def serve(mode: str = "ok", delay: float = 0.0):
    """A server in a thread of this process: (its URL, the server object to `shutdown()`); `mode`
    may be changed later through the returned server's `mode` attribute."""
    server = QuietServer(("127.0.0.1", 0), None)
    server.mode = mode
    server.RequestHandlerClass = make_handler(lambda: server.mode, delay, 1, None)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server


def main():
    args = sys.argv[1:]
    host, port = args[args.index("--host") + 1], int(args[args.index("--port") + 1])
    record = os.environ.get("FAKE_STREAM_RECORD")
    if record and "-np" in args:
        with open(record, "a") as f:
            f.write(json.dumps({"np": int(args[args.index("-np") + 1]), "c": int(args[args.index("-c") + 1]),
                                "pid": os.getpid()}) + "\n")
    mode = os.environ.get("FAKE_STREAM_MODE", "ok")
    delay = float(os.environ.get("FAKE_STREAM_DELAY", "0"))
    at = int(os.environ.get("FAKE_STREAM_AT", "1"))
    sys.stderr.write(f"fake streaming server on {host}:{port} ({mode})\n")
    sys.stderr.flush()
    server = QuietServer((host, port), make_handler(lambda: mode, delay, at, record))
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
