"""A small scripted OpenAI-compatible server on 127.0.0.1, for fault tests and latency benches.

`POST /v1/chat/completions` answers each request with the next *behaviour* of a schedule, then with `default`:

| behaviour        | what the client gets                                              |
|------------------|-------------------------------------------------------------------|
| `ok`             | 200, a chat completion whose text is `reply` (with usage)         |
| `429` / `429:S`  | 429 Too Many Requests, `Retry-After: S` (default 0)               |
| `500`, `503`     | that status with an OpenAI-style error body                       |
| `401`, `400`     | authentication / bad-request errors                               |
| `timeout:S`      | sleeps S seconds before answering (longer than the client waits)  |
| `nonjson`        | 200 with `text/html` garbage                                      |
| `badjson`        | 200, `application/json` content type, truncated JSON             |
| `nochoices`      | 200, valid JSON without `choices`                                 |
| `close`          | drops the connection without answering                            |

`route(request) -> behaviour | None` picks a behaviour per request (e.g. by prompt text) before the schedule does;
`reply` is a string or `fn(request) -> str`; `latency` adds a fixed delay to every answer (benches).
`hits` counts requests, `log` keeps (time, behaviour, request) for each.

Run it alone: `python tests/fake_openai_server.py --port 8001 --latency 0.05 --reply "The answer is 42."`.
"""
from __future__ import annotations
import argparse, json, threading, time, uuid
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["FakeOpenAIServer"]

class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

class FakeOpenAIServer:
    def __init__(self, schedule=(), default="ok", reply="The answer is 42.", latency: float = 0.0, route=None,
                 host="127.0.0.1", port: int = 0, model="fake-model"):
        self.schedule, self.default, self.reply, self.latency, self.route = deque(schedule), default, reply, latency, route
        self.host, self.port, self.model = host, port, model
        self.hits, self.log, self.auth_headers = 0, [], []
        self._lock = threading.Lock()
        self._httpd = self._thread = None
        self._stopping = threading.Event()

    @property
    def url(self) -> str: return f"http://{self.host}:{self.port}/v1"

    def _next(self, req) -> str:
        with self._lock:
            self.hits += 1
            b = self.route(req) if self.route else None
            if b is None: b = self.schedule.popleft() if self.schedule else self.default
            self.log.append((time.time(), b, req))
            return b

    def _completion(self, req) -> dict:
        text = self.reply(req) if callable(self.reply) else self.reply
        prompt = " ".join(str(m.get("content", "")) for m in req.get("messages", []))
        pt, ct = max(1, len(prompt.split())), max(1, len(text.split()))
        return {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
                "model": req.get("model", self.model),
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}}

    def _handler(self):
        srv = self
        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            def log_message(self, *a): pass

            def _send(self, code, body, ctype="application/json", headers=()):
                data = body if isinstance(body, bytes) else (json.dumps(body) if not isinstance(body, str) else body).encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers: self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _error(self, code, msg, typ, headers=()):
                self._send(code, {"error": {"message": msg, "type": typ, "code": code}}, headers=headers)

            def do_GET(self):
                if self.path.rstrip("/") in ("/v1/models", "/models"):
                    self._send(200, {"object": "list", "data": [{"id": srv.model, "object": "model", "owned_by": "fake"}]})
                elif self.path == "/health": self._send(200, {"status": "ok"})
                else: self._error(404, "not found", "not_found")

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                if not self.path.rstrip("/").endswith("/chat/completions"): return self._error(404, "not found", "not_found")
                try: req = json.loads(raw or b"{}")
                except json.JSONDecodeError: return self._error(400, "request body is not JSON", "invalid_request_error")
                srv.auth_headers.append(self.headers.get("Authorization"))
                b = srv._next(req)
                if srv.latency: time.sleep(srv.latency)
                kind, _, arg = b.partition(":")
                if kind == "ok": return self._send(200, srv._completion(req))
                if kind == "429": return self._error(429, "Rate limit reached, slow down", "rate_limit_exceeded", [("Retry-After", arg or "0")])
                if kind in ("500", "502", "503"): return self._error(int(kind), "The server had an error", "server_error")
                if kind == "401": return self._error(401, "Incorrect API key provided", "invalid_request_error")
                if kind == "400": return self._error(400, "Invalid request: bad parameter", "invalid_request_error")
                if kind == "timeout":
                    srv._stopping.wait(float(arg or 5))
                    if srv._stopping.is_set(): return
                    try: return self._send(200, srv._completion(req))
                    except OSError: return          # the client gave up long ago
                if kind == "nonjson": return self._send(200, "<html><body>502 Bad Gateway (proxy)</body></html>", "text/html")
                if kind == "badjson": return self._send(200, '{"id": "x", "choices": [{"message": {"content": "tru')
                if kind == "nochoices": return self._send(200, {"id": "x", "object": "chat.completion", "model": srv.model})
                if kind == "close":
                    self.close_connection = True
                    try: self.connection.shutdown(2)
                    except OSError: pass
                    return
                return self._error(500, f"fake server: unknown behaviour {b!r}", "server_error")
        return H

    def start(self) -> FakeOpenAIServer:
        self._httpd = _Server((self.host, self.port), self._handler())
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fake-openai-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown(); self._httpd.server_close(); self._httpd = None

    def __enter__(self): return self.start()
    def __exit__(self, *a): self.stop()

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8001)
    ap.add_argument("--latency", type=float, default=0.0)
    ap.add_argument("--reply", default="The answer is 42.")
    ap.add_argument("--schedule", default="", help="comma-separated behaviours, e.g. 429:1,500,ok")
    a = ap.parse_args()
    s = FakeOpenAIServer([x for x in a.schedule.split(",") if x], reply=a.reply, latency=a.latency, port=a.port).start()
    print(f"fake OpenAI server on {s.url}", flush=True)
    try: s._thread.join()
    except KeyboardInterrupt: s.stop()
