#!/usr/bin/env python3
"""VISION_URLS: `tensorfold serve --vision-urls lan|1` fetches https:// image URLs (system.md), against a local
HTTPS server whose certificate comes from a test authority (openssl; --vision-urls-ca trusts it).

- an https:// image gives the same prompt tokens and the same greedy reply as the same bytes as a data: URL
  (chat completions, a redirect to it, and Anthropic's url image source);
- what cannot be fetched is a 400 naming the part and why, and the server keeps serving: HTTP 404, a body over
  the 10 MiB image limit, a redirect to http://, a redirect loop, a certificate the server does not trust;
- the images of one request are fetched at the same time (the HTTPS server sees three requests in flight at once);
- VISION_URLS=1 fetches from public addresses only: 127.0.0.1 is refused before any connection.

Usage: serve_vision_urls_test.py TENSORFOLD_BINARY WORK_DIR
"""
import base64
import http.server
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from serve_process import Checks, ServeProcess  # noqa: E402

BIN, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
check = Checks()

shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
IMAGE = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "model", "tiny-vision", "images",
                          "b_pad_130x90.png"), "rb").read()


def openssl(*args):
    subprocess.run(["openssl"] + list(args), cwd=WORK, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# A certificate authority and the HTTPS server's certificate for 127.0.0.1.
openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=tensorfold test CA")
openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
with open(os.path.join(WORK, "san.ext"), "w") as f:
    f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
        "server.pem", "-days", "2", "-extfile", "san.ext")


in_flight = {"now": 0, "most": 0}
in_flight_cv = threading.Condition()


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (ssl.SSLError, BrokenPipeError, ConnectionResetError):
            pass  # the fetcher stopped reading (a body over its limit)

    def do_GET(self):
        port = self.server.server_address[1]
        if self.path == "/img.png":
            self.send(200, IMAGE, [("Content-Type", "image/png")])
        elif self.path.startswith("/together.png"):
            # Held until three are in flight (or 30 s pass, under the fetcher's own timeout: the TLS handshakes run
            # one after another in the accept thread, slow on a loaded machine): how many the fetcher runs at once.
            with in_flight_cv:
                in_flight["now"] += 1
                in_flight["most"] = max(in_flight["most"], in_flight["now"])
                in_flight_cv.notify_all()
                in_flight_cv.wait_for(lambda: in_flight["now"] >= 3, timeout=30)
            self.send(200, IMAGE, [("Content-Type", "image/png")])
            with in_flight_cv:
                in_flight["now"] -= 1
        elif self.path == "/redirect":
            self.send(302, headers=[("Location", "/img.png")])
        elif self.path == "/redirect-http":
            self.send(302, headers=[("Location", "http://127.0.0.1:%d/img.png" % port)])
        elif self.path == "/loop":
            self.send(302, headers=[("Location", "/loop")])
        elif self.path == "/big.png":
            self.send(200, IMAGE + b"\0" * (11 << 20), [("Content-Type", "image/png")])
        else:
            self.send(404, b"not here")


httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(os.path.join(WORK, "server.pem"), os.path.join(WORK, "server.key"))
httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
threading.Thread(target=httpd.serve_forever, daemon=True).start()
BASE = "https://127.0.0.1:%d" % httpd.server_address[1]


class Server(ServeProcess):
    def __init__(self, extra):
        super().__init__([BIN, "serve", "--host", "127.0.0.1", "--port", "0", "--context", "2048", "--served-name",
                          "m", "--cache-dir", os.path.join(WORK, "cache")] + extra)

    def post(self, path, body):
        return super().post(path, body, {"anthropic-version": "2023-06-01"})

    def chat(self, url):
        return self.post("/v1/chat/completions", {
            "model": "m", "max_tokens": 8, "temperature": 0, "ignore_eos": True,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                                       {"type": "image_url", "image_url": {"url": url}}]}]})


def reply(body):
    m = body["choices"][0]["message"]
    return (m.get("reasoning_content") or "") + "|" + (m.get("content") or ""), body["usage"]["prompt_tokens"]


def error_message(body):
    return (body.get("error") or {}).get("message", "")


t0 = time.time()
DATA_URL = "data:image/png;base64," + base64.b64encode(IMAGE).decode()

lan = Server(["--vision-urls", "lan", "--vision-urls-ca", os.path.join(WORK, "ca.pem")])
try:
    code, ref = lan.chat(DATA_URL)
    check(code == 200, "the data: URL image is answered (%d)" % code)
    for what, url in [("an https:// image", BASE + "/img.png"), ("a redirect to it", BASE + "/redirect")]:
        code, got = lan.chat(url)
        check(code == 200 and reply(got) == reply(ref),
              "%s gives the data: URL's prompt tokens and reply (%d): %r vs %r"
              % (what, code, reply(got) if code == 200 else error_message(got), reply(ref)))
    code, msg = lan.post("/v1/messages", {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": BASE + "/img.png"}}, {"type": "text", "text": "Hi"}]}]})
    code_text, text_only = lan.post("/v1/messages", {"model": "m", "max_tokens": 4, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]}]})
    check(code == 200 and code_text == 200 and msg["usage"]["input_tokens"] > text_only["usage"]["input_tokens"] + 10,
          "Anthropic's url image source is fetched: its tokens are in the prompt (%d: %s)" % (code, str(msg)[:200]))
    for what, path, pattern in [
            ("HTTP 404", "/missing.png", r"messages\[0\]\.content\[1\]: fetching https://127\.0\.0\.1:\d+/missing\.png: the server answered HTTP 404"),
            ("a body over the limit", "/big.png", r"larger than the 10485760 bytes allowed"),
            ("a redirect to http://", "/redirect-http", r"not https|Protocol"),
            ("a redirect loop", "/loop", r"more than 3 redirects")]:
        code, body = lan.chat(BASE + path)
        check(code == 400 and re.search(pattern, error_message(body)) is not None,
              "%s: 400 saying why (%d): %s" % (what, code, error_message(body)[:300]))
    code, three = lan.post("/v1/chat/completions", {
        "model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": BASE + "/together.png?%d" % i}} for i in range(3)]}]})
    check(code == 200 and in_flight["most"] == 3,
          "a request's three images are fetched at the same time (%d; at most %d in flight)" % (code, in_flight["most"]))
    code, again = lan.chat(BASE + "/img.png")
    check(code == 200 and reply(again) == reply(ref), "the server keeps serving after the refusals")
finally:
    lan.stop()

public = Server(["--vision-urls", "1", "--vision-urls-ca", os.path.join(WORK, "ca.pem")])
try:
    code, body = public.chat(BASE + "/img.png")
    check(code == 400 and "127.0.0.1, which is not a public address" in error_message(body),
          "VISION_URLS=1 refuses a private address (%d): %s" % (code, error_message(body)[:300]))
finally:
    public.stop()

untrusted = Server(["--vision-urls", "lan"])
try:
    code, body = untrusted.chat(BASE + "/img.png")
    check(code == 400 and re.search(r"certificate|SSL", error_message(body)) is not None,
          "a certificate the server does not trust is a 400 (%d): %s" % (code, error_message(body)[:300]))
finally:
    untrusted.stop()

httpd.shutdown()
check.finish("serve_vision_urls", t0)
