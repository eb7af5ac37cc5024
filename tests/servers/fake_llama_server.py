#!/usr/bin/env python3
"""A stand-in for `llama-server` that misbehaves on purpose (the faults of tests/servers/):
it takes llama-server's arguments (only --host/--port matter), answers /health, /metrics and
/completion, and in FAKE_LLAMA_MODE:

- ok        answers the prompt's last ids (cycled) as tokens, with timings and counters;
- die       prints a fatal line and exits during the FAKE_LLAMA_AT-th /completion (default 1);
- hang      never answers /completion;
- garbage   answers /completion with text that is not JSON;
- count     answers one token more than timings.predicted_n says;
- bigid     answers a token id far outside any vocabulary;
- nostart   prints an error and exits before listening.
"""

import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE = os.environ.get("FAKE_LLAMA_MODE", "ok")
AT = int(os.environ.get("FAKE_LLAMA_AT", "1"))
STATE = {"requests": 0, "drafts": 0, "draft_tokens": 0, "accepted": 0, "pos": [0, 0, 0]}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # the log is the server's own output
        sys.stderr.write("fake: " + (args[0] % args[1:]) + "\n")

    def _send(self, code, body, kind="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            return self._send(200, '{"status":"ok"}')
        if self.path == "/metrics":
            p = "llamacpp:spec_decode_"
            lines = ["# HELP llamacpp:spec_decode_num_drafts_total drafts", f"{p}num_drafts_total {STATE['drafts']}",
                     f"{p}num_draft_tokens_total {STATE['draft_tokens']}",
                     f"{p}num_accepted_tokens_total {STATE['accepted']}"]
            lines += [f'{p}num_accepted_tokens_per_pos_total{{position="{k}"}} {v}' for k, v in enumerate(STATE["pos"])]
            return self._send(200, "\n".join(lines) + "\n", "text/plain")
        self._send(404, "{}")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        STATE["requests"] += 1
        if MODE == "die" and STATE["requests"] >= AT:
            sys.stderr.write("fatal: the fake server broke down\n")
            sys.stderr.flush()
            os._exit(3)
        if MODE == "hang":
            time.sleep(3600)
        if MODE == "garbage":
            return self._send(200, "<html>not json</html>", "text/html")
        prompt, n = body["prompt"], int(body["n_predict"])
        tokens = [prompt[-1 - (i % min(3, len(prompt)))] for i in range(n)]
        if MODE == "bigid":
            tokens[0] = 10**9
        # two drafts: one accepting 2 of 3 tokens, one accepting 0 of 3
        STATE["drafts"] += 2
        STATE["draft_tokens"] += 6
        STATE["accepted"] += 2
        STATE["pos"][0] += 1
        STATE["pos"][1] += 1
        timings = {"prompt_n": len(prompt), "prompt_ms": 1.5, "predicted_n": len(tokens) - (MODE == "count"),
                   "predicted_ms": 10.0, "draft_n": 6, "draft_n_accepted": 2}
        self._send(200, json.dumps({"tokens": tokens, "content": "x", "timings": timings, "stop_type": "limit"}))


def main():
    args = sys.argv[1:]
    if MODE == "nostart":
        sys.stderr.write("error: failed to load model\n")
        sys.exit(1)
    host, port = args[args.index("--host") + 1], int(args[args.index("--port") + 1])
    sys.stderr.write(f"fake llama-server listening on {host}:{port} ({MODE})\n")
    sys.stderr.flush()
    ThreadingHTTPServer((host, port), Handler).serve_forever()


if __name__ == "__main__":
    main()
