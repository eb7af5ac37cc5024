#!/usr/bin/env python3
"""A stand-in for vLLM's OpenAI server (`python -m vllm.entrypoints.openai.api_server ...`): it
takes the server's arguments, answers /health, /v1/models, /v1/completions and /metrics, and
writes the arguments and the environment variables it was started with to FAKE_VLLM_RECORD (JSON),
so a test can check the command specbench built without vLLM installed.

Completions echo the prompt's last id up to `max_tokens`; with a speculative config every request
counts one draft of `num_speculative_tokens` tokens whose first is accepted.
"""

import argparse
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("--model")
parser.add_argument("--served-model-name", default="model")
parser.add_argument("--speculative-config", default="")
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, required=True)
ARGS, _ = parser.parse_known_args()
SPEC = json.loads(ARGS.speculative_config) if ARGS.speculative_config else {}
STATE = {"drafts": 0, "draft_tokens": 0, "accepted": 0}
if os.environ.get("FAKE_VLLM_RECORD"):
    with open(os.environ["FAKE_VLLM_RECORD"], "a") as f:
        f.write(json.dumps({"argv": sys.argv[1:], "kv": os.environ.get("VLLM_CPU_KVCACHE_SPACE")}) + "\n")


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        sys.stderr.write("fake vllm: " + (args[0] % args[1:]) + "\n")

    def _send(self, code, body, kind="application/json"):
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            return self._send(200, "")
        if self.path == "/v1/models":
            return self._send(200, {"data": [{"id": ARGS.served_model_name}]})
        if self.path == "/metrics":
            p = "vllm:spec_decode_"
            return self._send(200, f'{p}num_drafts_total{{engine="0"}} {STATE["drafts"]}\n'
                                   f'{p}num_draft_tokens_total{{engine="0"}} {STATE["draft_tokens"]}\n'
                                   f'{p}num_accepted_tokens_total{{engine="0"}} {STATE["accepted"]}\n'
                                   f'{p}num_accepted_tokens_per_pos_total{{engine="0",position="0"}} '
                                   f'{STATE["accepted"]}\n', "text/plain")
        self._send(404, {})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/completions" or body.get("model") != ARGS.served_model_name:
            return self._send(404, {"error": "unknown model or path"})
        ids = [body["prompt"][-1]] * body["max_tokens"]
        if SPEC and len(ids) > 2:
            STATE["drafts"] += 1
            STATE["draft_tokens"] += int(SPEC["num_speculative_tokens"])
            STATE["accepted"] += 1
        self._send(200, {"choices": [{"text": "", "token_ids": ids}], "usage": {"completion_tokens": len(ids)}})


ThreadingHTTPServer((ARGS.host, ARGS.port), Handler).serve_forever()
