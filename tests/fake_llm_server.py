"""A loopback HTTP server that speaks the OpenAI chat-completions and embeddings protocols and Gemini's
generateContent and batchEmbedContents.

Each test pushes a script of replies; every request takes the next one. Replies can be text, a tool call (with
raw, possibly malformed, arguments), an HTTP error status (429, 500 ...) or a delay before any of those, so the
real `openai` and `google-genai` clients can be tested against rate limits, server errors and timeouts.

A twin run (`tests/twins/`) gives the server a `route`: each request is then told apart by (task, role), read from
what it holds, and answered from that pair's own script, so two harnesses that order their calls differently (one
task at a time, or many trials side by side) get the same replies; every request is logged with its pair.
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


def _model_of(path: str, body: dict) -> str | None:
    if ":generateContent" in path or ":batchEmbedContents" in path:
        return path.rsplit("/models/", 1)[-1].split(":", 1)[0]
    return body.get("model")


def fake_embedding(text: str, dims: int = 32) -> list[float]:
    """A deterministic embedding where texts sharing letter trigrams are close (so a search has a right answer), of
    unit length as OpenAI's and Gemini's are: an index by L2 distance (LangChain's FAISS) and one by cosine rank
    them alike, as they do real embeddings."""
    vector = [0.0] * dims
    padded = f"  {text.lower()} "
    for i in range(len(padded) - 2):
        vector[int(hashlib.md5(padded[i:i + 3].encode()).hexdigest(), 16) % dims] += 1.0
    # and a little of the text's own, so two texts tie no more often than real embeddings do (a tie's order is
    # each index's own business, not what a twin compares)
    noise = hashlib.sha256(text.encode()).digest()
    vector = [v + noise[j % len(noise)] / 25_500 for j, v in enumerate(vector)]
    norm = sum(v * v for v in vector) ** 0.5 or 1.0
    return [v / norm for v in vector]


@dataclass
class Reply:
    text: str | None = None
    tool: str | None = None
    args: dict | None = None
    raw_args: str | None = None        # OpenAI only: arguments sent verbatim (e.g. broken JSON)
    status: int = 200
    delay_s: float = 0.0
    usage: tuple[int, int] | None = (10, 5)   # input, output tokens; None: the response carries no usage
    headers: dict = field(default_factory=dict)   # extra response headers (Retry-After, retry-after-ms)
    retry_delay: str | None = None     # Gemini: a RetryInfo detail in the error body ("5s")
    finish: str | None = None          # finish_reason (OpenAI) / finishReason (Gemini) other than the normal one
    empty: bool = False                # HTTP 200 with no choices / no candidates
    block_reason: str | None = None    # Gemini: promptFeedback.blockReason and no candidates
    signature: str | None = None       # Gemini: a thoughtSignature on the part (base64)
    message: str | None = None         # an error status's message (default: "injected <status>")
    calls: list | None = None          # several tool calls in one reply: [{"tool": ..., "args": {...}}, ...]


@dataclass
class Seen:
    path: str
    headers: dict
    body: dict
    key: tuple | None = None           # (task, role) under a `route`
    reply: dict | None = None          # the reply it got, as scripted (under a `route`)


@dataclass
class FakeLLMServer:
    script: deque = field(default_factory=deque)                 # replies for any model without its own script
    scripts: dict[str, deque] = field(default_factory=dict)      # model name -> its replies
    requests: list[Seen] = field(default_factory=list)
    require_signatures: bool = False   # refuse a request that sends back a signed functionCall without its signature
    issued_signatures: set = field(default_factory=set)
    defaults: dict = field(default_factory=dict)    # model or route key -> the reply when its script is empty
    rpm: dict = field(default_factory=dict)         # model -> requests allowed per `window_s`; past it: 429, Retry-After
    window_s: float = 60.0
    served: list = field(default_factory=list)      # (time, model, status) of every chat request answered
    route: "Callable[[str, dict], tuple] | None" = None   # (path, body) -> (task, role): scripts keyed by the pair
    on_request: "Callable[[Seen], None] | None" = None    # called with each request as it is answered (a log)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _over_limit(self, model: str | None) -> float | None:
        """Seconds until `model`'s window has room, when a request now would pass its limit (None: it may go)."""
        limit = self.rpm.get(model)
        if not limit:
            return None
        now = time.monotonic()
        recent = [t for t, m, status in self.served if m == model and status == 200 and now - t < self.window_s]
        return self.window_s - (now - recent[0]) if len(recent) >= limit else None

    def push(self, *replies: Reply, model: str | None = None) -> None:
        (self.scripts.setdefault(model, deque()) if model else self.script).extend(replies)

    def requests_for(self, model: str) -> list[Seen]:
        return [r for r in self.requests if _model_of(r.path, r.body) == model]

    def start(self) -> "FakeLLMServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                seen = Seen(self.path, dict(self.headers), body)
                model = _model_of(self.path, body)
                with server._lock:                 # a pair's replies go out in the order its requests came
                    if server.route is not None:
                        seen.key = server.route(self.path, body)
                        queue = server.scripts.get(seen.key, deque())
                    else:
                        queue = server.scripts.get(model, server.script)
                    embedding = self.path.endswith("/embeddings") or ":batchEmbedContents" in self.path
                    # embedding calls answer by content unless a reply (an error) was scripted for them
                    reply = queue.popleft() if queue else Reply() if embedding else \
                        server.defaults.get(seen.key) or server.defaults.get(model) or \
                        Reply(status=500, text=f"script exhausted for {seen.key or model}")
                    seen.reply = asdict(reply)
                    server.requests.append(seen)
                if server.on_request is not None:
                    server.on_request(seen)
                if not embedding:
                    with server._lock:                 # the check and the count together: a limit never passed
                        if (wait := server._over_limit(model)) is not None:
                            reply = Reply(status=429, headers={"Retry-After": f"{max(1, round(wait))}"},
                                          retry_delay=f"{max(1, round(wait))}s", message="rate limit exceeded")
                        server.served.append((time.monotonic(), model, reply.status))
                time.sleep(reply.delay_s)
                gemini = ":generateContent" in self.path
                if self.path.endswith("/embeddings") or ":batchEmbedContents" in self.path:
                    status, payload = server._render_embeddings(reply, self.path, body)
                elif gemini and (counts := FakeLLMServer._unanswered_calls(body)):
                    status, payload = 400, {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message":
                                                      "Please ensure that the number of function response parts is "
                                                      f"equal to the number of function call parts of the function "
                                                      f"call turn ({counts})."}}
                elif gemini and server.require_signatures and server._unsigned_call(body):
                    status, payload = 400, {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message":
                                                      "Function call is missing a thought_signature in functionCall "
                                                      "parts."}}
                else:
                    status, payload = server._render(reply, gemini, body)
                    if reply.signature:
                        server.issued_signatures.add(reply.signature)
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    for name, value in reply.headers.items():
                        self.send_header(name, str(value))
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout): fine
                    pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_port}"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    @staticmethod
    def _render_embeddings(reply: Reply, path: str, body: dict) -> tuple[int, dict]:
        if reply.status != 200:
            return FakeLLMServer._render(reply, False, body)
        if ":batchEmbedContents" in path:
            texts = [r["content"]["parts"][0]["text"] for r in body["requests"]]
            return 200, {"embeddings": [{"values": fake_embedding(t)} for t in texts]}
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        return 200, {"object": "list", "model": body.get("model"),
                     "data": [{"object": "embedding", "index": i, "embedding": fake_embedding(t)}
                              for i, t in enumerate(texts)],
                     "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)}}

    def _unsigned_call(self, body: dict) -> bool:
        """A model turn sent back with a functionCall part this server signed, but without the signature."""
        return bool(self.issued_signatures) and any(
            "functionCall" in part and part.get("thoughtSignature") not in self.issued_signatures
            for content in body.get("contents", []) if content.get("role") == "model"
            for part in content.get("parts", []))

    @staticmethod
    def _unanswered_calls(body: dict) -> str | None:
        """As Gemini: a model turn's functionCall parts must each be answered by a functionResponse part of the
        turn after it; the counts, where they differ."""
        contents = body.get("contents", [])
        for turn, after in zip(contents, contents[1:]):
            calls = sum("functionCall" in part or "function_call" in part for part in turn.get("parts", [])) \
                if turn.get("role") == "model" else 0       # proto JSON: either spelling (litellm sends snake_case)
            answers = sum("functionResponse" in part or "function_response" in part for part in after.get("parts", []))
            if calls and calls != answers:
                return f"{calls} calls, {answers} responses"
        return None

    @staticmethod
    def _calls(reply: Reply) -> list[tuple[str, dict]]:
        if reply.calls:
            return [(c["tool"], c.get("args") or {}) for c in reply.calls]
        return [(reply.tool, reply.args or {})] if reply.tool else []

    @staticmethod
    def _render(reply: Reply, gemini: bool, body: dict) -> tuple[int, dict]:
        if reply.status != 200:
            names = {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}
            error = {"code": reply.status, "message": reply.message or f"injected {reply.status}",
                     "status": names.get(reply.status, "UNKNOWN"), "type": "injected"}
            if reply.retry_delay:
                error["details"] = [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                     "retryDelay": reply.retry_delay}]
            return reply.status, {"error": error}
        n_in, n_out = reply.usage or (0, 0)
        if gemini:
            usage = {"usageMetadata": {"promptTokenCount": n_in, "candidatesTokenCount": n_out,
                                       "totalTokenCount": n_in + n_out}} if reply.usage else {}
            if reply.block_reason:
                return 200, {"promptFeedback": {"blockReason": reply.block_reason}, **usage}
            if reply.empty:
                return 200, {"candidates": [], **usage}
            parts = [{"text": reply.text}] if reply.text or not (reply.tool or reply.calls or reply.finish) else []
            for i, (name, args) in enumerate(FakeLLMServer._calls(reply)):
                call = {"functionCall": {"name": name, "args": args}}
                if reply.signature and i == 0:
                    call["thoughtSignature"] = reply.signature
                parts.append(call)
            candidate = {"content": {"role": "model", "parts": parts}, "finishReason": reply.finish or "STOP"}
            if not parts:
                del candidate["content"]["parts"]
            return 200, {"candidates": [candidate], **usage}
        message: dict = {"role": "assistant", "content": reply.text}
        calls = [{"name": name, "arguments": reply.raw_args if reply.raw_args is not None and i == 0 else
                  json.dumps(args)} for i, (name, args) in enumerate(FakeLLMServer._calls(reply))]
        legacy = "functions" in body                 # the legacy shape: one `function_call`, as OpenAI answers it
        if calls and legacy:
            message["function_call"] = calls[0]
        elif calls:
            message["tool_calls"] = [{"id": f"call_{i + 1}", "type": "function", "function": c}
                                     for i, c in enumerate(calls)]
        payload = {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": body.get("model"),
                   "choices": [] if reply.empty else [{
                       "index": 0, "message": message,
                       "finish_reason": reply.finish or (("function_call" if legacy else "tool_calls") if calls
                                                         else "stop")}]}
        if reply.usage:
            payload["usage"] = {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}
        return 200, payload
