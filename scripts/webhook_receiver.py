#!/usr/bin/env python3
"""A tiny Standard Webhooks receiver for the demo (`cargo xtask run` prints how to start it).

Listens on 127.0.0.1:PORT, checks each event's signature with SECKILL_WEBHOOK_SECRET (the
`whsec_` key `cargo xtask run` writes to target/seckill-run.env), prints one line per event
(repeats of a webhook-id, which at-least-once delivery allows, are marked), and answers 204; a
bad signature gets 400. Python's standard library only: nothing to install.

    source target/seckill-run.env && python3 scripts/webhook_receiver.py 9000

`--delay SECONDS` answers each event that late (a slow receiver: `cargo xtask ab` measures that
`POST /buy` does not feel it); `--quiet` prints nothing per event.
"""

import base64
import hashlib
import hmac
import json
import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 64 * 1024
KEY = base64.b64decode(os.environ["SECKILL_WEBHOOK_SECRET"].removeprefix("whsec_"))
SEEN = set()
DELAY = 0.0
QUIET = False


def signed(message_id, timestamp, body):
    """The spec's v1 signature of one attempt."""
    mac = hmac.new(KEY, f"{message_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        if length > MAX_BODY:
            self.send_response(413)
            self.end_headers()
            return
        body = self.rfile.read(length)
        message_id = self.headers.get("webhook-id", "")
        expected = signed(message_id, self.headers.get("webhook-timestamp", ""), body)
        offered = self.headers.get("webhook-signature", "").split()
        if not any(hmac.compare_digest(expected, sig) for sig in offered):
            print(f"{time.strftime('%H:%M:%S')} bad signature on {message_id}: 400", flush=True)
            self.send_response(400)
            self.end_headers()
            return
        try:
            event = json.loads(body)
        except ValueError:
            event = {}
        data = event.get("data") if isinstance(event.get("data"), dict) else {}
        repeat = " (repeat)" if message_id in SEEN else ""
        SEEN.add(message_id)
        what = data.get("order_id") or data.get("sale_id", "")
        if not QUIET:
            print(f"{time.strftime('%H:%M:%S')} {event.get('type', '?')} {what} {data.get('status', '')} "
                  f"[{message_id}, signature ok]{repeat}", flush=True)
        time.sleep(DELAY)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass  # one line per event is printed above


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="A tiny Standard Webhooks receiver for seckill's demo.")
    parser.add_argument("port", type=int, nargs="?", default=9000)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--quiet", action="store_true", help="no line per event")
    args = parser.parse_args()
    DELAY, QUIET = args.delay, args.quiet
    print(f"receiving webhooks on http://127.0.0.1:{args.port}/ (Ctrl-C stops)", flush=True)
    ThreadingHTTPServer(("127.0.0.1", args.port), Receiver).serve_forever()
