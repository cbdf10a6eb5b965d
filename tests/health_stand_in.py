"""A process that answers /health with 200 on the loopback port it is given: vLLM's server as far as its start goes,
for tests of what is done around a start (the launch's environment, its flags, the compile cache)."""

HEALTHY = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""
