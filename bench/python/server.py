"""Python HTTP benchmark server (bench/python/http-overhead.sh, issue 34): ThreadingHTTPServer,
keep-alive, each GET does a little pure-Python work and a json.dumps. Prints its port."""
import http.server
import json
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes

    def do_GET(self):
        total = 0
        for i in range(3000):
            total += i * i % 13
        body = json.dumps({"path": self.path, "total": total, "items": list(range(50))}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(srv.server_address[1], flush=True)
    srv.serve_forever()
