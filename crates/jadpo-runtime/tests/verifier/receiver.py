"""A webhook receiver that verifies every request with the official
Standard Webhooks library (PyPI `standardwebhooks`), as a real receiver
would: the signature against its secret, and the timestamp against its own
clock (five minutes either way).

    python receiver.py SECRET [SECRET ...]

It prints its port on the first line of stdout, then one JSON line per
request: {"path", "id", "timestamp", "verified": [one bool per secret],
"error"}. `POST /secret/N` answers 200 when secret N verifies, else 401.
`POST /busy/N` first answers 503 with `Retry-After: 1` to each new
`webhook-id`, without looking at it (a provider too busy to read it), then
behaves as `/secret/N`.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook

SECRETS = sys.argv[1:]
SEEN_BUSY = set()
# One line at a time: requests are handled on threads of their own.
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {k: v for k, v in self.headers.items()}
        parts = self.path.strip("/").split("/")
        kind, index = parts[0], int(parts[1])
        msg_id = self.headers.get("webhook-id")
        with LOCK:
            busy = kind == "busy" and msg_id not in SEEN_BUSY
            SEEN_BUSY.add(msg_id)
        if busy:
            self.answer(503, {"Retry-After": "1"}, None, [], None)
            return
        verified, error = [], None
        for secret in SECRETS:
            try:
                Webhook(secret).verify(body, headers)
                verified.append(True)
            except Exception as e:  # noqa: BLE001 - the reason is reported
                verified.append(False)
                error = f"{type(e).__name__}: {e}"
        status = 200 if verified[index] else 401
        self.answer(status, {}, msg_id, verified, error)

    def answer(self, status, extra, msg_id, verified, error):
        self.send_response(status)
        for k, v in extra.items():
            self.send_header(k, v)
        self.send_header("content-length", "0")
        self.end_headers()
        line = {
            "path": self.path,
            "status": status,
            "id": self.headers.get("webhook-id"),
            "timestamp": self.headers.get("webhook-timestamp"),
            "verified": verified,
            "error": error,
        }
        with LOCK:
            print(json.dumps(line), flush=True)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
