"""A small scripted OpenAI-compatible server on 127.0.0.1, for fault tests and latency benches.

`POST /v1/chat/completions` answers each request with the next *behaviour* of a schedule, then with `default`:

| behaviour        | what the client gets                                              |
|------------------|-------------------------------------------------------------------|
| `ok`             | 200, a chat completion whose text is `reply` (with usage)         |
| `429` / `429:S`  | 429 Too Many Requests, `Retry-After: S` (default 0)               |
| `500`, `503`     | that status with an OpenAI-style error body                       |
| `401`, `400`     | authentication / bad-request errors                               |
| `refuse_schema`  | 400 naming `response_format` (a server without structured output) |
| `refuse_logprobs`| 400 naming `logprobs` (OpenAI's reasoning models)                 |
| `timeout:S`      | sleeps S seconds before answering (longer than the client waits)  |
| `nonjson`        | 200 with `text/html` garbage                                      |
| `badjson`        | 200, `application/json` content type, truncated JSON             |
| `nochoices`      | 200, valid JSON without `choices`                                 |
| `close`, `reset` | drops the connection without answering                            |
| `short`          | 200 whose body is shorter than its Content-Length, then a drop    |
| `hang`           | never answers (until the client gives up)                         |
| `null`           | 200, a completion whose content is null                           |
| `unreadable`     | 200, a completion whose text no answer parser reads               |

Fault injection: `faults={"429": 1, "500": 1, ...}` with `fault_rate=0.3` gives each request a fault with that probability,
drawn from `random.Random(seed)` with the weights given (`429:none` is a 429 without Retry-After). `down()` stops listening
(connections are refused) and drops what is open, `up()` listens again on the same port; `serial=True` answers one
request at a time (a server without continuous batching: the rest queue). `answered` counts 200 completions sent.

`ServerProcess(port, latency, reply)` runs it in its own process, to be killed and started again on the same port.

`route(request) -> behaviour | None` picks a behaviour per request (e.g. by prompt text) before the schedule does;
`reply` is a string or `fn(request) -> str`; `cached_tokens` (an int, or `fn(prompt_tokens) -> int`) is reported as the provider's cached prompt
tokens (`usage.prompt_tokens_details.cached_tokens`); `latency` adds a fixed delay to every answer (benches). A request with
`logprobs: true` gets `choices[0].logprobs.content` (one token per word, log-probability -len(word)/10; `logprobs=fn(text) -> [(token, logprob)]`
sets them, `logprobs=False` sends none, as a server without them).
`hits` counts requests, `log` keeps (time, behaviour, request) for each; `GET /v1/stats` gives `hits` and `answered` (for a
server run in its own process).

Run it alone: `python tests/fake_openai_server.py --port 8001 --latency 0.05 --reply "The answer is 42."`.
"""
from __future__ import annotations
import argparse, asyncio, json, os, random, signal, subprocess, sys, threading, time, urllib.request, uuid
from collections import deque

_USED_PORTS: set = set()      # every port a server of this process listened on (see `FakeOpenAIServer._listen`)

__all__ = ["FakeOpenAIServer", "ServerProcess"]

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests",
            500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}

class FakeOpenAIServer:
    "A scripted OpenAI-compatible HTTP/1.1 server (asyncio, in its own thread); see the module docs."
    def __init__(self, schedule=(), default="ok", reply="The answer is 42.", latency: float = 0.0, route=None,
                 host="127.0.0.1", port: int = 0, model="fake-model", faults: dict|None = None, fault_rate: float = 0.0, seed: int = 0,
                 serial: bool = False, cached_tokens=0, logprobs=True):
        self.cached_tokens = cached_tokens          # usage.prompt_tokens_details.cached_tokens: an int, or fn(prompt_tokens) -> int
        self.logprobs = logprobs                    # asked with logprobs=True: False sends none; True one per word (-len/10); fn(text) -> [(token, logprob)]
        self.schedule, self.default, self.reply, self.latency, self.route = deque(schedule), default, reply, latency, route
        self.faults, self.fault_rate, self._rng, self.serial = dict(faults or {}), fault_rate, random.Random(seed), serial
        self.answered, self.injected, self._serial_lock, self._conns = 0, {}, None, set()
        self.host, self.port, self.model = host, port, model
        self.hits, self.log, self.auth_headers = 0, [], []
        self._lock = threading.Lock()
        self._loop = self._server = self._thread = None

    @property
    def url(self) -> str: return f"http://{self.host}:{self.port}/v1"

    def _next(self, req) -> str:
        with self._lock:
            self.hits += 1
            b = self.route(req) if self.route else None
            if b is None and self.faults and self._rng.random() < self.fault_rate:
                b = self._rng.choices(list(self.faults), weights=list(self.faults.values()))[0]
                self.injected[b] = self.injected.get(b, 0) + 1
            if b is None: b = self.schedule.popleft() if self.schedule else self.default
            self.log.append((time.time(), b, req))
            return b

    def _completion(self, req) -> dict:
        text = self.reply(req) if callable(self.reply) else self.reply
        prompt = " ".join(str(m.get("content", "")) for m in req.get("messages", []))
        pt, ct = max(1, len(prompt.split())), max(1, len(text.split()))
        cached = self.cached_tokens(pt) if callable(self.cached_tokens) else self.cached_tokens
        usage = {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct, **({"prompt_tokens_details": {"cached_tokens": cached}} if cached else {})}
        return {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
                "model": req.get("model", self.model),
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}, **self._logprobs(req, text)}],
                "usage": usage}

    def _logprobs(self, req, text) -> dict:
        "The `logprobs` of a choice, when the request asks and the server gives them (OpenAI's shape: `content`, one entry per token)."
        if not req.get("logprobs") or not self.logprobs: return {}
        toks = self.logprobs(text) if callable(self.logprobs) else [(w, -len(w) / 10) for w in text.split()]
        return {"logprobs": {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []} for t, lp in toks]}}

    @staticmethod
    def _response(code, body, ctype="application/json", headers=()) -> bytes:
        data = body if isinstance(body, bytes) else (body if isinstance(body, str) else json.dumps(body)).encode()
        head = [f"HTTP/1.1 {code} {_REASONS.get(code, 'Status')}", f"Content-Type: {ctype}", f"Content-Length: {len(data)}",
                *(f"{k}: {v}" for k, v in headers)]
        return ("\r\n".join(head) + "\r\n\r\n").encode() + data          # one write: no Nagle/delayed-ACK stalls

    @staticmethod
    def _error(code, msg, typ, headers=()) -> bytes:
        return FakeOpenAIServer._response(code, {"error": {"message": msg, "type": typ, "code": code}}, headers=headers)

    async def _answer(self, method, path, headers, raw):
        "The bytes to send back (None: drop the connection)."
        path = path.split("?")[0].rstrip("/")
        if method == "GET":
            if path in ("/v1/models", "/models"):
                return self._response(200, {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "fake"}]})
            if path == "/health": return self._response(200, {"status": "ok"})
            if path in ("/v1/stats", "/stats"): return self._response(200, {"hits": self.hits, "answered": self.answered})
            return self._error(404, "not found", "not_found")
        if method != "POST" or not path.endswith("/chat/completions"): return self._error(404, "not found", "not_found")
        try: req = json.loads(raw or b"{}")
        except json.JSONDecodeError: return self._error(400, "request body is not JSON", "invalid_request_error")
        self.auth_headers.append(headers.get("authorization"))
        b = self._next(req)
        if self.serial:
            if self._serial_lock is None: self._serial_lock = asyncio.Lock()
            async with self._serial_lock:
                if self.latency: await asyncio.sleep(self.latency)
        elif self.latency: await asyncio.sleep(self.latency)
        kind, _, arg = b.partition(":")
        if kind == "ok":
            with self._lock: self.answered += 1
            return self._response(200, self._completion(req))
        if kind == "429": return self._error(429, "Rate limit reached, slow down", "rate_limit_exceeded", [] if arg == "none" else [("Retry-After", arg or "0")])
        if kind in ("500", "502", "503"): return self._error(int(kind), "The server had an error", "server_error")
        if kind == "401": return self._error(401, "Incorrect API key provided", "invalid_request_error")
        if kind == "400": return self._error(400, "Invalid request: bad parameter", "invalid_request_error")
        if kind == "refuse_logprobs": return self._error(400, "Unsupported parameter: 'logprobs' is not supported with this model.", "invalid_request_error")
        if kind == "refuse_schema": return self._error(400, "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model", "invalid_request_error")
        if kind == "timeout":
            await asyncio.sleep(float(arg or 5))
            return self._response(200, self._completion(req))
        if kind == "nonjson": return self._response(200, "<html><body>502 Bad Gateway (proxy)</body></html>", "text/html")
        if kind == "badjson": return self._response(200, '{"id": "x", "choices": [{"message": {"content": "tru')
        if kind == "nochoices": return self._response(200, {"id": "x", "object": "chat.completion", "model": self.model})
        if kind in ("close", "reset"): return None
        if kind == "hang": await asyncio.sleep(3600)
        if kind == "short":
            full = self._response(200, self._completion(req))
            return full[: len(full) - 20] + b"\x00DROP"          # fewer bytes than the Content-Length says, then the connection drops
        if kind in ("null", "unreadable"):
            c = self._completion(req)
            c["choices"][0]["message"]["content"] = None if kind == "null" else "Hmm, hard to say; many things could be true here."
            return self._response(200, c)
        return self._error(500, f"fake server: unknown behaviour {b!r}", "server_error")

    async def _conn(self, reader, writer):
        self._conns.add(asyncio.current_task())
        try:
            while True:
                line = await reader.readline()
                if not line: break
                method, path, *_ = line.decode("latin-1").split()
                headers = {}
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""): break
                    k, _, v = h.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                n = int(headers.get("content-length") or 0)
                raw = await reader.readexactly(n) if n else b""
                out = await self._answer(method, path, headers, raw)
                if out is None: break
                if out.endswith(b"\x00DROP"): writer.write(out[:-5]); await writer.drain(); break
                writer.write(out)
                await writer.drain()
                if headers.get("connection", "").lower() == "close": break
        except (ConnectionError, asyncio.IncompleteReadError, ValueError, asyncio.CancelledError): pass
        finally:
            self._conns.discard(asyncio.current_task())
            try: writer.close()
            except Exception: pass

    def down(self):
        "Stop listening (new connections are refused) and drop every open connection: a server going down for a restart."
        async def go():
            self._server.close()
            for t in list(self._conns): t.cancel()
        asyncio.run_coroutine_threadsafe(go(), self._loop).result(5)

    def up(self):
        "Listen again on the same port."
        async def go(): self._server = await asyncio.start_server(self._conn, self.host, self.port, backlog=512, reuse_address=True)
        asyncio.run_coroutine_threadsafe(go(), self._loop).result(5)

    async def _listen(self):
        """Listen on `port`; a free port (0) is one no earlier server of this process had: madlab shares an endpoint's breaker
        and limit per URL while a backend that used it lives, so a new server must not take an old one's URL."""
        if self.port: return await asyncio.start_server(self._conn, self.host, self.port, backlog=512)
        held = []                                   # ports this process used before, kept bound until a new one is found
        try:
            for _ in range(200):
                srv = await asyncio.start_server(self._conn, self.host, 0, backlog=512)
                if srv.sockets[0].getsockname()[1] not in _USED_PORTS: return srv
                held.append(srv)
            raise RuntimeError("no fresh port in 200 tries")
        finally:
            for h in held: h.close()

    def start(self) -> FakeOpenAIServer:
        ready = threading.Event()
        def run():
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(self._listen())
            self.port = self._server.sockets[0].getsockname()[1]
            _USED_PORTS.add(self.port)
            ready.set()
            self._loop.run_forever()
            for t in asyncio.all_tasks(self._loop): t.cancel()
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()
        self._thread = threading.Thread(target=run, name="fake-openai", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self):
        if self._loop is None or self._loop.is_closed(): return
        async def close():
            self._server.close()
            for t in asyncio.all_tasks():
                if t is not asyncio.current_task(): t.cancel()
        try:
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
        except RuntimeError: pass
        self._thread.join(5)

    def __enter__(self): return self.start()
    def __exit__(self, *a): self.stop()

class ServerProcess:
    "This server in its own process on `port`: `kill()` takes it down (SIGKILL: open connections reset, new ones refused), `start()` brings a new one up there."
    def __init__(self, port: int, latency: float = 0.0, reply: str = "The answer is 42."):
        self.port, self.latency, self.reply, self.p = port, latency, reply, None
    @property
    def url(self) -> str: return f"http://127.0.0.1:{self.port}/v1"
    def start(self) -> ServerProcess:
        self.p = subprocess.Popen([sys.executable, __file__, "--port", str(self.port), "--latency", str(self.latency), "--reply", self.reply],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.p.stdout.readline()                    # printed once it listens (nothing: it could not)
        if "fake OpenAI server on" not in line: self.kill(); raise RuntimeError(f"the server did not start on port {self.port}: {line!r}")
        return self
    def kill(self):
        if self.p is not None and self.p.poll() is None: os.kill(self.p.pid, signal.SIGKILL)
        if self.p is not None: self.p.wait(); self.p.stdout.close()
    def hits(self) -> int:
        "Requests this process has had (-1 while it is down)."
        try:
            with urllib.request.urlopen(f"{self.url}/stats", timeout=5) as r: return json.load(r)["hits"]
        except OSError: return -1
    def __enter__(self): return self.start()
    def __exit__(self, *a): self.kill()

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
