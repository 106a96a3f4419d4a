"""A loopback HTTP server that speaks the OpenAI chat-completions and embeddings protocols and Gemini's
generateContent and batchEmbedContents.

Each test pushes a script of replies; every request takes the next one. Replies can be text, a tool call (with
raw, possibly malformed, arguments), an HTTP error status (429, 500 ...) or a delay before any of those, so the
real `openai` and `google-genai` clients can be tested against rate limits, server errors and timeouts.
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _model_of(path: str, body: dict) -> str | None:
    if ":generateContent" in path or ":batchEmbedContents" in path:
        return path.rsplit("/models/", 1)[-1].split(":", 1)[0]
    return body.get("model")


def fake_embedding(text: str, dims: int = 32) -> list[float]:
    """A deterministic embedding where texts sharing letter trigrams are close (so a search has a right answer)."""
    vector = [0.0] * dims
    padded = f"  {text.lower()} "
    for i in range(len(padded) - 2):
        vector[int(hashlib.md5(padded[i:i + 3].encode()).hexdigest(), 16) % dims] += 1.0
    return vector


@dataclass
class Reply:
    text: str | None = None
    tool: str | None = None
    args: dict | None = None
    raw_args: str | None = None        # OpenAI only: arguments sent verbatim (e.g. broken JSON)
    status: int = 200
    delay_s: float = 0.0
    usage: tuple[int, int] = (10, 5)   # input, output tokens


@dataclass
class Seen:
    path: str
    headers: dict
    body: dict


@dataclass
class FakeLLMServer:
    script: deque = field(default_factory=deque)                 # replies for any model without its own script
    scripts: dict[str, deque] = field(default_factory=dict)      # model name -> its replies
    requests: list[Seen] = field(default_factory=list)

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
                server.requests.append(Seen(self.path, dict(self.headers), body))
                queue = server.scripts.get(_model_of(self.path, body), server.script)
                embedding = self.path.endswith("/embeddings") or ":batchEmbedContents" in self.path
                # embedding calls answer by content unless a reply (an error) was scripted for them
                reply = queue.popleft() if queue else Reply() if embedding else Reply(status=500,
                                                                                      text="script exhausted")
                time.sleep(reply.delay_s)
                gemini = ":generateContent" in self.path
                if self.path.endswith("/embeddings") or ":batchEmbedContents" in self.path:
                    status, payload = server._render_embeddings(reply, self.path, body)
                else:
                    status, payload = server._render(reply, gemini, body)
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
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

    @staticmethod
    def _render(reply: Reply, gemini: bool, body: dict) -> tuple[int, dict]:
        if reply.status != 200:
            names = {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}
            return reply.status, {"error": {"code": reply.status, "message": f"injected {reply.status}",
                                            "status": names.get(reply.status, "UNKNOWN"), "type": "injected"}}
        n_in, n_out = reply.usage
        if gemini:
            parts = [{"text": reply.text}] if reply.text or not reply.tool else []
            if reply.tool:
                parts.append({"functionCall": {"name": reply.tool, "args": reply.args or {}}})
            return 200, {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
                         "usageMetadata": {"promptTokenCount": n_in, "candidatesTokenCount": n_out,
                                           "totalTokenCount": n_in + n_out}}
        message: dict = {"role": "assistant", "content": reply.text}
        if reply.tool:
            args = reply.raw_args if reply.raw_args is not None else json.dumps(reply.args or {})
            message["tool_calls"] = [{"id": "call_1", "type": "function",
                                      "function": {"name": reply.tool, "arguments": args}}]
        return 200, {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": body.get("model"),
                     "choices": [{"index": 0, "message": message,
                                  "finish_reason": "tool_calls" if reply.tool else "stop"}],
                     "usage": {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}}
