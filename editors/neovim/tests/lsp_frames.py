"""LSP framing for the plugin tests' stand-in servers (old_server.py, older_ctxfs.py): one message
read from, or written to, a byte stream with its Content-Length header. Not a server."""
import json


def read(stream):
    """The next message on `stream`, or None at its end."""
    length = None
    while True:
        line = stream.readline()
        if not line:
            return None
        line = line.strip()
        if not line:
            break
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return json.loads(stream.read(length))


def write(stream, msg, lock=None):
    """Writes `msg` to `stream` in one piece (under `lock` when given) and flushes it."""
    body = json.dumps(msg).encode()
    data = b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    if lock:
        with lock:
            stream.write(data)
            stream.flush()
    else:
        stream.write(data)
        stream.flush()
