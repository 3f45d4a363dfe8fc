"""Remote reads are opt-in in process too: a pipeline naming an HTTP server on loopback raises
PermissionDeniedError before any connection, until ``sluice.data.set_data_roots`` names the
endpoint. The only server is this test's, on 127.0.0.1."""

import http.server
import threading

import pytest

import sluice


class _Handler(http.server.BaseHTTPRequestHandler):
    body = b"alpha\nbeta\n"
    requests = []

    def _answer(self, with_body):
        _Handler.requests.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        if with_body:
            self.wfile.write(self.body)

    def do_HEAD(self):  # noqa: N802 (http.server's names)
        self._answer(False)

    def do_GET(self):  # noqa: N802
        self._answer(True)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    _Handler.requests = []
    s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=s.serve_forever, daemon=True)
    t.start()
    yield s
    s.shutdown()
    s.server_close()
    sluice.data.set_data_roots([])


def _read(url):
    ds = sluice.data.parse("text_line_dataset(['%s'])" % url)
    dist = sluice.MirroredStrategy(["CPU:0"]).experimental_distribute_dataset(ds)
    return [step.numpy().tolist() for step in dist]  # one replica: each step is a Tensor


def test_loopback_is_refused_until_a_root_names_it(server):
    port = server.server_address[1]
    url = "http://127.0.0.1:%d/lines.txt" % port
    with pytest.raises(sluice.errors.PermissionDeniedError) as refused:
        _read(url)
    assert "loopback" in str(refused.value)
    assert "--data_root=http://127.0.0.1:%d/" % port in str(refused.value)
    with pytest.raises(sluice.errors.PermissionDeniedError):
        _read("http://2130706433:%d/lines.txt" % port)  # 127.0.0.1, spelled as a number
    assert _Handler.requests == []

    sluice.data.set_data_roots(["http://127.0.0.1:%d/" % port])
    assert _read(url) == [b"alpha", b"beta"]
    assert _Handler.requests


def test_bad_roots_are_invalid_arguments():
    with pytest.raises(sluice.errors.InvalidArgumentError):
        sluice.data.set_data_roots(["/no/such/folder/anywhere"])
    with pytest.raises(sluice.errors.InvalidArgumentError):
        sluice.data.set_data_roots(["s3://bucket/../other"])
