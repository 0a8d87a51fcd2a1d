class Run:
    def __init__(self, sink):
        self._sink = sink

    def log(self, data, step=None, commit=None):
        self._sink.append(dict(data))
