"""Rich display: the MIME bundles of ``display(obj)`` and of a cell's final value.

An object's bundle follows IPython's conventions: ``_repr_mimebundle_`` first, then the
``_repr_<type>_`` methods, always with ``text/plain`` (its repr). A matplotlib figure is
rendered to PNG. Only the MIME types of MIME_TYPES are kept; every value is a string,
the image types base64.

A cell sends at most MAX_DISPLAY_ITEMS displays whose values total at most
MAX_DISPLAY_BYTES, each in one frame. A display past a bound keeps its text/plain, with
a note, and the MIME items it loses are counted in its ``dropped``; past the item bound,
the text goes to stdout instead. Each display is encoded once: the frame whose size is
checked is the frame sent.
"""
import base64
import importlib.machinery
import json
import re
import sys
import threading

from kiln.wire import MAX_DISPLAY_BYTES, MAX_DISPLAY_ITEMS, DecodeError, parse_json, standard_base64

PLAIN = "text/plain"
_BINARY = ("image/png", "image/jpeg")
_METHODS = (("image/png", "_repr_png_"), ("image/jpeg", "_repr_jpeg_"),
            ("image/svg+xml", "_repr_svg_"), ("text/html", "_repr_html_"),
            ("text/markdown", "_repr_markdown_"), ("application/json", "_repr_json_"),
            ("text/latex", "_repr_latex_"))
MIME_TYPES = frozenset([PLAIN, *_BINARY, *(mime for mime, _ in _METHODS)])


_BACKEND_MODULE = "kiln.mplbackend"
MATPLOTLIB_BACKEND = "module://" + _BACKEND_MODULE


def _figure_png(obj):
    """Return a matplotlib figure as PNG bytes, closing it in pyplot; None when obj is
    not a figure."""
    if not type(obj).__module__.startswith("matplotlib.") or not hasattr(obj, "savefig"):
        return None
    import io
    out = io.BytesIO()
    obj.savefig(out, format="png")
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close(obj)  # shown: a later plt.show() does not show it again
    return out.getvalue()


def _show(*args, **kwargs):
    """plt.show() of kiln's backend: display each open figure as PNG and close them."""
    import builtins
    pyplot = sys.modules["matplotlib.pyplot"]
    for num in pyplot.get_fignums():
        builtins.display(pyplot.figure(num))  # the running cell's display
    pyplot.close("all")


class _Backend:
    """Makes kiln.mplbackend, the backend: Agg drawing, and show() as rich display.

    The loaders and the finder here keep importlib.abc's protocols without its classes:
    importing importlib.abc imports importlib.resources, pathlib and typing, a third of
    a worker's start."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        from matplotlib.backend_bases import FigureManagerBase
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        module.FigureCanvas = FigureCanvasAgg
        module.FigureManager = FigureManagerBase
        module.show = _show


class _MatplotlibFinder:
    """Finds matplotlib as the path does, and sets kiln's backend once it is loaded."""

    def find_spec(self, name, path=None, target=None):
        if name == _BACKEND_MODULE:
            return importlib.machinery.ModuleSpec(name, _Backend())
        if name != "matplotlib":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _BackendLoader(spec.loader)
        return spec


class _BackendLoader:
    """Loads matplotlib with its own loader, then makes kiln's backend its backend."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        module.use(MATPLOTLIB_BACKEND)


def use_matplotlib_backend():
    """Make kiln's backend matplotlib's when code imports matplotlib: figures draw with
    Agg, headless, and plt.show() displays them. The environment is left alone, so a
    child process's matplotlib is its own."""
    if not any(isinstance(f, _MatplotlibFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MatplotlibFinder())
    if "matplotlib" in sys.modules:
        sys.modules["matplotlib"].use(MATPLOTLIB_BACKEND)


def _value(mime, value):
    """Return value as the string the wire carries for mime, or None if it cannot be."""
    if isinstance(value, tuple) and len(value) == 2:  # (data, metadata), as IPython allows
        value = value[0]
    if mime in _BINARY:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return base64.b64encode(value).decode("ascii")
        if isinstance(value, str) and standard_base64(value):
            return value
        return None
    if mime == "application/json":
        if not isinstance(value, str):
            try:
                return json.dumps(value, allow_nan=False)
            except (TypeError, ValueError):
                return None
        try:
            parse_json(value.encode("utf-8"))  # one JSON value, as the host reads JSON
        except (UnicodeEncodeError, DecodeError):
            return None
        return value
    return utf8_text(value) if isinstance(value, str) else None


_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8_text(text):
    """Return text with each lone surrogate, which UTF-8 cannot carry, as U+FFFD."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def bundle(obj, plain=None):
    """Return obj's MIME bundle: a dict of MIME type to string, text/plain always there:
    plain, when given (obj's repr, made already), else repr(obj)."""
    data = {}
    method = getattr(obj, "_repr_mimebundle_", None)
    if callable(method) and not isinstance(obj, type):
        got = method()
        if isinstance(got, tuple):
            got = got[0]
        if isinstance(got, dict):
            for mime, value in got.items():
                if mime in MIME_TYPES and mime != PLAIN:
                    kept = _value(mime, value)
                    if kept is not None:
                        data[mime] = kept
    if not isinstance(obj, type):
        for mime, name in _METHODS:
            method = getattr(obj, name, None)
            if mime in data or not callable(method):
                continue
            got = method()
            if got is not None:
                kept = _value(mime, got)
                if kept is not None:
                    data[mime] = kept
        if "image/png" not in data:
            png = _figure_png(obj)
            if png is not None:
                data["image/png"] = base64.b64encode(png).decode("ascii")
    data[PLAIN] = utf8_text(repr(obj) if plain is None else plain)
    return data


def rich(data):
    """Whether a bundle says more than its text/plain."""
    return len(data) > 1


def _size(data):
    """The UTF-8 bytes of a bundle's values, as the host counts them."""
    return sum(len(v) if v.isascii() else len(v.encode("utf-8", "replace")) for v in data.values())


class Displays:
    """The displays of one cell, held to the bounds.

    ``encode(data, dropped)`` returns a display's frame, or None when it is over one
    frame; ``send(frame)`` places it in the cell's output and returns False when the
    cell is no longer running; ``spill(text)`` writes text to stdout.
    """

    def __init__(self, encode, send, spill):
        self._encode = encode
        self._send = send
        self._spill = spill
        # Reentrant: a signal handler may display while this thread decides. The bounds
        # are counted under it, so displays from the cell's threads never pass them.
        self._lock = threading.RLock()
        self.items = 0
        self.size = 0

    def show(self, data):
        """Send bundle data, as the bounds allow."""
        frame, text = self._admit(data)
        if frame is None or not self._send(frame):
            self._spill(text)

    def _admit(self, data):
        """Count data, or its text/plain with a note, within the bounds and return its
        frame; or return no frame, and the text to write to stdout instead."""
        plain = data[PLAIN]
        with self._lock:
            if self.items == MAX_DISPLAY_ITEMS:
                return None, (plain + f"\n[display: past the cell's {MAX_DISPLAY_ITEMS} displays,"
                              " shown as text]\n")
            size = _size(data)
            frame = self._encode(data, 0) if self.size + size <= MAX_DISPLAY_BYTES else None
            if frame is None:
                dropped = sorted(m for m in data if m != PLAIN)
                plain += (f"\n[display: {', '.join(dropped)} dropped: over the cell's"
                          f" {MAX_DISPLAY_BYTES >> 20} MiB of display data or one frame]")
                data = {PLAIN: plain}
                size = _size(data)
                if self.size + size <= MAX_DISPLAY_BYTES:
                    frame = self._encode(data, len(dropped))
            if frame is not None:
                self.items += 1
                self.size += size
            return frame, plain + "\n"
